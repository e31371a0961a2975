"""`python -m jaxport.bridge.worker` spoken to directly in its framed protocol (no front;
the protocol: docs/frames.md).

What only the frames show: READY once the repository is loaded, the deadline a CALL carries
(an expired one is refused before any work), CANCEL making `is_active()` false (a queued request
leaves the line), the concurrency limit, an undecodable request, a malformed frame closing the
connection, and ModelStreamInfer as OPEN / MSG / HALF_CLOSE -> REPLY... END.
"""

from __future__ import annotations

import array
import mmap
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import FEATURES, NEVER_US, rows_model, rows_params, rows_request
from jaxport.bridge.frames import (
    CALL,
    CANCEL,
    HEADER,
    NO_DEADLINE,
    READY,
    REPLY,
    SHM,
    SHM_THRESHOLD,
    STREAM_END,
    STREAM_HALF_CLOSE,
    STREAM_MSG,
    STREAM_OPEN,
    STREAM_REPLY,
)
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.gate import Gate

METHODS = {m.name: m.index
           for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods}


class Frames:
    """A connection to a worker: send frames, read them back by id."""

    def __init__(self, path: Path, timeout: float = 120.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.pending: list[tuple[tuple[int, ...], bytes]] = []
        self.fds: list[int] = []  # descriptors received with the bytes, not yet used
        self.shm_frames = 0  # frames whose payload came in a memfd
        self.socket_bytes = 0  # bytes that came through the socket

    def send_shm(self, ftype: int, method: str, call_id: int, aux: int, payload: bytes) -> None:
        """A frame whose payload is in a memfd (only the header goes through the socket)."""
        fd = os.memfd_create("test-frame")
        try:
            os.write(fd, payload)
            header = HEADER.pack(len(payload), ftype | SHM, METHODS[method], 0, call_id, aux)
            self.sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                          array.array("i", [fd]))])
        finally:
            os.close(fd)

    def send(self, ftype: int, method: str | int, call_id: int, aux: int = 0,
             payload: bytes = b"") -> None:
        index = METHODS[method] if isinstance(method, str) else method
        self.sock.sendall(HEADER.pack(len(payload), ftype, index, 0, call_id, aux) + payload)

    def _read_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk, ancdata, _flags, _ = self.sock.recvmsg(n - len(buf),
                                                          socket.CMSG_SPACE(64 * 4))
            for _level, _kind, data in ancdata:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % 4])
                self.fds.extend(fds)
            if not chunk:
                raise ConnectionError("worker closed the connection")
            buf += chunk
        self.socket_bytes += n
        return buf

    def read(self) -> tuple[tuple[int, ...], bytes]:
        length, ftype, *rest = HEADER.unpack(self._read_exact(HEADER.size))
        if not ftype & SHM:
            return (length, ftype, *rest), self._read_exact(length)
        fd = self.fds.pop(0)
        try:
            with mmap.mmap(fd, length, prot=mmap.PROT_READ) as m:
                payload = bytes(m)
        finally:
            os.close(fd)
        self.shm_frames += 1
        return (length, ftype & ~SHM, *rest), payload

    def read_for(self, call_id: int) -> tuple[int, int, str, bytes]:
        """(frame type, code, status message, body) of the next frame of `call_id`."""
        for i, (h, p) in enumerate(self.pending):
            if h[4] == call_id:
                del self.pending[i]
                return _split(h, p)
        while True:
            h, p = self.read()
            if h[4] == call_id:
                return _split(h, p)
            self.pending.append((h, p))

    def close(self) -> None:
        self.sock.close()


def _split(h: tuple[int, ...], p: bytes) -> tuple[int, int, str, bytes]:
    _length, ftype, _method, code, _id, aux = h
    if ftype in (REPLY, STREAM_END):
        return ftype, code, p[:aux].decode(), p[aux:]
    return ftype, code, "", p


def mlp_request(rid: str, x: np.ndarray | None = None) -> bytes:
    x = np.ones((2, 8), np.float32) if x is None else x
    req = pb.ModelInferRequest(model_name="mlp", id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=[2, 8])
    req.raw_input_contents.append(x.tobytes())
    return req.SerializeToString()


def slow_request() -> bytes:
    req = pb.ModelInferRequest(model_name="slow", id="slow")
    req.inputs.add(name="x", datatype="FP32", shape=[256, 256])
    req.inputs.add(name="n", datatype="INT32", shape=[])
    req.raw_input_contents.append(np.zeros((256, 256), np.float32).tobytes())
    req.raw_input_contents.append(np.int32(1).tobytes())
    return req.SerializeToString()


def start_worker(repository: Path, workdir: Path, gate: Gate, *args: str
                 ) -> tuple[subprocess.Popen[bytes], Frames]:
    path = workdir / "w.sock"
    with open(workdir / "stderr.jsonl", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jaxport.bridge.worker", "--socket", str(path),
             "--repository", str(repository), *args],
            stderr=err, env={**os.environ, **gate.env})
    end = time.monotonic() + 120
    while True:  # the worker binds its socket at start; then READY says it loaded
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited {proc.returncode}: "
                               f"{(workdir / 'stderr.jsonl').read_text()[-2000:]}")
        try:
            frames = Frames(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > end:
                raise
            time.sleep(0.02)
    (h, _payload) = frames.read()
    assert h[1] == READY
    return proc, frames


def stop_worker(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(10)


@pytest.fixture
def worker(repository: Path, tmp_path: Path, gate: Gate) -> Iterator[Frames]:
    """A worker running one execution per model at a time, at most 3 calls at once."""
    proc, frames = start_worker(repository, tmp_path, gate, "--max-inflight-per-model", "1",
                                "--worker-threads", "3")
    yield frames
    frames.close()
    assert stop_worker(proc) == 0


def test_unary_calls(worker: Frames) -> None:
    worker.send(CALL, "ServerReady", 1, NO_DEADLINE, pb.ServerReadyRequest().SerializeToString())
    ftype, code, _msg, body = worker.read_for(1)
    assert (ftype, code) == (REPLY, 0) and pb.ServerReadyResponse.FromString(body).ready
    worker.send(CALL, "ModelInfer", 2, 30_000_000, mlp_request("a"))
    ftype, code, msg, body = worker.read_for(2)
    assert (ftype, code, msg) == (REPLY, 0, "")
    response = pb.ModelInferResponse.FromString(body)
    assert response.id == "a" and response.outputs[0].shape == [2, 4]


def test_errors_come_from_the_one_table(worker: Frames) -> None:
    worker.send(CALL, "ModelInfer", 1, NO_DEADLINE,
                pb.ModelInferRequest(model_name="nope").SerializeToString())
    _ftype, code, msg, _body = worker.read_for(1)
    assert code == grpc.StatusCode.NOT_FOUND.value[0]
    assert msg.startswith("unknown model 'nope'"), msg  # the repository's text, unchanged
    worker.send(CALL, "ModelInfer", 2, NO_DEADLINE, b"\xff\xff\xff")
    assert worker.read_for(2)[1:3] == (grpc.StatusCode.INTERNAL.value[0],
                                       "Exception deserializing request!")


def test_expired_deadline_is_not_executed(worker: Frames) -> None:
    worker.send(CALL, "ModelInfer", 1, 0, mlp_request("late"))
    _ftype, code, msg, _body = worker.read_for(1)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert msg == "deadline exceeded before model 'mlp/1' could run the request; not executed"


def test_cancel_takes_a_queued_request_out(worker: Frames, gate: Gate) -> None:
    gate.hold("slow")
    try:
        worker.send(CALL, "ModelInfer", 1, NO_DEADLINE, slow_request())
        gate.wait_held("slow", 1)
        worker.send(CALL, "ModelInfer", 2, NO_DEADLINE, slow_request())  # waits for the slot
        # Whether the cancel finds call 2 waiting for the slot or not yet admitted, it must
        # leave without running.
        worker.send(CANCEL, "ModelInfer", 2)
        _ftype, code, msg, _body = worker.read_for(2)
        assert code == grpc.StatusCode.CANCELLED.value[0]
        assert msg == "caller went away before model 'slow/1' ran the request; not executed"
    finally:
        gate.release("slow")
    assert worker.read_for(1)[1] == 0
    gate.wait_held("slow", 0, at_most=True)


def test_concurrency_limit(worker: Frames, gate: Gate) -> None:
    gate.hold("slow")
    try:
        for call_id in (1, 2, 3):  # one executes (held), two wait for the model's slot
            worker.send(CALL, "ModelInfer", call_id, NO_DEADLINE, slow_request())
        gate.wait_held("slow", 1)
        worker.send(CALL, "ServerLive", 4, NO_DEADLINE, b"")
        assert worker.read_for(4)[1:3] == (grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                           "Concurrent RPC limit exceeded!")
    finally:
        gate.release("slow")
    assert [worker.read_for(i)[1] for i in (1, 2, 3)] == [0, 0, 0]
    gate.wait_held("slow", 0, at_most=True)


def test_stream(worker: Frames) -> None:
    worker.send(STREAM_OPEN, "ModelStreamInfer", 7, NO_DEADLINE)
    worker.send(STREAM_MSG, "ModelStreamInfer", 7, 0, mlp_request("s1"))
    ftype, _code, _msg, body = worker.read_for(7)
    assert ftype == STREAM_REPLY  # answered before the stream ends
    assert pb.ModelStreamInferResponse.FromString(body).infer_response.id == "s1"
    worker.send(STREAM_MSG, "ModelStreamInfer", 7, 0,
                pb.ModelInferRequest(model_name="mlp", id="bad").SerializeToString())
    worker.send(STREAM_HALF_CLOSE, "ModelStreamInfer", 7)
    ftype, _code, _msg, body = worker.read_for(7)
    bad = pb.ModelStreamInferResponse.FromString(body)
    assert ftype == STREAM_REPLY and bad.infer_response.id == "bad"
    assert bad.error_message.startswith("INVALID_ARGUMENT: missing input 'x'")
    assert worker.read_for(7)[:3] == (STREAM_END, 0, "")


def big_request(x: np.ndarray) -> bytes:
    req = pb.ModelInferRequest(model_name="big", id="big")
    req.inputs.add(name="x", datatype="FP32", shape=[x.size])
    req.raw_input_contents.append(x.tobytes())
    return req.SerializeToString()


def test_16_mib_each_way_through_memfds(worker: Frames) -> None:
    """A 16 MiB request sent in a memfd is answered with a 16 MiB response in a memfd: the
    socket carries the headers and status only; the numbers are JAX's."""
    import jax

    x = np.random.default_rng(11).standard_normal(4 << 20).astype(np.float32)  # 16 MiB
    worker.send_shm(CALL, "ModelInfer", 1, NO_DEADLINE, big_request(x))
    before = worker.socket_bytes
    ftype, code, msg, body = worker.read_for(1)
    assert (ftype, code, msg) == (REPLY, 0, "")
    assert worker.shm_frames == 1 and worker.socket_bytes - before == HEADER.size
    response = pb.ModelInferResponse.FromString(body)
    y = np.frombuffer(response.raw_output_contents[0], np.float32)
    expected = np.asarray(jax.jit(lambda v: v * np.float32(2.0) + 0.5)(x))  # conftest's `big`
    np.testing.assert_array_equal(y, expected)
    # A small answer still comes through the socket.
    worker.send(CALL, "ModelInfer", 2, NO_DEADLINE, mlp_request("small"))
    assert worker.read_for(2)[:3] == (REPLY, 0, "") and worker.shm_frames == 1
    assert len(mlp_request("small")) < SHM_THRESHOLD <= len(body)


def test_memfd_frame_without_descriptor_closes_the_connection(worker: Frames) -> None:
    worker.sock.sendall(HEADER.pack(16, CALL | SHM, METHODS["ServerLive"], 0, 1, NO_DEADLINE))
    with pytest.raises(ConnectionError):
        worker.read()


def test_malformed_frame_closes_the_connection(worker: Frames) -> None:
    worker.send(42, 0, 1)
    with pytest.raises(ConnectionError):
        worker.read()


def test_response_over_the_message_limit(repository: Path, tmp_path: Path, gate: Gate) -> None:
    proc, frames = start_worker(repository, tmp_path, gate, "--max-message-bytes", "60")
    try:
        frames.send(CALL, "ServerLive", 1, NO_DEADLINE, b"")
        assert frames.read_for(1)[1] == 0  # small answers still go out
        frames.send(CALL, "ModelInfer", 2, NO_DEADLINE, mlp_request("big"))
        ftype, code, msg, body = frames.read_for(2)
        assert (ftype, code, body) == (REPLY, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], b"")
        assert msg.startswith("Sent message larger than max (") and msg.endswith(" vs. 60)")
        frames.send(STREAM_OPEN, "ModelStreamInfer", 3, NO_DEADLINE)
        frames.send(STREAM_MSG, "ModelStreamInfer", 3, 0, mlp_request("big"))
        frames.send(STREAM_HALF_CLOSE, "ModelStreamInfer", 3)
        ftype, code, msg, _body = frames.read_for(3)
        assert (ftype, code) == (STREAM_END, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
    finally:
        frames.close()
        assert stop_worker(proc) == 0


def test_cancelled_stream_ends_and_frees_its_thread(repository: Path, tmp_path: Path,
                                                    gate: Gate) -> None:
    proc, frames = start_worker(repository, tmp_path, gate, "--worker-threads", "1")
    try:
        frames.send(STREAM_OPEN, "ModelStreamInfer", 1, NO_DEADLINE)  # takes the one thread
        frames.send(STREAM_MSG, "ModelStreamInfer", 1, 0, mlp_request("s1"))
        assert frames.read_for(1)[0] == STREAM_REPLY
        frames.send(CANCEL, "ModelStreamInfer", 1)  # the client went away, no half-close
        # Ends CANCELLED, as grpcio's server ends (and counts) a stream its caller cancelled.
        assert frames.read_for(1)[:3] == (STREAM_END, grpc.StatusCode.CANCELLED.value[0],
                                          "Cancelled")
        frames.send(CALL, "ServerLive", 2, NO_DEADLINE, b"")  # the thread is free again
        assert frames.read_for(2)[:2] == (REPLY, 0)
    finally:
        frames.close()
        assert stop_worker(proc) == 0


def test_sigterm_with_a_call_held_past_the_grace_exits_3(repository: Path, tmp_path: Path,
                                                         gate: Gate) -> None:
    proc, frames = start_worker(repository, tmp_path, gate, "--grace-period-s", "0.2")
    gate.hold("slow")
    try:
        frames.send(CALL, "ModelInfer", 1, NO_DEADLINE, slow_request())
        gate.wait_held("slow", 1)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(120) == 3  # jaxport serve's EXIT_CUT
    finally:
        gate.release("slow")
        frames.close()
        stop_worker(proc)


def test_batching_calls_read_together_start_on_one_thread(
        batched_repo: Path, tmp_path: Path, gate: Gate) -> None:
    """Nine ModelInfer frames for a batching model written at once (one read takes them all),
    then one that does not parse and a ServerLive: one thread starts the nine calls
    (`Connection._group`): eight one-row requests fill the 8-row program (one execution; the
    queue delay never expires) while the ninth, malformed, gets its own INVALID_ARGUMENT;
    every answer is the call's own and the statistics count each call. Had each call its own
    thread, eight threads would wait on the batch at once."""
    import jax

    proc, frames = start_worker(batched_repo, tmp_path, gate, "--batching",
                                "--max-queue-delay-us", str(NEVER_US), "--worker-threads", "32")
    try:
        threads_before = len(os.listdir(f"/proc/{proc.pid}/task"))
        xs = [np.random.default_rng(i).standard_normal((1, FEATURES)).astype(np.float32)
              for i in range(8)]
        bad = rows_request(np.ones((1, FEATURES + 1), np.float32), "bad")
        bad.inputs[0].shape[:] = [1, FEATURES + 1]
        requests = [rows_request(x, f"r{i}") for i, x in enumerate(xs)]
        requests.insert(3, bad)
        wire = b"".join(HEADER.pack(len(p), CALL, METHODS["ModelInfer"], 0, i + 1, 60_000_000)
                        + p for i, p in enumerate(r.SerializeToString() for r in requests))
        garbage = b"\xff\xff\xff"  # does not parse: ends the group, answered on its own
        wire += HEADER.pack(len(garbage), CALL, METHODS["ModelInfer"], 0, 99, NO_DEADLINE)
        wire += garbage
        wire += HEADER.pack(0, CALL, METHODS["ServerLive"], 0, 100, NO_DEADLINE)
        frames.sock.sendall(wire)
        assert frames.read_for(100)[:2] == (REPLY, 0)  # the frames after the group, answered
        assert frames.read_for(99)[1:3] == (grpc.StatusCode.INTERNAL.value[0],
                                            "Exception deserializing request!")
        want = np.asarray(jax.jit(rows_model)(rows_params(), np.concatenate(xs)))
        got_rows = []
        for call_id, request in enumerate(requests, start=1):
            _ftype, code, msg, body = frames.read_for(call_id)
            if request.id == "bad":
                assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
                assert msg == f"input 'x': expected shape [-1, {FEATURES}], got [1, 6]", msg
                continue
            assert (code, msg) == (0, "")
            response = pb.ModelInferResponse.FromString(body)
            assert response.id == request.id and list(response.outputs[0].shape) == [1, 3]
            got_rows.append(np.frombuffer(response.raw_output_contents[0], np.float32))
        np.testing.assert_allclose(np.stack(got_rows), want, rtol=1e-5, atol=1e-6)
        # One thread ran the nine calls (plus the follower reading on, the garbage frame's
        # and the batcher's).
        assert len(os.listdir(f"/proc/{proc.pid}/task")) - threads_before <= 4
        frames.send(CALL, "ModelStatistics", 200, NO_DEADLINE,
                    pb.ModelStatisticsRequest(name="rows").SerializeToString())
        _ftype, code, _msg, body = frames.read_for(200)
        (stats,) = pb.ModelStatisticsResponse.FromString(body).model_stats
        assert (stats.inference_stats.success.count, stats.inference_stats.fail.count) == (8, 1)
        assert (stats.inference_count, stats.execution_count) == (8, 1)
    finally:
        frames.close()
        assert stop_worker(proc) == 0


def _hostile_rows_requests(rng: np.random.Generator, n: int, features: int
                           ) -> list[tuple[str, bytes, np.ndarray | None]]:
    """(kind, payload, x for a valid request) for the batching model `rows`: valid requests
    of 1-4 rows mixed with malformed ones of every kind a client can send."""
    out: list[tuple[str, bytes, np.ndarray | None]] = []
    for i in range(n):
        kind = ["valid", "valid", "garbage", "truncated", "dtype", "shape", "rows", "bytes",
                "duplicate", "output", "typed"][int(rng.integers(11))]
        rows = int(rng.integers(1, 5))
        x = rng.standard_normal((rows, features)).astype(np.float32)
        req = pb.ModelInferRequest(model_name="rows", id=f"{kind}{i}")
        t = req.inputs.add(name="x", datatype="FP32", shape=[rows, features])
        req.raw_input_contents.append(x.tobytes())
        if kind == "garbage":
            out.append((kind, rng.bytes(int(rng.integers(1, 64))), None))
            continue
        if kind == "truncated":
            out.append((kind, req.SerializeToString()[:-7], None))
            continue
        if kind == "dtype":
            t.datatype = "FP64"
        elif kind == "shape":
            t.shape[:] = [rows, features, 2]
        elif kind == "rows":
            t.shape[:] = [1 << 40, features]
        elif kind == "bytes":
            req.raw_input_contents[0] = x.tobytes()[:-4]
        elif kind == "duplicate":
            req.inputs.add(name="x", datatype="FP32", shape=[rows, features])
            req.raw_input_contents.append(x.tobytes())
        elif kind == "output":
            req.outputs.add(name="nope")
        elif kind == "typed":
            t.contents.fp32_contents.extend([1.0])
        out.append((kind, req.SerializeToString(), x if kind == "valid" else None))
    return out


def test_hostile_frames_read_together_are_each_answered(
        batched_repo: Path, tmp_path: Path, gate: Gate) -> None:
    """Two hundred frames for the batching model written at once, a seeded mix of valid
    requests and malformed ones (bytes that do not parse, truncated messages, wrong datatype,
    rank, row count, byte count, a duplicate input, an unknown output, raw and typed contents
    together): every call gets exactly one answer, a valid one JAX's rows, a malformed one
    INVALID_ARGUMENT naming what is wrong (INTERNAL only for bytes that do not parse, grpcio's
    answer), and the worker serves on."""
    import jax

    proc, frames = start_worker(batched_repo, tmp_path, gate, "--batching",
                                "--max-queue-delay-us", "2000", "--worker-threads", "256")
    try:
        cases = _hostile_rows_requests(np.random.default_rng(2026), 200, FEATURES)
        frames.sock.sendall(b"".join(
            HEADER.pack(len(p), CALL, METHODS["ModelInfer"], 0, i + 1, 60_000_000) + p
            for i, (_kind, p, _x) in enumerate(cases)))
        jitted = jax.jit(rows_model)
        invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
        words = {"dtype": "expected datatype FP32", "shape": "expected shape",
                 "rows": "shape [1099511627776, 5]", "bytes": "raw contents hold",
                 "duplicate": "'x'", "output": "unknown requested output 'nope'",
                 "typed": "send every input one way"}
        kinds: set[str] = set()
        for call_id, (kind, _payload, x) in enumerate(cases, start=1):
            _ftype, code, msg, body = frames.read_for(call_id)
            kinds.add(kind)
            if kind == "valid":
                assert (code, msg) == (0, ""), (kind, msg)
                got = np.frombuffer(pb.ModelInferResponse.FromString(body)
                                    .raw_output_contents[0], np.float32)
                np.testing.assert_allclose(got.reshape(len(x), 3),
                                           np.asarray(jitted(rows_params(), x)),
                                           rtol=1e-5, atol=1e-6)
            elif kind in ("garbage", "truncated"):
                # Bytes that do not parse are grpcio's INTERNAL; a few random or truncated
                # ones happen to parse as some request, which is then invalid or unknown.
                assert code != 0, (kind, msg)
                if code == grpc.StatusCode.INTERNAL.value[0]:
                    assert msg == "Exception deserializing request!", msg
            else:
                assert code == invalid, (kind, code, msg)
                assert words[kind] in msg, (kind, msg)
        assert kinds >= {"valid", "garbage", "truncated", "dtype", "shape", "rows", "bytes",
                         "duplicate", "output", "typed"}
        frames.send(CALL, "ServerLive", 999, NO_DEADLINE, b"")
        assert frames.read_for(999)[:2] == (REPLY, 0)
    finally:
        frames.close()
        assert stop_worker(proc) == 0
