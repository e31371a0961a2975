"""Live faults of the worker backend, on a front serving every model on two Python workers
(--pjrt-plugin none), with the test gate and system shared memory:

* a worker SIGKILLed while it executes a call (seen from its CPU time: the only work given to
  the workers is that call): the call ends UNAVAILABLE, calls to the other worker meanwhile
  succeed with the right answer, the worker is restarted (its models re-loaded) and serves
  again;
* a call held past its deadline (at the front's test gate, or on a SIGSTOPped worker): its
  caller gets DEADLINE_EXCEEDED, the front answers everything else meanwhile (metadata,
  health: the front's own answers need no worker);
* 16 MiB tensors through system shared memory (registered with the front, executed by a
  worker), answers equal to JAX; garbage on the wire leaves the front serving.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import front_command, worker_records
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess
from support.gate import Gate
from support.waiting import wait_until
from test_front import (
    WORKER_GONE,
    mlp_reference,
    mlp_request,
    rpc_error,
    slow_request,
    stub,
)


@pytest.fixture(scope="module")
def fault_gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("faults-gate"))


@pytest.fixture(scope="module")
def faulty(front_binary: Path, repository: Path, fault_gate: Gate,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """A front with two workers, the test gate and system shared memory (its own: these tests
    kill and stop its workers)."""
    # --pjrt-plugin none: the workers are the subject (the native engine would answer without them).
    with BridgeProcess(repository, "--system-shared-memory", "--pjrt-plugin", "none",
                       env=fault_gate.env,
                       workdir=tmp_path_factory.mktemp("faults"),
                       command=front_command(front_binary, "--workers", "2")) as f:
        yield f


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def running_workers(server: BridgeProcess) -> dict[int, int]:
    """worker index -> pid of the latest start of each worker process."""
    out: dict[int, int] = {}
    for r in worker_records(server):
        out[int(r["worker"])] = int(r["pid"])
    return out


def test_sigkill_while_executing_fails_only_that_call(faulty: BridgeProcess) -> None:
    f = stub(faulty)
    x = np.ones((2, 8), np.float32)
    mlp_reference(x)  # compile JAX's reference first
    f.ModelInfer(mlp_request(x), timeout=60)
    workers = running_workers(faulty)
    assert len(workers) == 2, workers
    before = {pid: cpu_seconds(pid) for pid in workers.values()}
    call = f.ModelInfer.future(slow_request(200_000), timeout=300)  # seconds of work
    # The executing worker is the one whose CPU time grows (nothing else runs on them).
    victim = None
    end = time.monotonic() + 120
    while victim is None:
        assert time.monotonic() < end and not call.done(), "the slow call never ran"
        for pid, t in before.items():
            if cpu_seconds(pid) > t + 0.5:
                victim = pid
        time.sleep(0.02)
    os.kill(victim, signal.SIGKILL)
    err = call.exception(timeout=120)
    assert isinstance(err, grpc.RpcError)
    assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, WORKER_GONE)
    # Meanwhile and after, calls succeed (the survivor, then the restarted worker too).
    for i in range(8):
        out = f.ModelInfer(mlp_request(x, rid=f"after{i}"), timeout=120)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(x), rtol=1e-5, atol=1e-6)
    wait_until(lambda: victim not in running_workers(faulty).values(), "killed worker restarted")
    assert len(running_workers(faulty)) == 2


def test_call_held_past_the_deadline_gives_deadline_exceeded(
        faulty: BridgeProcess, fault_gate: Gate) -> None:
    f = stub(faulty)
    with fault_gate.holding("slow"):
        call = f.ModelInfer.future(slow_request(), timeout=3)
        err = call.exception(timeout=120)
        assert isinstance(err, grpc.RpcError)
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # Held there, the other callers are answered.
        x = np.ones((2, 8), np.float32)
        out = f.ModelInfer(mlp_request(x), timeout=60)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(x), rtol=1e-5, atol=1e-6)
    assert f.ModelInfer(slow_request(), timeout=120).id == "slow"


def test_stopped_worker_process_gives_deadline_exceeded(front_binary: Path, repository: Path,
                                                        tmp_path: Path) -> None:
    """The only worker is SIGSTOPped: calls it would execute end DEADLINE_EXCEEDED, while the
    front answers metadata and health itself; SIGCONT and it serves again."""
    # --pjrt-plugin none: the stopped worker is the subject (the native engine would answer).
    with BridgeProcess(repository, "--pjrt-plugin", "none", workdir=tmp_path / "front",
                       command=front_command(front_binary, "--workers", "1")) as server:
        (record,) = worker_records(server)
        pid = int(record["pid"])
        f = stub(server)
        os.kill(pid, signal.SIGSTOP)
        try:
            err = rpc_error(f.ModelInfer, mlp_request(np.ones((2, 8), np.float32)), timeout=2)
            assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert f.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), timeout=30).name == "mlp"
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            with server.channel() as channel:
                health = health_pb2_grpc.HealthStub(channel)
                assert health.Check(health_pb2.HealthCheckRequest(), timeout=30).status == (
                    health_pb2.HealthCheckResponse.SERVING)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert f.ModelInfer(mlp_request(np.ones((2, 8), np.float32)), timeout=60).id == "r1"
        assert [int(r["pid"]) for r in worker_records(server)] == [pid]  # not restarted


def test_16_mib_through_system_shared_memory(faulty: BridgeProcess) -> None:
    from jaxport.client import InferenceClient, SharedMemoryRegion

    tag = f"jaxport_front_{os.getpid()}"
    with InferenceClient(faulty.address, timeout=120) as client:
        meta = client.model_metadata("big")
    ((elements,),) = [tuple(i.shape) for i in meta.inputs]
    (output,) = [o.name for o in meta.outputs]
    x = np.random.default_rng(7).standard_normal(elements).astype(np.float32)
    nbytes = x.nbytes
    assert nbytes == 16 << 20
    with InferenceClient(faulty.address, timeout=120) as client, \
            SharedMemoryRegion("in", f"/{tag}_in", nbytes) as r_in, \
            SharedMemoryRegion("out", f"/{tag}_out", nbytes) as r_out:
        client.register_system_shared_memory(r_in)
        client.register_system_shared_memory(r_out)
        try:
            for _ in range(3):  # the front reads and writes the regions; a worker executes
                result = client.infer("big", {"x": x}, shared_memory_inputs={"x": (r_in, 0)},
                                      shared_memory_outputs={output: (r_out, 0)})
                want = x * np.float32(2.0) + np.float32(0.5)
                np.testing.assert_array_equal(result[output], want)
                np.testing.assert_array_equal(
                    np.frombuffer(r_out.view(0, nbytes), np.float32), want)
        finally:
            client.unregister_system_shared_memory()


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x08\x00\x00\x00\x00\x00",  # truncated
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 4096,  # preface, then frames of garbage
    bytes(range(256)) * 64,
], ids=["http1", "h2-truncated", "h2-garbage-frames", "binary"])
def test_garbage_on_the_wire_leaves_the_front_serving(faulty: BridgeProcess,
                                                      garbage: bytes) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", faulty.port), timeout=30) as sock:
        try:
            sock.sendall(garbage)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):  # whatever the front answers, until it closes
                pass
        except OSError:
            pass  # the front may close or reset the connection first: that is its answer
    assert faulty.alive()
    assert stub(faulty).ServerLive(pb.ServerLiveRequest(), timeout=60).live
