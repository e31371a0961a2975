"""`jaxport serve`: argument handling; the server itself lives in `jaxport.bridge.server`."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from jaxport.bridge.settings import Settings, SettingsError


def serve_main(argv: Sequence[str]) -> int:
    """Parse flags/env into Settings and serve until SIGTERM; returns the exit status.

    A user mistake is one line `jaxport serve: error: ...` on stderr and status 2.
    """
    try:
        settings = Settings.from_argv(argv)
    except SettingsError as exc:
        print(f"jaxport serve: error: {exc}", file=sys.stderr)
        return 2
    if not settings.repository.is_dir():
        print(f"jaxport serve: error: --repository {settings.repository} is not a directory",
              file=sys.stderr)
        return 2
    from jaxport.bridge import server  # heavy (jax, grpc): only once the flags are valid

    return server.run(settings)


def main() -> None:
    """`python -m jaxport.bridge.cli ...`."""
    sys.exit(serve_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
