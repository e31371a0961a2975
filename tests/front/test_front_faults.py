"""Live faults against the native front (issue 12), on a front with two workers, the test gate
and system shared memory:

* a worker SIGKILLed under steady load from several client threads: the requests it had in
  flight end UNAVAILABLE, every other request succeeds with the right answer, the worker is
  restarted and serves again. Which requests are in flight where is decided by the test gate
  (every client thread's request held, so nothing else is in flight), never by timing;
* a worker that hangs (held at the gate, or the whole process stopped) past a call's deadline:
  its caller gets DEADLINE_EXCEEDED, the front and the other callers carry on;
* 16 MiB tensors through system shared memory, answers equal to JAX (over the wire:
  test_front.py::test_large_tensor_equals_bridge).
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import front_command
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess
from support.gate import Gate
from test_front import (
    WORKER_GONE,
    mlp_reference,
    mlp_request,
    rpc_error,
    slow_request,
    stub,
    wait_for,
    worker_ready_records,
)

THREADS = 4  # client threads of the steady load


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


def held_by_pid(gate: Gate, model: str) -> Counter[int]:
    """Executions of `model` held at the gate right now, per worker process."""
    return Counter(int(t.split(".", 1)[0]) for t in gate.held_tags(model))


def wait_all_held(gate: Gate, model: str, n: int, errors: list[BaseException]) -> Counter[int]:
    """Until `n` executions of `model` are held (every client thread's call), or a thread
    failed."""
    wait_for(lambda: errors or sum(held_by_pid(gate, model).values()) >= n,
             f"{n} executions of {model} held at the gate")
    assert not errors, errors
    return held_by_pid(gate, model)


class Load:
    """THREADS client threads, each sending one mlp call after the other until stopped; every
    outcome is kept (answer checked against JAX, or the error)."""

    def __init__(self, server: BridgeProcess) -> None:
        self.server = server
        self.stop = threading.Event()
        self.ok = 0
        self.failures: list[grpc.RpcError] = []
        self.errors: list[BaseException] = []  # wrong answers, unexpected exceptions
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True)
                        for t in range(THREADS)]

    def _run(self, t: int) -> None:
        s = stub(self.server)
        i = 0
        try:
            while not self.stop.is_set():
                x = np.full((2, 8), t * 1000 + i, np.float32) / 1000
                try:
                    out = s.ModelInfer(mlp_request(x, rid=f"{t}-{i}"), timeout=120)
                except grpc.RpcError as err:
                    with self.lock:
                        self.failures.append(err)
                else:
                    assert out.id == f"{t}-{i}"
                    np.testing.assert_allclose(
                        np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
                        mlp_reference(x), rtol=1e-5, atol=1e-6)
                    with self.lock:
                        self.ok += 1
                i += 1
        except BaseException as exc:  # reported by the test
            with self.lock:
                self.errors.append(exc)

    def __enter__(self) -> Load:
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(180)


def test_sigkill_under_load_fails_only_the_killed_workers_calls(
        faulty: BridgeProcess, fault_gate: Gate) -> None:
    mlp_reference(np.ones((2, 8), np.float32))  # compile JAX's reference before the load
    gate = fault_gate
    before = worker_ready_records(faulty)
    with Load(faulty) as load:
        # 1. Every thread's call held: exactly these are in flight, on known workers.
        gate.hold("mlp")
        try:
            held = wait_all_held(gate, "mlp", THREADS, load.errors)
            victim, in_flight = held.most_common(1)[0]
            assert in_flight >= 1
            ok_before = load.ok
            os.kill(victim, signal.SIGKILL)
            # The killed worker's calls fail (its connection closes) while the others are
            # still held: all of them are answered before anything else happens.
            wait_for(lambda: len(load.failures) >= in_flight or load.errors,
                     f"{in_flight} calls of the killed worker answered")
        finally:
            gate.release("mlp")
        # 2. The worker comes back; meanwhile the survivor serves every call.
        wait_for(lambda: any(r["pid"] != victim for r in worker_ready_records(faulty)
                             [len(before):]), "killed worker restarted")
        faulty.wait_ready()
        restarted = int(worker_ready_records(faulty)[-1]["pid"])
        # 3. The restarted worker serves: hold again until every thread's call is held, some
        # of them on the new process.
        gate.hold("mlp")
        try:
            held = wait_all_held(gate, "mlp", THREADS, load.errors)
        finally:
            gate.release("mlp")
        ok_mid = load.ok
        wait_for(lambda: load.ok >= ok_mid + THREADS or load.errors, "more calls answered")
    assert not load.errors, load.errors
    assert held[restarted] >= 1, f"no call reached the restarted worker: {held}"
    assert [(e.code(), e.details()) for e in load.failures] == [
        (grpc.StatusCode.UNAVAILABLE, WORKER_GONE)] * in_flight
    assert load.ok > ok_before


def test_worker_held_past_the_deadline_gives_deadline_exceeded(
        faulty: BridgeProcess, fault_gate: Gate) -> None:
    f = stub(faulty)
    with fault_gate.holding("slow"):
        call = f.ModelInfer.future(slow_request(), timeout=3)
        err = call.exception(timeout=120)
        assert isinstance(err, grpc.RpcError)
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # Held there, the worker's other callers are answered.
        x = np.ones((2, 8), np.float32)
        out = f.ModelInfer(mlp_request(x), timeout=60)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(x), rtol=1e-5, atol=1e-6)
    assert f.ModelInfer(slow_request(), timeout=120).id == "slow"


def test_stopped_worker_process_gives_deadline_exceeded(front_binary: Path, repository: Path,
                                                        tmp_path: Path) -> None:
    """The only worker is SIGSTOPped: calls past their deadline end DEADLINE_EXCEEDED (the
    front answers health meanwhile); SIGCONT and it serves again."""
    # --pjrt-plugin none: the stopped worker is the subject (the native engine would answer).
    with BridgeProcess(repository, "--pjrt-plugin", "none", workdir=tmp_path / "front",
                       command=front_command(front_binary, "--workers", "1")) as server:
        (record,) = worker_ready_records(server)
        pid = int(record["pid"])
        f = stub(server)
        os.kill(pid, signal.SIGSTOP)
        try:
            for method, req in (("ModelInfer", mlp_request(np.ones((2, 8), np.float32))),
                                ("ModelMetadata", pb.ModelMetadataRequest(name="mlp"))):
                err = rpc_error(getattr(f, method), req, timeout=2)
                assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED, method
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            with server.channel() as channel:
                health = health_pb2_grpc.HealthStub(channel)
                assert health.Check(health_pb2.HealthCheckRequest(), timeout=30).status == (
                    health_pb2.HealthCheckResponse.SERVING)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert f.ModelInfer(mlp_request(np.ones((2, 8), np.float32)), timeout=60).id == "r1"
        assert [int(r["pid"]) for r in worker_ready_records(server)] == [pid]  # not restarted


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
            for _ in range(3):  # spread over both workers: each maps the regions itself
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
