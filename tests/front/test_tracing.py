"""Tracing against a REAL OTLP receiver (issue 27 item 5, docs/bridge.md#tracing): Jaeger
all-in-one (v1.76.0, built by tests/tiers.py from the Go module proxy, support.binaries)
receives the front's OTLP/gRPC export (`jaxport serve --trace-otlp-endpoint`), and its query API
shows, per request, ONE trace holding exactly the spans docs/bridge.md's table lists: the
caller's W3C traceparent (gRPC metadata, HTTP header) honoured as the trace id and the server
span's parent; under the server span one `infer` per request (per stream message) naming the
model, version and serving engine, with `admission` and `execute` under it (native unary call),
or `batcher` > `batch.queue`, `execute` (a batched REST request); a stream's messages all under
its one server span; a worker-served model (engine `exported`, as ModelConfig says) traced by
the front alone, its `execute` being the worker's share, and a request the front refuses
stopping at `infer`; metadata, answered by the front itself, a trace of its server span only.
Triton's trace extension answers what is configured (gRPC TraceSetting, REST
GET /v2/trace/setting), and refuses a change naming the setting.

Slow: Jaeger is a program of the second tier's builds (the first build on a machine compiles the
collector, minutes on 2 cores).
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import (
    FEATURES,
    PLUGIN,
    beyond_plugin,
    front_command,
    rows_request,
)
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support import binaries
from support.bridge import BridgeProcess

pytestmark = pytest.mark.slow  # Jaeger is built for the second tier only
WAIT_S = 60.0  # a receiver or a trace not there by then is a failure


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def post_json(url: str, body: object, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.fixture(scope="module")
def jaeger_binary() -> Path:
    """Jaeger all-in-one, built by tests/tiers.py (tier all) and handed over."""
    return binaries.path("jaeger")


class Jaeger:
    """A running Jaeger: OTLP/gRPC receiver on `otlp`, query API on `query`."""

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.otlp, self.query, query_grpc = free_port(), free_port(), free_port()
        config = workdir / "jaeger.yaml"
        config.write_text(f"""
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:{self.query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{self.otlp}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
""")
        self.log = workdir / "jaeger.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([str(binary), "--config", str(config)], stdout=out,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WAIT_S
        while True:  # ready when its query API answers
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-3000:]
                pytest.fail(f"jaeger exited {self.proc.returncode}:\n{tail}", pytrace=False)
            try:
                if get_json(f"http://127.0.0.1:{self.query}/api/services")[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"jaeger not answering after {WAIT_S}s", pytrace=False)
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def trace(self, trace_id: str, want: set[str]) -> list[dict]:
        """The spans of trace `trace_id` once every operation name in `want` is among them."""
        deadline = time.monotonic() + WAIT_S
        seen: list[dict] = []
        while time.monotonic() < deadline:
            code, body = get_json(f"http://127.0.0.1:{self.query}/api/traces/{trace_id}")
            if code == 200 and body.get("data"):
                assert len(body["data"]) == 1
                seen = body["data"][0]["spans"]
                if want <= {s["operationName"] for s in seen}:
                    return seen
            time.sleep(0.2)
        pytest.fail(f"trace {trace_id}: wanted {sorted(want)}, got "
                    f"{sorted(s['operationName'] for s in seen)}", pytrace=False)

    def traces_of(self, operation: str) -> list[str]:
        """Trace ids of every trace having a span `operation` of service jaxport."""
        query = urllib.parse.urlencode({"service": "jaxport", "operation": operation,
                                        "limit": 1000})
        code, body = get_json(f"http://127.0.0.1:{self.query}/api/traces?{query}")
        assert code == 200, body
        return [t["traceID"] for t in body["data"]]


@pytest.fixture(scope="module")
def jaeger(jaeger_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    j = Jaeger(jaeger_binary, tmp_path_factory.mktemp("jaeger"))
    yield j
    j.stop()


@pytest.fixture(scope="module")
def traced_repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path],
                batched_repo: Path) -> Path:
    """mlp (native, one program), rows (native, batching) and future (mlp with a StableHLO
    target outside the plugin's window: served by the workers)."""
    if not PLUGIN.is_file():
        pytest.fail(f"{PLUGIN} missing: run `make setup`", pytrace=False)
    repo = tmp_path_factory.mktemp("traced-repo")
    shutil.copytree(artifacts["mlp"], repo / "mlp" / "1")
    shutil.copytree(batched_repo / "rows" / "1", repo / "rows" / "1")
    beyond_plugin(artifacts["mlp"], repo / "future" / "1")
    return repo


@pytest.fixture(scope="module")
def traced(front_binary: Path, traced_repo: Path, jaeger: Jaeger,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """A front exporting spans to `jaeger`, `rows` batching (a batch is dispatched 2 ms after
    its first request), REST on."""
    with BridgeProcess(traced_repo, "--workers", "1", "--http-port", "0",
                       "--batching-models", "rows:2000",
                       env={"JAXPORT_TRACE_OTLP_ENDPOINT": f"127.0.0.1:{jaeger.otlp}"},
                       workdir=tmp_path_factory.mktemp("traced"),
                       command=front_command(front_binary)) as server:
        yield server


def caller() -> tuple[str, str, str]:
    """(trace id, span id, traceparent) of a caller's sampled span."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def by_name(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in spans:
        out.setdefault(s["operationName"], []).append(s)
    return out


def parent_of(span: dict) -> str | None:
    refs = [r for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
    return refs[0]["spanID"] if refs else None


def mlp_request(seed: int = 0) -> pb.ModelInferRequest:
    import bridge_models as m

    x = np.random.default_rng(seed).standard_normal(m.MLP_INPUTS["x"].shape)
    req = pb.ModelInferRequest(model_name="mlp", id="t")
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.astype(np.float32).tobytes())
    return req


def http_port(server: BridgeProcess) -> int:
    return int(json.loads(server.port_file.read_text())["http_port"])


def tags_of(span: dict) -> dict[str, object]:
    return {t["key"]: t["value"] for t in span["tags"]}


def names(spans: list[dict]) -> list[str]:
    return sorted(s["operationName"] for s in spans)


def children(spans: list[dict], parent: dict) -> list[str]:
    """The operation names of `parent`'s children among `spans`, sorted."""
    return names([s for s in spans if parent_of(s) == parent["spanID"]])


def config_engine(server: BridgeProcess, model: str) -> str:
    """The engine ModelConfig reports serving `model` (parameter `engine`)."""
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    cfg = stub.ModelConfig(pb.ModelConfigRequest(name=model)).config
    return cfg.parameters["engine"].string_value


def test_native_unary_is_one_trace_under_the_callers_span(traced: BridgeProcess,
                                                         jaeger: Jaeger) -> None:
    trace_id, span_id, tp = caller()
    stub = pb_grpc.GRPCInferenceServiceStub(traced.channel())
    stub.ModelInfer(mlp_request(), metadata=(("traceparent", tp),))
    server_name = "inference.GRPCInferenceService/ModelInfer"
    got = jaeger.trace(trace_id, {server_name, "infer", "admission", "execute"})
    # exactly these: the server span ends last, so every span of the call is in by then
    assert names(got) == sorted([server_name, "infer", "admission", "execute"])
    spans = by_name(got)
    (server,) = spans[server_name]
    assert parent_of(server) == span_id  # the caller's span, from the traceparent
    (infer,) = spans["infer"]
    assert parent_of(infer) == server["spanID"]
    assert children(got, infer) == ["admission", "execute"]
    tags = tags_of(infer)
    assert tags["jaxport.model"] == "mlp" and tags["jaxport.model_version"] == "1"
    assert tags["jaxport.engine"] == "native" == config_engine(traced, "mlp")
    assert tags_of(spans["execute"][0])["jaxport.rows"] == 1  # mlp: no batch dimension


def test_batched_rest_request_is_one_trace_with_the_batchers_spans(traced: BridgeProcess,
                                                                  jaeger: Jaeger) -> None:
    trace_id, span_id, tp = caller()
    x = np.random.default_rng(3).standard_normal((2, FEATURES)).astype(np.float32)
    code, body = post_json(
        f"http://127.0.0.1:{http_port(traced)}/v2/models/rows/infer",
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, FEATURES],
                     "data": x.ravel().tolist()}]},
        headers={"traceparent": tp})
    assert code == 200, body
    want = ["POST ModelInfer", "infer", "batcher", "batch.queue", "execute"]
    got = jaeger.trace(trace_id, set(want))
    # a batched request holds no admission slot: its batcher takes that place under infer
    assert names(got) == sorted(want)
    spans = by_name(got)
    (server,) = spans["POST ModelInfer"]
    assert parent_of(server) == span_id
    assert tags_of(server)["http.response.status_code"] == 200
    (infer,) = spans["infer"]
    (batcher,) = spans["batcher"]
    assert parent_of(infer) == server["spanID"] and parent_of(batcher) == infer["spanID"]
    assert children(got, batcher) == ["batch.queue", "execute"]
    tags = tags_of(infer)
    assert tags["jaxport.model"] == "rows" and tags["jaxport.engine"] == "native"
    assert tags_of(batcher)["jaxport.rows"] == 2
    tags = tags_of(spans["execute"][0])
    assert tags["jaxport.batch_size"] == 4 and tags["jaxport.batch_rows"] == 2


def test_stream_is_one_trace_with_an_infer_span_per_message(traced: BridgeProcess,
                                                             jaeger: Jaeger) -> None:
    trace_id, span_id, tp = caller()
    stub = pb_grpc.GRPCInferenceServiceStub(traced.channel())
    x = np.ones((1, FEATURES), np.float32)
    answers = list(stub.ModelStreamInfer(
        iter([mlp_request(1), rows_request(x, "r1"), mlp_request(2)]),
        metadata=(("traceparent", tp),)))
    assert [a.error_message for a in answers] == ["", "", ""]
    server_name = "inference.GRPCInferenceService/ModelStreamInfer"
    got = jaeger.trace(trace_id, {server_name, "infer", "batcher"})
    assert names(got) == sorted([server_name, *["infer"] * 3, *["admission", "execute"] * 2,
                                 "batcher", "batch.queue", "execute"])
    spans = by_name(got)
    (server,) = spans[server_name]  # ONE span for the whole stream
    assert parent_of(server) == span_id
    infers = spans["infer"]
    assert {parent_of(s) for s in infers} == {server["spanID"]}
    per_model: dict[str, list[dict]] = {}
    for s in infers:
        assert tags_of(s)["jaxport.engine"] == "native"
        per_model.setdefault(str(tags_of(s)["jaxport.model"]), []).append(s)
    assert sorted((m, len(v)) for m, v in per_model.items()) == [("mlp", 2), ("rows", 1)]
    for s in per_model["mlp"]:
        assert children(got, s) == ["admission", "execute"]
    (rows,) = per_model["rows"]
    assert children(got, rows) == ["batcher"]
    assert children(got, spans["batcher"][0]) == ["batch.queue", "execute"]


def test_worker_served_model_executes_under_infer_with_its_engine(traced: BridgeProcess,
                                                                  jaeger: Jaeger) -> None:
    """The worker side is not traced: the front's `execute` span is the worker's share, under
    an `infer` naming the worker's engine (the one ModelConfig reports)."""
    engine = config_engine(traced, "future")
    assert engine == "exported"  # the StableHLO target beyond the plugin: not native
    trace_id, span_id, tp = caller()
    stub = pb_grpc.GRPCInferenceServiceStub(traced.channel())
    req = mlp_request()
    req.model_name = "future"
    stub.ModelInfer(req, metadata=(("traceparent", tp),))
    server_name = "inference.GRPCInferenceService/ModelInfer"
    got = jaeger.trace(trace_id, {server_name, "infer", "admission", "execute"})
    assert names(got) == sorted([server_name, "infer", "admission", "execute"])
    spans = by_name(got)
    (server,) = spans[server_name]
    assert parent_of(server) == span_id
    (infer,) = spans["infer"]
    assert parent_of(infer) == server["spanID"]
    assert children(got, infer) == ["admission", "execute"]
    tags = tags_of(infer)
    assert tags["jaxport.model"] == "future" and tags["jaxport.model_version"] == "1"
    assert tags["jaxport.engine"] == engine
    assert tags_of(spans["execute"][0])["jaxport.rows"] == 1  # mlp: no batch dimension
    # a request the front refuses (docs/front.md: workers only execute validated tensors): its
    # status on the server span and on infer, and no admission or execution under it
    bad = mlp_request()
    bad.model_name = "future"
    bad.inputs[0].datatype = "INT8"
    trace_id, _, tp = caller()
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(bad, metadata=(("traceparent", tp),))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    got = jaeger.trace(trace_id, {server_name, "infer"})
    assert names(got) == sorted([server_name, "infer"])
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    for span in got:
        tags = tags_of(span)
        assert tags["rpc.grpc.status_code"] == invalid and tags["otel.status_code"] == "ERROR"
    (infer,) = by_name(got)["infer"]
    assert tags_of(infer)["jaxport.engine"] == engine


def test_metadata_without_traceparent_is_its_own_trace_of_the_server_span(
        traced: BridgeProcess, jaeger: Jaeger) -> None:
    """The front answers metadata itself, a worker-served model's too: each call is a trace of
    its one server span, a root."""
    stub = pb_grpc.GRPCInferenceServiceStub(traced.channel())
    name = "inference.GRPCInferenceService/ModelMetadata"
    before = set(jaeger.traces_of(name))
    for model in ("mlp", "future", "future"):
        assert stub.ModelMetadata(pb.ModelMetadataRequest(name=model)).name == model
    deadline = time.monotonic() + WAIT_S
    new: set[str] = set()
    while time.monotonic() < deadline and len(new) < 3:
        new = set(jaeger.traces_of(name)) - before
        time.sleep(0.2)
    assert len(new) == 3
    for trace_id in new:
        (server,) = jaeger.trace(trace_id, {name})
        assert parent_of(server) is None
        assert tags_of(server)["rpc.method"] == "ModelMetadata"


def test_trace_setting_answers_what_is_configured(traced: BridgeProcess, jaeger: Jaeger) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(traced.channel())
    got = stub.TraceSetting(pb.TraceSettingRequest(model_name="mlp"))
    settings = {k: list(v.value) for k, v in got.settings.items()}
    assert settings["trace_level"] == ["TIMESTAMPS"]
    assert settings["trace_mode"] == ["opentelemetry"]
    assert settings["url"] == [f"127.0.0.1:{jaeger.otlp}"]
    with pytest.raises(grpc.RpcError) as err:
        stub.TraceSetting(pb.TraceSettingRequest(
            settings={"trace_level": pb.TraceSettingRequest.SettingValue(value=["OFF"])}))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "trace setting 'trace_level' cannot be changed" in err.value.details()
    base = f"http://127.0.0.1:{http_port(traced)}"
    code, body = get_json(f"{base}/v2/trace/setting")
    assert code == 200 and body["trace_level"] == ["TIMESTAMPS"] and body["trace_rate"] == "1"
    assert get_json(f"{base}/v2/models/mlp/trace/setting") == (200, body)
    assert post_json(f"{base}/v2/trace/setting", {"trace_rate": "1"}) == (200, body)
    code, body = post_json(f"{base}/v2/trace/setting", {"trace_count": "10"})
    assert code == 400 and "trace setting 'trace_count' cannot be changed" in body["error"]
