"""Start the native front as `jaxport serve` does, with a worker command of the bench's choosing
(the transport floor's `tests.bench.floor_worker`): the same hand-off
(`jaxport.bridge.cli.front_command`: the flags checked by Settings, one resolved configuration),
another `worker_cmd`. The front replaces this process (exec, same PID), as with `jaxport serve`.

    python -m tests.bench.front_launch BINARY "WORKER CMD" [jaxport serve flags...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jaxport.bridge import cli


def main(argv: list[str]) -> None:
    binary, worker_cmd, *flags = argv
    os.execv(binary, cli.front_command(Path(binary), flags, worker_cmd=worker_cmd.split()))


if __name__ == "__main__":
    main(sys.argv[1:])
