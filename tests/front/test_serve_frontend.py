"""`jaxport serve`'s start errors are the front's one line under the name `jaxport serve`
(`jaxport serve` execs the front with argv[0] = "jaxport serve"; the exec, the lookup and the
usage mistakes are tests/bridge/test_serve_cli.py's): TLS half configured, the gRPC port or the
REST port in use, an unwritable port file: exit 1 with nothing started (no model loaded, no
worker), and the retired `--frontend` (grpcio's Python server) is a usage error (exit 2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from support.bridge import serve_command


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    return subprocess.run([*serve_command(), *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **(env or {})})


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line that is not a JSON log record (the native engine's startup lines and the
    plugin's own stderr are filtered: they are not the error)."""
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("{")
             and "jaxport serve: error:" in ln]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def log_records(proc: subprocess.CompletedProcess[str]) -> list[dict]:
    return [json.loads(ln) for ln in proc.stderr.splitlines() if ln.startswith("{")]


@pytest.mark.parametrize(("args", "env"), [
    (("--frontend", "python"), {}),
    (("--frontend=native",), {}),
    ((), {"JAXPORT_FRONTEND": "python"}),
])
def test_the_retired_frontend_flag_is_refused_in_one_line(
        front_binary: Path, repository: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    proc = serve("--repository", str(repository), "--front-binary", str(front_binary), *args,
                 env=env)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc).startswith(
        "jaxport serve: error: --frontend (JAXPORT_FRONTEND) was removed: jaxport serve always "
        "runs the native "), proc.stderr


def test_start_errors_are_one_line_and_start_nothing(
        front_binary: Path, repository: Path, tmp_path: Path) -> None:
    base = ["--repository", str(repository), "--metrics-port", "-1",
            "--front-binary", str(front_binary)]
    tls = serve(*base, "--port", "0", "--tls-cert", str(tmp_path / "cert.pem"))
    assert tls.returncode == 1, tls.stderr
    assert one_error_line(tls) == ("jaxport serve: error: TLS needs both --tls-cert and "
                                   "--tls-key; --tls-key is missing")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = serve(*base, "--port", str(port))
        rest_busy = serve(*base, "--port", "0", "--http-port", str(port))
    assert busy.returncode == 1, busy.stderr
    assert one_error_line(busy).startswith(
        f"jaxport serve: error: cannot listen on 127.0.0.1:{port}")
    assert rest_busy.returncode == 1, rest_busy.stderr
    line = one_error_line(rest_busy)
    assert line.startswith(f"jaxport serve: error: cannot serve REST on --http-port: cannot "
                           f"listen on 127.0.0.1:{port}"), line
    assert "address already in use" in line
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = serve(*base, "--port", "0", "--port-file", str(blocker / "ports.json"))
    assert unwritable.returncode == 1, unwritable.stderr
    assert one_error_line(unwritable).startswith(
        f"jaxport serve: error: cannot write --port-file {blocker / 'ports.json'}")
    for proc in (tls, busy, rest_busy, unwritable):  # nothing loaded, no worker started
        started = [r.get("msg") for r in log_records(proc)]
        assert "loading model" not in started and "worker started" not in started, proc.stderr
