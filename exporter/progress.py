"""A minimal progress display on stderr for long export steps (silent in quiet mode)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

# Byte-counted steps smaller than this finish too fast to need a progress display.
LARGE_BYTES = 8 << 20


class Progress:
    """Reports named steps and byte progress of one long step.

    On a terminal the byte progress redraws one line; elsewhere (logs, CI) it prints at most
    one line per 10% so logs stay short. `quiet=True` prints nothing.
    """

    def __init__(self, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._total = 0
        self._done = 0
        self._label = ""
        self._last_decile = -1
        self._start = 0.0

    def step(self, message: str) -> None:
        """Announce the start of a step."""
        if not self.quiet:
            print(f"jaxport: {message}", file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        """A warning: printed even when quiet (it is about the artifact, not progress)."""
        print(f"jaxport: warning: {message}", file=self.stream, flush=True)

    def start_bytes(self, label: str, total: int) -> None:
        """Begin a byte-counted step (e.g. writing weights); small ones report once at the end."""
        self._label, self._total, self._done = label, total, 0
        self._last_decile = -1
        self._start = time.monotonic()
        self.advance(0)

    def advance(self, nbytes: int) -> None:
        """Record `nbytes` more bytes done."""
        self._done += nbytes
        if self.quiet or self._total < LARGE_BYTES:
            return
        frac = 1.0 if self._total == 0 else min(1.0, self._done / self._total)
        text = (
            f"jaxport: {self._label}: {self._done / 2**20:.1f}/{self._total / 2**20:.1f} MiB "
            f"({frac:.0%}, {time.monotonic() - self._start:.1f}s)"
        )
        if self._tty:
            print("\r" + text, end="", file=self.stream, flush=True)
        elif int(frac * 10) > self._last_decile:
            self._last_decile = int(frac * 10)
            print(text, file=self.stream, flush=True)

    def finish_bytes(self) -> None:
        """End the byte-counted step."""
        if self.quiet:
            return
        if self._total < LARGE_BYTES:
            print(f"jaxport: {self._label}: {self._total / 2**20:.1f} MiB", file=self.stream,
                  flush=True)
        elif self._tty:
            print(file=self.stream, flush=True)
