"""`Gate`: the test side of the server's test gate (bridge/front/dispatch/gate.go: the front
gates every execution, whichever engine runs it; a marker's pid is the front's).

A bridge started with `env=gate.env` holds every execution of model M while the test holds M:

    gate = Gate(tmp_path / "gate")
    with BridgeProcess(repo, env=gate.env) as bridge, gate.holding("slow"):
        call = stub.ModelInfer.future(request, timeout=120)
        gate.wait_held("slow", 1, calls=[call])   # now provably executing, and it stays so
        ...                                       # until the block ends (the hold is removed)

So a test that needs a request "still running" waits on its own signal, never on how long a
model happens to compute on a busy machine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from support.waiting import wait_until

__all__ = ["ENV", "Gate"]

ENV = "JAXPORT_TEST_GATE_DIR"  # read by the front (bridge/front/dispatch/gate.go)


class Gate:
    """Hold files and the bridge's `entered`/`left` markers in one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def env(self) -> dict[str, str]:
        """Environment that enables the gate in a bridge process, on this directory."""
        return {ENV: str(self.directory)}

    def hold(self, model: str) -> None:
        """From now on, executions of `model` wait (already running ones are not affected)."""
        (self.directory / f"{model}.hold").touch()

    def release(self, model: str) -> None:
        """Let every held and future execution of `model` run."""
        (self.directory / f"{model}.hold").unlink(missing_ok=True)

    @contextlib.contextmanager
    def holding(self, model: str) -> Iterator[None]:
        """Hold `model` for the block; released on exit, also when the block fails. After a
        block that succeeded, also wait until every held execution has passed the gate, so
        the next count of `held()` starts from zero."""
        self.hold(model)
        try:
            yield
        except BaseException:
            self.release(model)
            raise
        self.release(model)
        self.wait_held(model, 0, at_most=True)

    def entered(self, model: str) -> int:
        """Executions of `model` that have reached the gate while it was held, so far."""
        return len(self._tags(model, "entered"))

    def held(self, model: str) -> int:
        """Executions of `model` waiting at the gate right now, in bridges still running (a
        bridge that exited or was killed while held never marks its executions `left`; one
        gate directory may serve several bridges)."""
        return len(self.held_tags(model))

    def held_tags(self, model: str) -> set[str]:
        """`<pid>.<n>` of each execution counted by `held` (pid = the executing process)."""
        waiting = self._tags(model, "entered") - self._tags(model, "left")
        return {tag for tag in waiting if _running(int(tag.split(".", 1)[0]))}

    def forget(self, model: str, tag: str) -> None:
        """Remove the `entered` marker of an execution that will never leave (its process
        was killed), so `entered` counts only executions that can still finish."""
        (self.directory / f"{model}.entered.{tag}").unlink()

    def _tags(self, model: str, state: str) -> set[str]:
        """`<pid>.<n>` of every `<model>.<state>.<pid>.<n>` marker."""
        prefix = f"{model}.{state}."
        return {p.name[len(prefix):] for p in self.directory.glob(f"{prefix}*")}

    def wait_held(self, model: str, n: int, calls: Iterable[object] = (),
                  timeout: float = 120.0, at_most: bool = False) -> None:
        """Block until `n` executions of `model` are held at the gate (`at_most`: until no
        more than `n` are).

        `calls` (futures with `done()`/`result()`): if one of them ends first, its outcome is
        raised instead of waiting for the timeout (it never reached execution).
        """
        held = (lambda: self.held(model) <= n) if at_most else (lambda: self.held(model) >= n)
        try:
            wait_until(held, f"executions of {model!r} held at the test gate", timeout, calls)
        except TimeoutError:
            raise TimeoutError(f"{self.held(model)} executions of {model!r} held at the test "
                               f"gate after {timeout:.0f} s, wanted "
                               f"{'at most' if at_most else 'at least'} {n}") from None


def _running(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie (exited, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
