"""`python -m jaxport.bridge.worker` spoken to directly in the frame protocol, version 2 (no
front; the protocol: docs/frames.md).

The frames are packed here from the spec (header, tensor block), not with the worker's own
`jaxport.bridge.frames`, so the two are checked against each other. What only the frames show:
HELLO with the version, LOAD's answer and refusals, EXECUTE against JAX's own results, the
deadline in `aux`, CANCEL taking a waiting execution out, memfd payloads both ways, results
over the frame limit, a malformed payload answered for that request only, malformed frames
closing the connection (and the worker exiting with it), UNLOAD.
"""

from __future__ import annotations

import array
import json
import math
import mmap
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

HEADER = struct.Struct("<IBBHQq")
HELLO, LOAD, EXECUTE, UNLOAD, CANCEL, REPLY = 1, 2, 3, 4, 5, 6
SHM = 0x80
NO_DEADLINE = -1
OK, CANCELLED, INTERNAL, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = \
    0, 1, 13, 4, 8, 9
DATATYPES = {"FP32": np.float32, "INT32": np.int32, "BOOL": np.bool_}
FP32_ATOL, FP32_RTOL = 1e-5, 1e-4  # `jaxport verify`'s float32 rule (docs/artifact-format.md)
MAX_FRAME = 64 << 20
SPIN_FOREVER = 1 << 30  # rounds: an execution that does not end while the test runs

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS / "models"), str(TESTS / "artifact")]
import mlp  # noqa: E402  (tests/models/mlp.py)
from loopback_http import serving  # noqa: E402  (tests/artifact: a real HTTP server)
from moto_s3 import AWS_VARS, s3_serving  # noqa: E402  (tests/artifact: a real S3 server)


def spin(params: dict, x: jax.Array, n: jax.Array) -> jax.Array:
    """n rounds of x = tanh(x @ w): held in flight with a large n."""
    return jax.lax.fori_loop(0, n, lambda _, v: jnp.tanh(v @ params["w"]), x)


def affine(params: dict, x: jax.Array) -> jax.Array:
    return x * params["s"] + 0.5


def widen(params: dict, x: jax.Array) -> jax.Array:
    """f32[1024] -> f32[1024, 1024]: 4 KiB in, 4 MiB out."""
    return x[:, None] * params["ones"]


BIG = (512, 1024)  # 2 MiB of FP32 each way: memfd frames


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from jaxport.exporter import export

    out = tmp_path_factory.mktemp("worker-artifacts")
    specs = {
        "mlp": (mlp.predict, mlp.init(jax.random.key(0)),
                {"x": jax.ShapeDtypeStruct((4, 16), np.float32)}),
        "spin": (spin, {"w": np.eye(256, dtype=np.float32) * 0.5},
                 {"x": jax.ShapeDtypeStruct((256, 256), np.float32),
                  "n": jax.ShapeDtypeStruct((), np.int32)}),
        "affine": (affine, {"s": np.float32(2.0)},
                   {"x": jax.ShapeDtypeStruct(BIG, np.float32)}),
        "widen": (widen, {"ones": np.ones((1024,), np.float32)},
                  {"x": jax.ShapeDtypeStruct((1024,), np.float32)}),
    }
    paths = {}
    for name, (fn, params, inputs) in specs.items():
        paths[name] = out / name
        export(fn, params, inputs, paths[name], goldens=1 if name == "mlp" else 0,
               quiet=True, name=name)
    return paths


# -- the wire, from docs/frames.md ----------------------------------------------------------

def tensor_block(arrays: Sequence[np.ndarray], start: int) -> bytes:
    """The tensor block of `arrays`, beginning `start` bytes into its payload."""
    names = {np.dtype(v): k for k, v in DATATYPES.items()}
    head = struct.pack("<II", len(arrays), 0)
    size = start + len(head) + sum(32 + 8 * a.ndim for a in arrays)
    offset = size + (-size % 64)
    data = b"\0" * (offset - size)
    for a in arrays:
        head += struct.pack("<8sIIQQ", names[a.dtype].encode(), a.ndim, 0, offset, a.nbytes)
        head += b"".join(struct.pack("<q", d) for d in a.shape)
        raw = a.tobytes()
        data += raw + b"\0" * (-len(raw) % 64)
        offset += len(raw) + (-len(raw) % 64)
    return head + data


def read_block(payload: bytes) -> list[np.ndarray]:
    count, _ = struct.unpack_from("<II", payload, 0)
    at, out = 8, []
    for _ in range(count):
        name, rank, _, offset, nbytes = struct.unpack_from("<8sIIQQ", payload, at)
        shape = struct.unpack_from(f"<{rank}q", payload, at + 32)
        at += 32 + 8 * rank
        assert offset % 64 == 0, f"tensor data at {offset}, not a multiple of 64"
        dtype = DATATYPES[name.rstrip(b"\0").decode()]
        assert nbytes == math.prod(shape) * np.dtype(dtype).itemsize
        out.append(np.frombuffer(payload, dtype, math.prod(shape), offset).reshape(shape))
    return out


class Worker:
    """A worker process started as the front starts one (a listening socket as --listen-fd),
    and the one connection to it."""

    def __init__(self, tmp: Path, *flags: str, env: dict[str, str] | None = None) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(tmp / "w.sock"))
        listener.listen(1)
        self.stderr = tmp / "worker.jsonl"
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jaxport.bridge.worker", "--listen-fd",
                 str(listener.fileno()), "--compiled-shapes", "4", "--max-frame-bytes",
                 str(MAX_FRAME), *flags], pass_fds=(listener.fileno(),), stderr=err, env=env)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(300)
        self.sock.connect(str(tmp / "w.sock"))  # waits in the backlog until accepted
        listener.close()
        self.fds: list[int] = []
        self.shm_frames = 0  # frames received with their payload in a memfd
        self.pending: dict[int, tuple[int, bytes]] = {}
        self.next_id = 0
        ftype, code, call_id, aux, payload = self.read()
        assert (ftype, code, call_id, aux) == (HELLO, 0, 0, 2)
        self.hello = json.loads(payload)

    def close(self) -> int:
        """Close the connection: the worker exits (status 0)."""
        self.sock.close()
        try:
            return self.proc.wait(120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    # frames
    def send(self, ftype: int, payload: bytes = b"", aux: int = 0, call_id: int | None = None,
             reserved: int = 0) -> int:
        if call_id is None:
            self.next_id += 1
            call_id = self.next_id
        self.sock.sendall(HEADER.pack(len(payload), ftype, reserved, 0, call_id, aux) + payload)
        return call_id

    def send_shm(self, ftype: int, payload: bytes, aux: int = NO_DEADLINE) -> int:
        self.next_id += 1
        fd = os.memfd_create("test-frame")
        try:
            os.write(fd, payload)
            self.sock.sendmsg([HEADER.pack(len(payload), ftype | SHM, 0, 0, self.next_id, aux)],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        finally:
            os.close(fd)
        return self.next_id

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk, ancdata, _flags, _ = self.sock.recvmsg(n - len(buf), socket.CMSG_SPACE(64 * 4))
            for _level, _kind, data in ancdata:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % 4])
                self.fds.extend(fds)
            if not chunk:
                raise ConnectionError("the worker closed the connection")
            buf += chunk
        return buf

    def read(self) -> tuple[int, int, int, int, bytes]:
        length, ftype, reserved, code, call_id, aux = HEADER.unpack(self._exact(HEADER.size))
        assert reserved == 0
        if not ftype & SHM:
            return ftype, code, call_id, aux, self._exact(length)
        fd = self.fds.pop(0)
        try:
            with mmap.mmap(fd, length, prot=mmap.PROT_READ) as m:
                payload = bytes(m)
        finally:
            os.close(fd)
        self.shm_frames += 1
        return ftype & ~SHM, code, call_id, aux, payload

    def reply(self, call_id: int) -> tuple[int, bytes]:
        """(code, payload) of the REPLY to request `call_id` (others kept for later)."""
        while call_id not in self.pending:
            ftype, code, got, aux, payload = self.read()
            assert (ftype, aux) == (REPLY, 0)
            assert got not in self.pending, f"a second REPLY for {got}"
            self.pending[got] = code, payload
        return self.pending.pop(call_id)

    # requests
    def load(self, number: int, location: Path, engine: str = "exported") -> tuple[int, bytes]:
        body = {"model": number, "key": f"{location.name}/1", "location": str(location),
                "engine": engine}
        return self.reply(self.send(LOAD, json.dumps(body).encode()))

    def execute_frame(self, model: int, arrays: Sequence[np.ndarray], program: int = 0
                      ) -> bytes:
        return struct.pack("<II", model, program) + tensor_block(arrays, 8)

    def execute(self, model: int, arrays: Sequence[np.ndarray], aux: int = NO_DEADLINE,
                program: int = 0) -> tuple[int, bytes]:
        return self.reply(self.send(EXECUTE, self.execute_frame(model, arrays, program), aux))


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]
           ) -> Iterator[Worker]:
    w = Worker(tmp_path_factory.mktemp("worker"))
    code, body = w.load(1, artifacts["mlp"])
    assert code == OK, body
    code, body = w.load(2, artifacts["affine"])
    assert code == OK, body
    yield w
    assert w.close() == 0


def mlp_golden(artifacts: dict[str, Path]) -> tuple[np.ndarray, np.ndarray]:
    case = artifacts["mlp"] / "goldens" / "case0"
    return np.load(case / "inputs" / "x.npy"), np.load(case / "outputs" / "output.npy")


def test_hello_load_execute_unload(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    w = Worker(tmp_path)
    assert w.hello["version"] == 2 and w.hello["pid"] == w.proc.pid
    assert w.hello["platform"] == "cpu" and w.hello["devices"] >= 1
    code, body = w.load(7, artifacts["mlp"])
    assert code == OK, body
    answer = json.loads(body)
    assert answer["programs"] == [{"index": 0, "batch_size": 0, "dims": {},
                                   "polymorphic": False}]
    assert set(answer["load_seconds"]) == {"checksum", "deserialize", "weights", "compile",
                                           "warmup"}
    x, want = mlp_golden(artifacts)
    code, body = w.execute(7, [x])
    assert code == OK, body
    (got,) = read_block(body)
    np.testing.assert_allclose(got, want, rtol=FP32_RTOL, atol=FP32_ATOL)
    # ... and JAX itself on the same function
    np.testing.assert_allclose(got, np.asarray(jax.jit(mlp.predict)(mlp.init(jax.random.key(0)),
                                                                    x)),
                               rtol=FP32_RTOL, atol=FP32_ATOL)
    code, body = w.execute(7, [x], program=3)
    assert (code, body) == (FAILED_PRECONDITION, b"model 7 serves programs [0], not program 3")
    code, body = w.load(7, artifacts["mlp"])
    assert code == FAILED_PRECONDITION and b"model 7 is loaded already" in body
    assert w.reply(w.send(UNLOAD, b'{"model": 7}')) == (OK, b"")
    assert w.execute(7, [x]) == (FAILED_PRECONDITION, b"model 7 is not loaded on this worker")
    assert w.close() == 0  # the front's connection closed: the worker exits


def test_load_by_url(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """file://, http:// and s3:// (real servers on 127.0.0.1) load as a local directory does,
    every file checked; a chunk tampered with in the bucket is refused as on disk."""
    import shutil

    root = tmp_path / "repo"
    shutil.copytree(artifacts["mlp"], root / "mlp")
    shutil.copytree(artifacts["mlp"], root / "tampered")
    chunk = root / "tampered" / "weights" / "params.w1" / "c" / "0" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-1] + b"\x00")
    x, want = mlp_golden(artifacts)
    with serving(root) as http, s3_serving(root) as s3:
        env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
        env.update(s3.env, AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
                   AWS_CONFIG_FILE=str(tmp_path / "none"))
        w = Worker(tmp_path, env=env)
        urls = {"file": (root / "mlp").as_uri(), "http": f"{http.url}/mlp",
                "s3": f"{s3.url}/mlp"}
        for number, (scheme, url) in enumerate(urls.items(), 1):
            body = {"model": number, "key": "mlp/1", "location": url, "engine": "exported"}
            code, answer = w.reply(w.send(LOAD, json.dumps(body).encode()))
            assert code == OK, (scheme, answer)
            code, got = w.execute(number, [x])
            assert code == OK, (scheme, got)
            np.testing.assert_allclose(read_block(got)[0], want, rtol=FP32_RTOL,
                                       atol=FP32_ATOL)
        assert "/mlp/weights/params.w1/c/0/0" in http.requests  # read over HTTP
        for url in (f"{s3.url}/tampered", (root / "tampered").as_uri()):
            body = {"model": 9, "key": "tampered/1", "location": url, "engine": "exported"}
            code, why = w.reply(w.send(LOAD, json.dumps(body).encode()))
            assert code == FAILED_PRECONDITION
            assert why.startswith(b"checksum verification failed: ") and b"params.w1" in why
        assert w.close() == 0


def test_expired_deadline_is_not_executed(worker: Worker, artifacts: dict[str, Path]) -> None:
    x, want = mlp_golden(artifacts)
    assert worker.execute(1, [x], aux=0) == (DEADLINE_EXCEEDED, b"Deadline Exceeded")
    code, body = worker.execute(1, [x], aux=60_000_000)
    assert code == OK
    np.testing.assert_allclose(read_block(body)[0], want, rtol=FP32_RTOL, atol=FP32_ATOL)


def test_cancel_takes_a_waiting_execution_out(tmp_path: Path,
                                              artifacts: dict[str, Path]) -> None:
    """One execution at a time: A holds it, B waits behind it; B's CANCEL (sent with them)
    answers B CANCELLED at once, unexecuted; a CANCEL of an id not in flight is ignored."""
    w = Worker(tmp_path, "--threads", "1")
    assert w.load(1, artifacts["spin"])[0] == OK
    assert w.load(2, artifacts["mlp"])[0] == OK
    x, _ = mlp_golden(artifacts)
    a = w.execute_frame(1, [np.zeros((256, 256), np.float32), np.int32(SPIN_FOREVER)])
    b = w.execute_frame(2, [x])
    frames = (HEADER.pack(len(a), EXECUTE, 0, 0, 10, NO_DEADLINE) + a
              + HEADER.pack(len(b), EXECUTE, 0, 0, 11, NO_DEADLINE) + b
              + HEADER.pack(0, CANCEL, 0, 0, 999, 0)
              + HEADER.pack(0, CANCEL, 0, 0, 11, 0))
    w.sock.sendall(frames)
    assert w.reply(11) == (CANCELLED, b"Cancelled")
    assert w.pending == {}  # nothing else answered: A still runs, 999 got no REPLY
    assert w.close() == 0  # exits although A still executes


def test_large_tensors_travel_in_memfds(worker: Worker) -> None:
    x = np.random.default_rng(0).standard_normal(BIG).astype(np.float32)
    before = worker.shm_frames
    code, body = worker.reply(worker.send_shm(EXECUTE, worker.execute_frame(2, [x])))
    assert code == OK
    np.testing.assert_allclose(read_block(body)[0], x * 2 + 0.5, rtol=FP32_RTOL,
                               atol=FP32_ATOL)
    assert worker.shm_frames == before + 1  # the 2 MiB results came in a memfd
    # A sender that could not make a memfd sends a large payload through the socket.
    code, body = worker.execute(2, [x])
    assert code == OK
    np.testing.assert_allclose(read_block(body)[0], x * 2 + 0.5, rtol=FP32_RTOL,
                               atol=FP32_ATOL)


def test_results_over_the_frame_limit(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    w = Worker(tmp_path, "--max-frame-bytes", str(1 << 20))  # the last flag wins
    assert w.load(1, artifacts["widen"])[0] == OK
    code, body = w.execute(1, [np.ones(1024, np.float32)])
    assert code == RESOURCE_EXHAUSTED
    assert body.decode().startswith("the results take 4194") and \
        body.decode().endswith("over the frame limit of 1048576 (--max-frame-bytes)")
    assert w.close() == 0


def test_load_refusals(worker: Worker, artifacts: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    corrupt = tmp_path / "corrupt"
    shutil.copytree(artifacts["mlp"], corrupt)
    (corrupt / "weights" / "params.b2" / "c" / "0").write_bytes(b"not the weights")
    code, body = worker.load(10, corrupt)
    assert code == FAILED_PRECONDITION
    assert body.decode().startswith("checksum verification failed") and b"params.b2" in body
    code, body = worker.load(11, artifacts["mlp"], engine="iree")
    assert (code, body) == (FAILED_PRECONDITION,
                            b"unknown engine 'iree': the worker runs exported, pjrt")
    code, body = worker.load(12, tmp_path / "nothing")
    assert code == FAILED_PRECONDITION and body.startswith(b"manifest.json: ")
    code, body = worker.reply(worker.send(LOAD, b'{"model": 13}'))
    assert code == INTERNAL and body.startswith(b"malformed LOAD frame: ")
    # The refused numbers stay free, the loaded models keep serving.
    assert worker.load(12, artifacts["mlp"], engine="pjrt")[0] == OK
    x, want = mlp_golden(artifacts)
    for model in (1, 12):
        code, body = worker.execute(model, [x])
        assert code == OK
        np.testing.assert_allclose(read_block(body)[0], want, rtol=FP32_RTOL, atol=FP32_ATOL)


def test_malformed_execute_payload_answers_that_request_only(worker: Worker,
                                                            artifacts: dict[str, Path]) -> None:
    x, want = mlp_golden(artifacts)
    good = worker.execute_frame(1, [x])
    for payload, says in (
            (b"\1\0", b"EXECUTE payload shorter than its prelude"),
            (good[:-64], b"beyond the payload"),
            (good.replace(b"FP32", b"FP99", 1), b"unknown datatype 'FP99'"),
    ):
        code, body = worker.reply(worker.send(EXECUTE, payload, NO_DEADLINE))
        assert code == INTERNAL and body.startswith(b"malformed EXECUTE frame: ")
        assert says in body, body
    code, body = worker.execute(1, [x])
    assert code == OK
    np.testing.assert_allclose(read_block(body)[0], want, rtol=FP32_RTOL, atol=FP32_ATOL)


@pytest.mark.parametrize("frame", ["unknown type", "REPLY from the front", "reserved byte",
                                   "memfd header without its descriptor", "over the limit"])
def test_malformed_frame_closes_the_connection(tmp_path: Path, frame: str) -> None:
    w = Worker(tmp_path)
    header = {
        "unknown type": HEADER.pack(0, 42, 0, 0, 1, 0),
        "REPLY from the front": HEADER.pack(0, REPLY, 0, 0, 1, 0),
        "reserved byte": HEADER.pack(0, UNLOAD, 7, 0, 1, 0),
        "memfd header without its descriptor": HEADER.pack(16, EXECUTE | SHM, 0, 0, 1, -1),
        "over the limit": HEADER.pack(MAX_FRAME + 1, EXECUTE, 0, 0, 1, -1),
    }[frame]
    w.sock.sendall(header)
    assert w.sock.recv(1) == b""  # closed, no REPLY
    assert w.proc.wait(120) == 0  # and the worker exited with it
    assert '"level": "ERROR"' in w.stderr.read_text()  # saying why, in its log
    w.close()
