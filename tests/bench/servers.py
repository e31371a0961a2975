"""The servers `make bench` measures, each a process it starts on 127.0.0.1 and stops by PID:

- `front(...)`: `jaxport-front` built from this tree (build/bench/bin, so every row measures
  the current source) on a repository, with the flags of the row (native engine, or every model
  on the Python workers with `--engine exported`, batching per model);
- `echo(...)`: `tests/bench/wire echo`, a grpc-go server answering ModelInfer with its input
  (generated protobuf types, one copy, no model, no validation): what any Go server costs here;
- Triton: tests/bench/triton.py.

Each yields a `Server` (address, PID); its CPU is the process and its children's
(sysinfo.tree_cpu_s: the workers, Triton's stub).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build" / "bench" / "bin"
FRONT_SRC = ROOT / "bridge" / "front"
WIRE_SRC = ROOT / "tests" / "bench" / "wire"
START_TIMEOUT_S = 600.0


class BenchSetupError(RuntimeError):
    """A tool the bench needs cannot be had (one line, naming it)."""


@dataclass
class Server:
    """A server under test: its gRPC address and the PID whose tree's CPU counts."""

    name: str
    target: str
    pid: int
    started: float  # time.monotonic() at spawn
    ready: float  # time.monotonic() once every model answered ready
    log_path: Path | None = None


def go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go"
                                   if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if found is None:
        raise BenchSetupError("make bench needs Go >= 1.26 (`go` on PATH) to build the front "
                              "and tests/bench/wire and to install ghz")
    return found


def go_build(src: Path, name: str, *pkg: str) -> Path:
    """build/bench/bin/<name> built from `src` (cgo on: the front's native engine)."""
    out = BIN / name
    BIN.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([go(), "build", "-o", str(out), *(pkg or (".",))], cwd=src,
                          env={**os.environ, "CGO_ENABLED": "1"},
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise BenchSetupError(f"go build of {src.relative_to(ROOT)} failed: "
                              f"{proc.stderr.strip()}")
    return out


def build_front() -> Path:
    return go_build(FRONT_SRC, "jaxport-front", "./cmd/jaxport-front")


def build_wire() -> Path:
    return go_build(WIRE_SRC, "wire")


def wait_ready(target: str, models: Sequence[str], proc: subprocess.Popen, deadline: float,
               log_path: Path | None) -> None:
    """Until ServerReady and every model's ModelReady answer true (the process must live)."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pbg

    def tail() -> str:
        return log_path.read_text(errors="replace")[-3000:] if log_path else ""

    with grpc.insecure_channel(target) as ch:
        stub = pbg.GRPCInferenceServiceStub(ch)
        pending = [None, *models]  # None: the server itself
        while pending:
            if proc.poll() is not None:
                raise RuntimeError(f"{target}: server exited with {proc.returncode}:\n{tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target}: {pending} not ready in time:\n{tail()}")
            try:
                if pending[0] is None:
                    ok = stub.ServerReady(pb.ServerReadyRequest(), timeout=2).ready
                else:
                    ok = stub.ModelReady(pb.ModelReadyRequest(name=pending[0]), timeout=2).ready
                if ok:
                    pending.pop(0)
                    continue
            except grpc.RpcError:
                pass
            time.sleep(0.01)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 30 s (this process's own child, by PID)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def front(binary: Path, repo: Path, work: Path, name: str, models: Sequence[str],
          flags: Sequence[str] = ()) -> Iterator[Server]:
    """`jaxport-front --repository repo` on free loopback ports (REST and metrics off: not
    part of the hot path; WARNING logs: nothing per request), cwd the checkout (its
    build/pjrt plugin is `--pjrt-plugin cpu`), `flags` after; ready once every model is."""
    port_file = work / f"{name}.port.json"
    log_path = work / f"{name}.log"
    port_file.unlink(missing_ok=True)
    cmd = [str(binary), "--repository", str(repo), "--host", "127.0.0.1", "--port", "0",
           "--http-port", "-1", "--metrics-port", "-1", "--port-file", str(port_file),
           "--log-level", "INFO", *flags]
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = t0 + START_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text().strip().endswith("}"):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} wrote no port file; log {log_path}")
            time.sleep(0.005)
        target = f"127.0.0.1:{json.loads(port_file.read_text())['grpc_port']}"
        wait_ready(target, models, proc, deadline, log_path)
        yield Server(name, target, proc.pid, t0, time.monotonic(), log_path)
    finally:
        stop(proc)


def worker_flags(workers: int = 1) -> list[str]:
    """Every model on the Python workers (`--engine exported`, the interpreter running this)."""
    return ["--engine", "exported", "--workers", str(workers), "--worker-python", sys.executable]


@contextmanager
def echo(wire: Path) -> Iterator[Server]:
    """`wire echo` for the block."""
    t0 = time.monotonic()
    proc = subprocess.Popen([str(wire), "echo"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        target = proc.stdout.readline().strip()
        if not target:
            raise RuntimeError(f"wire echo exited with {proc.wait()} before listening")
        yield Server("echo", target, proc.pid, t0, time.monotonic())
    finally:
        stop(proc)


def log_records(srv: Server) -> list[dict]:
    """The JSON log records the server wrote so far."""
    out = []
    if srv.log_path is None or not srv.log_path.exists():
        return out
    for line in srv.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def wire_call(wire: Path, target: str, expect: str, model: str, calls: int) -> list[float]:
    """`calls` 16 MiB round trips with the jaxport Go client, each answer checked; seconds."""
    proc = subprocess.run([str(wire), "call", "--target", target, "--expect", expect,
                           "--model", model, "--n", str(calls)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"16 MiB Go client against {target}: {proc.stderr.strip()}")
    return [ms / 1e3 for ms in json.loads(proc.stdout)["latencies_ms"]]
