"""The one poll-until helper: tests wait on a condition the system reports (a counter, a log
record, a status, a refused port), never on a fixed sleep standing in for it (tests/README.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

#: Bounds a hang only; a condition that holds returns at once.
TIMEOUT_S = 120.0


def wait_until(condition: Callable[[], object], what: str, timeout: float = TIMEOUT_S,
               calls: Iterable[Future] = ()) -> None:
    """Poll `condition` until it is true; TimeoutError naming `what` after `timeout` s. A future
    in `calls` that completes first fails the wait with its outcome (it had to be still
    waiting: a held batch, a gated execution)."""
    calls = list(calls)
    end = time.monotonic() + timeout
    while not condition():
        for call in calls:
            if call.done():
                call.result()  # raises the call's error, if it failed
                raise AssertionError(f"a call completed while it had to wait: {what}")
        if time.monotonic() > end:
            raise TimeoutError(f"not after {timeout:.0f} s: {what}")
        time.sleep(0.02)
