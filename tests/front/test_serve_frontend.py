"""`jaxport serve --frontend native|python` (bridge/cli.py): the native front is exec'd with the
same flags (same PID, same port file), flags of one frontend are refused by the other in one
line, a front that is not built is one line naming `make front` and `--frontend python`, and
the errors `jaxport serve` gives at start are the same lines with either frontend."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
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
    server = BridgeProcess(repository, "--frontend", "native", "--front-binary",
                           str(front_binary), "--workers", "1", frontend="default",
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
    assert server.proc is not None and server.proc.returncode == 0


def test_serve_uses_the_native_front_with_two_workers_by_default(
        front_binary: Path, repository: Path, tmp_path: Path) -> None:
    """Plain `jaxport serve` (no --frontend, no --workers) is the native front, 2 workers."""
    server = BridgeProcess(repository, frontend="default",
                           env={"JAXPORT_FRONT_BINARY": str(front_binary)},
                           workdir=tmp_path / "serve")
    assert "--frontend" not in server.command
    with server:
        assert "jaxport front: listening on 127.0.0.1:" in server.stdout_text()
        assert sorted(r["worker"] for r in worker_ready_records(server)) == [0, 1]
        assert stub(server).ServerReady(pb.ServerReadyRequest(), timeout=60).ready


def test_python_frontend_is_grpcio_in_one_process(repository: Path, tmp_path: Path) -> None:
    with BridgeProcess(repository, frontend="python", workdir=tmp_path / "py") as server:
        assert "jaxport serve: listening on 127.0.0.1:" in server.stdout_text()
        assert worker_ready_records(server) == []
        assert stub(server).ServerReady(pb.ServerReadyRequest(), timeout=60).ready


def test_missing_front_binary_is_one_line(repository: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "jaxport-front"
    proc = serve("--repository", str(repository), "--frontend", "native", "--front-binary",
                 str(missing))
    assert proc.returncode == 1
    assert one_error_line(proc) == (
        f"jaxport serve: error: the native front {missing} is not built: run `make front` "
        "(needs Go), or install jaxport's platform wheel (it carries the front), or serve with "
        "`--frontend python`")


@pytest.mark.parametrize(("args", "env", "given"), [
    (("--workers", "3"), {}, "--workers"),
    (("--http-port", "8080"), {}, "--http-port"),
    (("--front-binary", "/x"), {"JAXPORT_WORKERS": "3"}, "--front-binary"),
])
def test_native_only_flags_are_refused_by_the_python_frontend(
        repository: Path, args: tuple[str, ...], env: dict[str, str], given: str) -> None:
    proc = serve("--repository", str(repository), "--frontend", "python", *args, env=env)
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"jaxport serve: error: {given} is a setting of the native front; drop it, or serve "
        "with --frontend native")


def test_native_settings_from_the_environment_are_ignored_by_the_python_frontend(
        repository: Path) -> None:
    proc = serve("--repository", str(repository), "--frontend", "python", "--port", "70000",
                 env={"JAXPORT_WORKERS": "3", "JAXPORT_FRONT_BINARY": "/x"})
    assert proc.returncode == 2
    assert one_error_line(proc) == "jaxport serve: error: --port must be in 0..65535, got 70000"


def test_bad_frontend_is_one_line(repository: Path) -> None:
    proc = serve("--repository", str(repository), "--frontend", "rust")
    assert proc.returncode == 2
    assert "invalid choice: 'rust'" in one_error_line(proc)


@pytest.mark.parametrize("frontend", ["native", "python"])
def test_start_errors_are_the_same_line_with_either_frontend(
        front_binary: Path, repository: Path, tmp_path: Path, frontend: str) -> None:
    """TLS half configured, port in use, unwritable port file: one line, exit 1, the same text
    whichever frontend serves (the native one is checked before the exec)."""
    base = ["--repository", str(repository), "--frontend", frontend, "--metrics-port", "-1"]
    if frontend == "native":
        base += ["--front-binary", str(front_binary)]
    tls = serve(*base, "--port", "0", "--tls-cert", str(tmp_path / "cert.pem"))
    assert tls.returncode == 1
    assert one_error_line(tls) == ("jaxport serve: error: TLS needs both --tls-cert and "
                                   "--tls-key; --tls-key is missing")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = serve(*base, "--port", str(port))
    assert busy.returncode == 1  # (grpcio's C core logs a line of its own beside ours)
    assert f"jaxport serve: error: cannot listen on 127.0.0.1:{port}" in busy.stderr
    assert "Traceback" not in busy.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = serve(*base, "--port", "0", "--port-file", str(blocker / "ports.json"))
    assert unwritable.returncode == 1
    assert one_error_line(unwritable).startswith(
        f"jaxport serve: error: cannot write --port-file {blocker / 'ports.json'}")
