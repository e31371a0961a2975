"""The one server (issue 33): the front owns every model, whichever engine executes it.

- Ready means the engine that serves a model has it open: requests traced with a W3C
  traceparent and sent right after the server reports ready land, in a REAL OTLP receiver
  (an OTLP/gRPC TraceService served here with the OpenTelemetry protos), as `infer` spans
  whose `jaxport.engine` is the engine that serves the model from then on.
- A repository holding a polymorphic model (only the workers run it) and native ones starts
  the Python workers for that model only: one worker process, and every model's metadata,
  config, readiness and statistics are the front's answers (given with the worker stopped);
  the load log line and ModelConfig name the engine and why.
- A repository the native engine serves whole has no Python process in the server's process
  tree once ready (read from /proc).
- The bucket form of a sequence model (symbolic dims, --buckets, --pad) is served natively:
  a request padded up to a bucket answers as the unpadded function.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import jax
import numpy as np
import pytest
from front_helpers import PLUGIN
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from support.bridge import BridgeProcess

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))

import seq  # noqa: E402


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver: keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    self.spans.extend(ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


@contextmanager
def otlp_receiver() -> Iterator[tuple[Receiver, int]]:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield receiver, port
    finally:
        server.stop(None)


@pytest.fixture(scope="module")
def mixed_repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    """mlp (native), mixed (native) and poly (shape-polymorphic only: the workers')."""
    if not PLUGIN.is_file():
        pytest.fail(f"{PLUGIN} missing: run `make setup`", pytrace=False)
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("one-repo")
    shutil.copytree(artifacts["mlp"], repo / "mlp" / "1")
    shutil.copytree(artifacts["mixed"], repo / "mixed" / "1")
    export(seq.predict, seq.init(jax.random.key(0)),
           {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)},
           repo / "poly" / "1", dims={"B": "1..8", "T": "8..64:8"}, goldens=0, quiet=True,
           name="poly")
    return repo


def stub(server: BridgeProcess) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(server.channel())


def mlp_request(rid: str = "m") -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="mlp", id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=[2, 8])
    req.raw_input_contents.append(np.ones((2, 8), np.float32).tobytes())
    return req


def poly_request(b: int = 2, t: int = 16, rid: str = "p") -> pb.ModelInferRequest:
    rng = np.random.default_rng(b * 100 + t)
    req = pb.ModelInferRequest(model_name="poly", id=rid)
    req.inputs.add(name="tokens", datatype="INT32", shape=[b, t])
    req.raw_input_contents.append(rng.integers(0, seq.VOCAB, (b, t)).astype(np.int32).tobytes())
    req.inputs.add(name="mask", datatype="BOOL", shape=[b, t])
    req.raw_input_contents.append(np.ones((b, t), np.bool_).tobytes())
    return req


def children(pid: int) -> list[int]:
    """The process's children, from /proc (every thread's list)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(p) for p in text)
    return sorted(set(out))


def process_state(pid: int) -> str:
    """The process's state letter from /proc/PID/stat (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def descendants(pid: int) -> list[int]:
    out = []
    for c in children(pid):
        out += [c, *descendants(c)]
    return out


def test_ready_means_the_serving_engine_has_the_model_open(mixed_repo: Path, tmp_path: Path
                                                          ) -> None:
    trace = secrets.token_hex(16)
    metadata = [("traceparent", f"00-{trace}-{secrets.token_hex(8)}-01")]
    with otlp_receiver() as (receiver, port):
        server = BridgeProcess(mixed_repo, "--trace-otlp-endpoint", f"127.0.0.1:{port}",
                               workdir=tmp_path / "serve")
        with server:  # wait_ready returned: health SERVING, the initial load has finished
            f = stub(server)
            f.ModelInfer(mlp_request("right-after-ready"), metadata=metadata, timeout=60)
            f.ModelInfer(poly_request(rid="right-after-ready"), metadata=metadata, timeout=120)
        # The front flushes its spans when it stops.
        infer = [s for s in receiver.spans if s.name == "infer" and s.trace_id.hex() == trace]
    engines = {}
    for s in infer:
        attrs = {a.key: a.value.string_value for a in s.attributes}
        engines[attrs["jaxport.model"]] = attrs["jaxport.engine"]
    assert engines == {"mlp": "native", "poly": "exported"}, receiver.spans


@pytest.fixture(scope="module")
def mixed(mixed_repo: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[BridgeProcess]:
    with BridgeProcess(mixed_repo, workdir=tmp_path_factory.mktemp("mixed-serve")) as server:
        yield server


@contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_workers_start_for_the_model_that_needs_them_only(mixed: BridgeProcess) -> None:
    workers = children(mixed.pid)
    assert len(workers) == 1, workers  # --workers 1 (the default), started for poly
    assert "jaxport.bridge.worker" in cmdline(workers[0])
    served = {r["model"]: r for r in mixed.log_records() if r.get("msg") == "model served"}
    assert {m: r["engine"] for m, r in served.items()} == {
        "mlp": "native", "mixed": "native", "poly": "exported"}
    assert served["poly"]["reason"] == (
        "shape-polymorphic program only (no --buckets): only model.jaxexport runs it, under jax")
    assert "reason" not in served["mlp"]
    f = stub(mixed)
    f.ModelInfer(poly_request(), timeout=120)
    with stopped(workers):  # nothing Python answers: every answer below is the front's
        for name in ("mlp", "mixed", "poly"):
            assert f.ModelReady(pb.ModelReadyRequest(name=name), timeout=30).ready
            assert f.ModelMetadata(pb.ModelMetadataRequest(name=name), timeout=30).name == name
            cfg = f.ModelConfig(pb.ModelConfigRequest(name=name), timeout=30).config
            engine = "exported" if name == "poly" else "native"
            assert cfg.parameters["engine"].string_value == engine
            assert cfg.backend == f"jaxport-{engine}"
            assert ("reason" in cfg.parameters) == (name == "poly")
        meta = f.ModelMetadata(pb.ModelMetadataRequest(name="poly"), timeout=30)
        assert [list(t.shape) for t in meta.inputs] == [[-1, -1], [-1, -1]]
        cfg = f.ModelConfig(pb.ModelConfigRequest(name="poly"), timeout=30).config
        assert cfg.parameters["dims"].string_value == "B=1..8,T=8..64:8"
        assert "buckets" not in cfg.parameters  # the workers run every admissible size
        stats = f.ModelStatistics(pb.ModelStatisticsRequest(), timeout=30).model_stats
        assert {s.name for s in stats} == {"mlp", "mixed", "poly"}
        assert next(s for s in stats if s.name == "poly").inference_stats.success.count >= 1
        got = f.ModelInfer(mlp_request(), timeout=30)  # native: no worker needed
        assert got.model_name == "mlp"
        # Nothing Python answered above: the one worker is still the one stopped (state T),
        # and no other process was started in its place.
        restarts = [r for r in mixed.log_records() if "worker" in str(r.get("msg", ""))
                    and "exit" in str(r.get("msg", ""))]
        assert children(mixed.pid) == workers, (children(mixed.pid), workers, restarts)
        assert [process_state(pid) for pid in workers] == ["T"], restarts


def test_a_native_repository_runs_without_python(artifacts: dict[str, Path],
                                                 batched_repo: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(artifacts["mlp"], repo / "mlp" / "1")
    shutil.copytree(batched_repo / "rows" / "1", repo / "rows" / "1")
    with BridgeProcess(repo, workdir=tmp_path / "serve") as server:
        stub(server).ModelInfer(mlp_request(), timeout=60)
        tree = [server.pid, *descendants(server.pid)]
        assert tree == [server.pid], [cmdline(p) for p in tree]
        assert "python" not in Path(f"/proc/{server.pid}/exe").resolve().name
        # jaxport serve exec'ed the front: same PID.
        assert Path(f"/proc/{server.pid}/exe").resolve().name == "jaxport-front"


@pytest.fixture(scope="module")
def bucket_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("bucket-repo")
    export(seq.predict, seq.init(jax.random.key(0)),
           {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)},
           repo / "seqb" / "1", dims={"B": "1..8", "T": "8..64:8"},
           buckets={"B": [2], "T": [16, 32]}, padding={"T": "mask"}, goldens=0, quiet=True,
           name="seqb")
    return repo


def test_buckets_and_padding_are_served_natively(bucket_repo: Path, tmp_path: Path) -> None:
    params = seq.init(jax.random.key(0))
    reference = jax.jit(seq.predict)
    with BridgeProcess(bucket_repo, workdir=tmp_path / "serve") as server:
        f = stub(server)
        cfg = f.ModelConfig(pb.ModelConfigRequest(name="seqb"), timeout=30).config
        assert cfg.parameters["engine"].string_value == "native"
        assert cfg.parameters["buckets"].string_value == "B=2,T=16;B=2,T=32"
        assert cfg.parameters["padding"].string_value == "T=mask"
        for t in (8, 16, 24, 32):  # 8 runs padded to 16, 24 to 32
            req = poly_request(2, t)
            req.model_name = "seqb"
            got = f.ModelInfer(req, timeout=60)
            tokens = np.frombuffer(req.raw_input_contents[0], np.int32).reshape(2, t)
            want = reference(params, tokens, np.ones((2, t), np.bool_))
            for i, out in enumerate(got.outputs):
                value = np.frombuffer(got.raw_output_contents[i], np.float32).reshape(out.shape)
                np.testing.assert_allclose(value, np.asarray(want[out.name]), rtol=1e-5,
                                           atol=1e-6, err_msg=f"{out.name} at T={t}")
        req = poly_request(3, 16)
        req.model_name = "seqb"
        with pytest.raises(grpc.RpcError) as info:
            f.ModelInfer(req, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for needle in ("input 'tokens' dimension 0 (B) is 3", "B=2, T=16; B=2, T=32, T padded",
                       "the native engine", "--engine exported"):
            assert needle in info.value.details(), info.value.details()
        assert children(server.pid) == []
