"""`jaxport serve`: argument handling; the server is the native front `jaxport-front`
(bridge/front) and its Python execution workers (`jaxport.bridge.worker`). grpcio's Python
server (`--frontend python`) is retired; `--frontend` is refused in one line (settings.py).

`jaxport serve` checks every flag here (Settings, one-line errors), then what the front would
refuse at start (`preflight`), then replaces itself (exec, same PID) with the front binary,
handing it ONE resolved configuration (`front_config`: `jaxport-front --config JSON`): the
Settings fields the front uses, the worker command (this Python, `-m jaxport.bridge.worker`)
and the flags as given minus `--front-binary`, which every worker reads with the same
Settings. The front has no defaults and parses no flag of its own (docs/front.md).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from jaxport.bridge.settings import Settings, SettingsError

#: Flags of `jaxport serve` the workers do not get (they choose the front).
SERVE_ONLY = ("--front-binary",)
FRONT_NAME = "jaxport-front"
#: Where jaxport's platform wheel carries the front (`make wheel`, bridge/front/build_wheel.py).
PACKAGED_FRONT = Path(__file__).resolve().parent / "bin" / FRONT_NAME


def front_binary(settings: Settings) -> Path:
    """`--front-binary`, else the front inside this package (an install of the platform
    wheel), else jaxport-front next to this Python (a checkout: `make setup` and `make front`
    build it there; the path named when there is none)."""
    if settings.front_binary is not None:
        return settings.front_binary
    if os.access(PACKAGED_FRONT, os.X_OK):
        return PACKAGED_FRONT
    return Path(sys.executable).parent / FRONT_NAME


def _is_serve_only(token: str) -> bool:
    """Whether `token` (`--flag` or `--flag=value`) is one of SERVE_ONLY, abbreviations
    included (argparse, which already accepted the arguments, takes unique prefixes)."""
    name = token.split("=", 1)[0]
    return len(name) > 2 and name.startswith("--") and any(f.startswith(name)
                                                           for f in SERVE_ONLY)


def worker_args(argv: Sequence[str]) -> list[str]:
    """The flags every worker gets: `argv` without the serve-only flags."""
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        token = args[i]
        if _is_serve_only(token):
            i += 1 if "=" in token else 2  # it takes one value
            continue
        out.append(token)
        i += 1
    return out


#: How the front starts a worker (it appends `--listen-fd 3` and `worker_args`).
WORKER_CMD = (sys.executable, "-m", "jaxport.bridge.worker")


def front_config(settings: Settings, argv: Sequence[str],
                 worker_cmd: Sequence[str] = WORKER_CMD) -> dict[str, object]:
    """The front's one resolved configuration (bridge/front/config.go reads it; every field,
    None for a path that is not set): what `settings` (parsed from `argv`) says about
    listening, security, limits, draining and workers, the worker command, and `argv`'s
    flags for the workers."""

    def path(p: Path | None) -> str | None:
        return None if p is None else str(p)

    return {
        "host": settings.host, "port": settings.port, "port_file": path(settings.port_file),
        "metrics_port": settings.metrics_port, "http_port": settings.http_port,
        "workers": settings.workers, "worker_cmd": list(worker_cmd),
        "worker_args": worker_args(argv), "max_message_bytes": settings.max_message_bytes,
        "grace_period_s": settings.grace_period_s, "tls_cert": path(settings.tls_cert),
        "tls_key": path(settings.tls_key), "tls_client_ca": path(settings.tls_client_ca),
        "auth_token_file": path(settings.auth_token_file),
        "pjrt_plugin": None if settings.pjrt_plugin == "none" else settings.pjrt_plugin,
        "max_inflight_per_model": settings.max_inflight_per_model,
        "max_queue_per_model": settings.max_queue_per_model,
        "batch_queue_size": settings.batch_queue_size,
        "trace_otlp_endpoint": settings.trace_otlp_endpoint,
    }


def front_command(binary: Path, argv: Sequence[str], settings: Settings | None = None,
                  worker_cmd: Sequence[str] = WORKER_CMD) -> list[str]:
    """`binary --config JSON` for the `jaxport serve` flags `argv` (`settings`: parsed from
    them already; else parsed here, SettingsError on a mistake)."""
    settings = Settings.from_argv(argv) if settings is None else settings
    config = front_config(settings, argv, worker_cmd)
    return [str(binary), "--config", json.dumps(config, separators=(",", ":"))]


def preflight(settings: Settings) -> str | None:
    """What the front would refuse at start (exit 1), checked before it replaces this process,
    so a mistake reads as `jaxport serve`'s own one line like every other flag error: TLS
    files and token (bridge/security.py; the front's texts are the same), the --port-file
    directory, ports in use (the front reports a port taken in between with its own line)."""
    from jaxport.bridge import security

    try:
        security.check_tls_files(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
        if settings.auth_token_file is not None:
            security.read_token_file(settings.auth_token_file)
    except security.SecurityConfigError as exc:
        return str(exc)
    for port, what in ((settings.port, "cannot listen on"),
                       (settings.metrics_port, "cannot serve metrics on")):
        if port > 0:
            try:
                with socket.create_server((settings.host, port)):
                    pass
            except OSError as exc:
                return f"{what} {settings.host}:{port}: {exc.strerror or exc}"
    if settings.port_file is not None:
        try:
            settings.port_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot write --port-file {settings.port_file}: {exc.strerror or exc}"
    return None


def serve_main(argv: Sequence[str]) -> int:
    """Parse flags/env into Settings and serve until SIGTERM; returns the exit status.

    A user mistake is one line `jaxport serve: error: ...` on stderr and status 2; what the
    front would refuse at start, or a front that is not built (naming `make front` and the
    platform wheel), one line and status 1.
    """
    try:
        settings = Settings.from_argv(argv)
    except SettingsError as exc:
        print(f"jaxport serve: error: {exc}", file=sys.stderr)
        return 2
    from jaxport.bridge.repository import check_root  # light: no jax

    problem = check_root(settings.repository, settings.model_name)
    if problem is not None:
        print(f"jaxport serve: error: {problem}", file=sys.stderr)
        return 2
    problem = preflight(settings)
    if problem is not None:
        print(f"jaxport serve: error: {problem}", file=sys.stderr)
        return 1
    binary = front_binary(settings)
    if not os.access(binary, os.X_OK):
        print(f"jaxport serve: error: the native front {binary} is not built: run "
              "`make front` (needs Go), or install jaxport's platform wheel (it carries "
              "the front)", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, front_command(binary, argv, settings))
    return 1  # not reached: execv replaces this process or raises


def main() -> None:
    """`python -m jaxport.bridge.cli ...`."""
    sys.exit(serve_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
