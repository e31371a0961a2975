"""`jaxport serve`: replaces itself (exec, same PID) with the server, `jaxport-front`.

The front defines, checks and documents every flag (bridge/front/config; `jaxport serve --help`
is its help) and reports every mistake in one line under the name `jaxport serve`. This module
only finds the binary and adds `--worker-python` (this interpreter, which has jaxport, for the
execution workers the front starts when a model needs them) unless the user chose one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

FRONT_NAME = "jaxport-front"
#: Where jaxport's platform wheel carries the front (`make wheel`, bridge/front/build_wheel.py).
PACKAGED_FRONT = Path(__file__).resolve().parent / "bin" / FRONT_NAME
#: argv[0] the front is given: its messages then read `jaxport serve: error: ...`.
PROG = "jaxport serve"


def _flag_value(argv: Sequence[str], name: str) -> str | None:
    """The last value of `--name VALUE` / `--name=VALUE` in `argv` (names in full, as the front
    takes them), or None."""
    value = None
    for i, token in enumerate(argv):
        if token == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith(name + "="):
            value = token[len(name) + 1:]
    return value


def front_binary(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[Path, str | None]:
    """The front to run and what named it (None: found, not named): `--front-binary`, else
    JAXPORT_FRONT_BINARY, else the one inside this package (an install of the platform wheel),
    else jaxport-front next to this Python (a checkout: `make setup` / `make front`)."""
    flag = _flag_value(argv, "--front-binary")
    if flag:
        return Path(flag), f"--front-binary {flag}"
    env = environ.get("JAXPORT_FRONT_BINARY")
    if env:
        return Path(env), f"JAXPORT_FRONT_BINARY={env}"
    if os.access(PACKAGED_FRONT, os.X_OK):
        return PACKAGED_FRONT, None
    return Path(sys.executable).parent / FRONT_NAME, None


def front_argv(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The front's argv: argv[0] PROG, the user's flags as given, then `--worker-python` this
    interpreter unless a flag or JAXPORT_WORKER_PYTHON chose one."""
    out = [PROG, *argv]
    if _flag_value(argv, "--worker-python") is None and "JAXPORT_WORKER_PYTHON" not in environ:
        out += ["--worker-python", sys.executable]
    return out


def binary_problem(binary: Path, named_by: str | None) -> str | None:
    """Why `binary` cannot be run (one line naming what chose it), or None."""
    if named_by is None:
        if binary.is_file() and os.access(binary, os.X_OK):
            return None
        return (f"the native front {binary} is not built: run `make front` (needs Go), or "
                "install jaxport's platform wheel (it carries the front)")
    if not binary.exists():
        return f"{named_by}: no such file"
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return f"{named_by}: not an executable file"
    return None


def serve_main(argv: Sequence[str]) -> int:
    """Exec the front with `argv`; returns (status 1, one line) only when there is none to run."""
    binary, named_by = front_binary(argv, os.environ)
    problem = binary_problem(binary, named_by)
    if problem is not None:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, front_argv(argv, os.environ))
    return 1  # not reached: execv replaces this process or raises


def main() -> None:
    """`python -m jaxport.bridge.cli ...`."""
    sys.exit(serve_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
