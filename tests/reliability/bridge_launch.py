"""Start a real bridge for a reliability test: `support.bridge.BridgeProcess` (port 0, stopped
by PID), plus what these tests need on top: TLS servers (whose readiness cannot be probed over
plaintext, so they are probed over the caller's credentials) and the server's resident
memory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
from support.bridge import BridgeProcess


def rss_kib(pid: int) -> int:
    """Resident set size of a process (VmRSS from /proc/<pid>/status), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def start_bridge(
    repository: Path, *args: str, env: dict[str, str] | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> Iterator[BridgeProcess]:
    """Run `jaxport serve --repository REPOSITORY --port 0 ... ARGS` until the block exits,
    ready (health SERVING, probed over `credentials` for a TLS/mTLS bridge)."""
    bridge = BridgeProcess(repository, *args, env=env)
    bridge.start(credentials=credentials)
    try:
        yield bridge
    finally:
        bridge.stop()
