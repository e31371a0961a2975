"""How the bench starts the server it measures: `jaxport serve` (the native front and its Python
workers, exactly what users run) or, for the transport floor, the same front with a worker
command of the bench's choosing (`tests.bench.floor_worker`).

Run as a module it is that second launcher: the same hand-off as `jaxport serve`
(`jaxport.bridge.cli.front_command`: the flags checked by Settings, one resolved
configuration), another `worker_cmd`. The front replaces this process (exec, same PID), as
with `jaxport serve`.

    python -m tests.bench.front_launch BINARY "WORKER CMD" [jaxport serve flags...]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jaxport.bridge import cli
from jaxport.bridge.settings import Settings

#: The transport floor's worker: `jaxport.bridge.worker` answering ModelInfer from a cache.
FLOOR_WORKER = (sys.executable, "-m", "tests.bench.floor_worker")
#: Every model on the Python workers (`jaxport serve`'s default executes eligible models in the
#: front's native engine, docs/native-engine.md): the rows that measure the workers, and the
#: transport floor, whose cached answers come from its workers, say it explicitly.
WORKERS_ONLY = ("--pjrt-plugin", "none")


def serve_flags(repo: Path, log_level: str, extra: Sequence[str] = ()) -> list[str]:
    """The bench's `jaxport serve` flags: `repo`, a free loopback port, metrics off (not part
    of the hot path; nothing is logged per request at INFO either), then `extra`."""
    return ["--repository", str(repo), "--host", "127.0.0.1", "--port", "0", "--metrics-port",
            "-1", "--log-level", log_level, *extra]


def command(binary: Path | None, flags: Sequence[str],
            worker_cmd: Sequence[str] | None = None) -> list[str]:
    """The command serving the `jaxport serve` flags `flags` through the front `binary` (None:
    the one `jaxport serve` picks): `jaxport serve` itself, or with `worker_cmd` (e.g.
    FLOOR_WORKER) this launcher. Either way the process started is the front (same PID) and
    the workers are its children."""
    if worker_cmd is None:
        front = [] if binary is None else ["--front-binary", str(binary)]
        return [str(Path(sys.executable).parent / "jaxport"), "serve", *front, *flags]
    if binary is None:
        binary = cli.front_binary(Settings.from_argv(list(flags)))
    return [sys.executable, "-m", "tests.bench.front_launch", str(binary), " ".join(worker_cmd),
            *flags]


def main(argv: list[str]) -> None:
    binary, worker_cmd, *flags = argv
    os.execv(binary, cli.front_command(Path(binary), flags, worker_cmd=worker_cmd.split()))


if __name__ == "__main__":
    main(sys.argv[1:])
