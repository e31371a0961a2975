"""TEST-ONLY hook: a test holds executions of a model until it releases them.

Tests that need a request to be "still running" (a slot occupied, requests in flight during a
drain, a deadline passing mid-execution) cannot rely on a model that merely computes for a
while: a busy machine stretches or shrinks any duration. With this hook the bridge waits on the
TEST's signal instead, never on a clock.

Enabled only when the environment variable `JAXPORT_TEST_GATE_DIR` names a directory when the
bridge starts (read once, at import). Then every execution of model M (`Model.execute`) first
looks for `<dir>/M.hold`:

- absent: it runs at once;
- present: it announces itself by creating `<dir>/M.entered.<pid>.<n>` (a new file per
  execution, so a test counts the executions that are held), then waits until the test removes
  `M.hold`, and after that creates `<dir>/M.left.<pid>.<n>` and runs. As a safety net against a
  test that dies holding the gate, it proceeds after `SAFETY_S` seconds and logs an error.

The test's protocol (tests/support/gate.py): create `M.hold`, send requests, wait until the
expected number of `M.entered.*` files exist (they are provably executing and held), do what
needs them running, then delete `M.hold`.

Unset (every real deployment): `gate()` is one module-global check and returns.

Trust: only whoever starts the bridge sets its environment, so only the operator can enable
this. When enabled, anyone who can create files in that directory can stall every execution
of any model for up to `SAFETY_S` seconds each (a denial of service); it reveals nothing and
runs nothing. Never set it outside tests, and point it at a private temporary directory.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from pathlib import Path

__all__ = ["ENV", "POLL_S", "SAFETY_S", "TestGate", "gate"]

ENV = "JAXPORT_TEST_GATE_DIR"
# A held execution gives up after this long (the test that holds it has died or hung).
SAFETY_S = 120.0
# How often a held execution looks for the hold file again (it sleeps, the GIL is free).
POLL_S = 0.005

log = logging.getLogger("jaxport.bridge.testing")


class TestGate:
    """Holds executions of model M while `<directory>/M.hold` exists (see the module doc)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def wait(self, model: str) -> None:
        """Return at once unless `M.hold` exists; else announce, wait for its removal, return."""
        hold = self.directory / f"{model}.hold"
        if not hold.exists():
            return
        with self._lock:
            tag = f"{os.getpid()}.{next(self._ids)}"
        (self.directory / f"{model}.entered.{tag}").touch()
        log.info("test gate: execution held", extra={"fields": {"model": model, "tag": tag}})
        give_up = time.monotonic() + SAFETY_S
        while hold.exists():
            if time.monotonic() > give_up:
                log.error("test gate: hold file still there after the safety bound; proceeding",
                          extra={"fields": {"model": model, "tag": tag, "seconds": SAFETY_S}})
                break
            time.sleep(POLL_S)
        (self.directory / f"{model}.left.{tag}").touch()
        log.info("test gate: execution released", extra={"fields": {"model": model, "tag": tag}})


def _from_env() -> TestGate | None:
    directory = os.environ.get(ENV)
    return TestGate(directory) if directory else None


GATE: TestGate | None = _from_env()


def gate(model: str) -> None:
    """Called at the start of every execution of `model`; a no-op unless the gate is enabled."""
    if GATE is not None:
        GATE.wait(model)
