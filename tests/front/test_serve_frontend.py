"""`jaxport serve` (bridge/cli.py) runs the native front: it execs the front with its one
resolved configuration (same PID, same port file), two workers unless told otherwise; a front
that is not built is one line naming `make front` and the platform wheel; the retired
`--frontend` (grpcio's Python server) is refused in one line; and what the front would refuse
at start is `jaxport serve`'s own one line, checked before the exec (`cli.preflight`)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from jaxport.bridge.settings import RETIRED_FRONTEND
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess, serve_command
from test_front import mlp_reference, mlp_request, stub, worker_ready_records


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    return subprocess.run([*serve_command(), *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **(env or {})})


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("{")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_serve_execs_the_native_front(front_binary: Path, repository: Path,
                                      tmp_path: Path) -> None:
    server = BridgeProcess(repository, "--front-binary", str(front_binary), "--workers", "1",
                           workdir=tmp_path / "serve")
    with server:
        x = np.ones((2, 8), np.float32)
        out = stub(server).ModelInfer(mlp_request(x), timeout=60)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(x), rtol=1e-5, atol=1e-6)
        # exec: the process BridgeProcess started IS the front (the port file's pid).
        assert "jaxport front: listening on 127.0.0.1:" in server.stdout_text()
        assert [r["worker"] for r in worker_ready_records(server)] == [0]
        assert stub(server).ServerReady(pb.ServerReadyRequest(), timeout=60).ready
        # `jaxport serve --help` names every key of the port file the front wrote.
        written = json.loads(server.port_file.read_text())
        help_text = subprocess.run([*serve_command(), "--help"], capture_output=True, text=True,
                                   timeout=60).stdout.replace("\n", "").replace(" ", "")
        assert sorted(written) == ["grpc_port", "http_port", "metrics_port", "pid"]
        assert all(f'"{key}":' in help_text for key in written), help_text
    assert server.proc is not None and server.proc.returncode == 0


def test_serve_uses_the_native_front_with_two_workers_by_default(
        front_binary: Path, repository: Path, tmp_path: Path) -> None:
    """Plain `jaxport serve` (no --workers) is the native front, 2 workers."""
    server = BridgeProcess(repository,
                           env={"JAXPORT_FRONT_BINARY": str(front_binary)},
                           workdir=tmp_path / "serve")
    with server:
        assert "jaxport front: listening on 127.0.0.1:" in server.stdout_text()
        assert sorted(r["worker"] for r in worker_ready_records(server)) == [0, 1]
        assert stub(server).ServerReady(pb.ServerReadyRequest(), timeout=60).ready


def test_missing_front_binary_is_one_line(repository: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "jaxport-front"
    proc = serve("--repository", str(repository), "--front-binary", str(missing))
    assert proc.returncode == 1
    assert one_error_line(proc) == (
        f"jaxport serve: error: the native front {missing} is not built: run `make front` "
        "(needs Go), or install jaxport's platform wheel (it carries the front)")


@pytest.mark.parametrize(("args", "env"), [
    (("--frontend", "python"), {}),
    (("--frontend", "native"), {}),
    (("--frontend=native",), {}),
    ((), {"JAXPORT_FRONTEND": "python"}),
])
def test_the_retired_frontend_flag_is_refused_in_one_line(
        repository: Path, args: tuple[str, ...], env: dict[str, str]) -> None:
    """grpcio's Python server is gone: `--frontend` (any value, or JAXPORT_FRONTEND) is a
    usage error naming that, never silently ignored."""
    proc = serve("--repository", str(repository), *args, env=env)
    assert proc.returncode == 2
    assert one_error_line(proc) == f"jaxport serve: error: {RETIRED_FRONTEND}"
    assert RETIRED_FRONTEND.startswith("--frontend (JAXPORT_FRONTEND) was removed: jaxport "
                                       "serve always runs the native front")


def test_start_errors_are_one_line_before_the_exec(
        front_binary: Path, repository: Path, tmp_path: Path) -> None:
    """TLS half configured, port in use, unwritable port file: one `jaxport serve` line,
    exit 1 (checked before the front replaces the process)."""
    base = ["--repository", str(repository), "--metrics-port", "-1",
            "--front-binary", str(front_binary)]
    tls = serve(*base, "--port", "0", "--tls-cert", str(tmp_path / "cert.pem"))
    assert tls.returncode == 1
    assert one_error_line(tls) == ("jaxport serve: error: TLS needs both --tls-cert and "
                                   "--tls-key; --tls-key is missing")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = serve(*base, "--port", str(port))
    assert busy.returncode == 1
    assert one_error_line(busy).startswith(
        f"jaxport serve: error: cannot listen on 127.0.0.1:{port}")
    # The REST port in use: the front's own line, exit 1, and no worker was started (it listens
    # on --http-port before starting any).
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = serve(*base, "--port", "0", "--http-port", str(port))
    assert busy.returncode == 1
    assert one_error_line(busy).startswith("jaxport front: error: cannot serve REST on "
                                           f"--http-port: cannot listen on 127.0.0.1:{port}")
    assert "address already in use" in one_error_line(busy)
    started = [json.loads(ln) for ln in busy.stderr.splitlines() if ln.startswith("{")]
    assert not [r for r in started if r.get("msg") == "worker started"], busy.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = serve(*base, "--port", "0", "--port-file", str(blocker / "ports.json"))
    assert unwritable.returncode == 1
    assert one_error_line(unwritable).startswith(
        f"jaxport serve: error: cannot write --port-file {blocker / 'ports.json'}")
