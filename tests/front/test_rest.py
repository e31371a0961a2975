"""The front's REST/JSON API (`--http-port`, bridge/front/rest) against real fronts: every
answer is compared with the same front's gRPC answer (REST decodes into the request type the
gRPC handlers take and answers from the same server methods), errors with their HTTP status
and the message naming what is wrong, security (mTLS + bearer token, body limit), deadlines,
the SIGTERM drain, and the conformance suite over REST (tests/conformance/rest_runner.py)
judged case by case against the gRPC runner on the same server.

Clients: http.client (through rest_runner's RestClient/encode_infer/decode_infer, plus bodies
written out by hand where the wire bytes are the point) and curl when it is on PATH.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from front_helpers import front_command
from google.protobuf import json_format
from jaxport.protocol import dtypes
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess
from support.exports import conformance_suite, copy_of, exported
from support.gate import Gate
from support.modules import load
from support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO / "tests" / "conformance"


rest_runner = load("jaxport_conformance_rest_runner", CONFORMANCE / "rest_runner.py")

#: One model per datatype the bridge serves: y = x + c (BOOL: x XOR c), x and y [2, 3].
DATATYPES = [row.datatype for row in dtypes.DTYPES]
SPECIAL_FLOATS = [0.1, -0.0, np.nan, np.inf, -np.inf, 1e-30]


def dt_model(datatype: str) -> str:
    return f"dt_{datatype.lower()}"


def sample(datatype: str) -> np.ndarray:
    """Values that test exactness: extremes of each integer type, NaN/inf/-0/tiny floats."""
    row = dtypes.by_datatype(datatype)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if np.issubdtype(row.numpy, np.integer):
        info = np.iinfo(row.numpy)
        return np.array([info.min, info.max - 3, 0, 1, -1 if info.min < 0 else 7, 42],
                        dtype=row.numpy).reshape(2, 3)
    return np.array(SPECIAL_FLOATS, dtype=np.float64).astype(row.numpy).reshape(2, 3)


def _export_dtype_models(root: Path) -> None:
    import jax
    import jax.numpy as jnp
    from jaxport.exporter import export

    def fn(params: dict, x: Any) -> dict:
        if x.dtype == jnp.bool_:
            return {"y": jnp.logical_xor(x, params["c"])}
        return {"y": x + params["c"]}

    for row in dtypes.DTYPES:
        c = (np.array([True, False, True]) if row.datatype == "BOOL"
             else np.array([1, 2, 3]).astype(row.numpy))
        export(fn, {"c": c}, {"x": jax.ShapeDtypeStruct((2, 3), row.numpy)},
               root / dt_model(row.datatype) / "1", goldens=1, quiet=True,
               name=dt_model(row.datatype))


@pytest.fixture(scope="module")
def rest_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The conformance suite's models and one model per datatype (each from the shared export
    cache), copied into one repository."""
    root = tmp_path_factory.mktemp("rest") / "repo"
    copy_of(conformance_suite(), root)
    dtype_models = exported("rest-dtype-models", _export_dtype_models,
                            sources=[Path(__file__)])
    for model in dtype_models.iterdir():
        shutil.copytree(model, root / model.name)
    return root


@pytest.fixture(scope="module")
def rest_gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("rest-gate"))


@pytest.fixture(scope="module")
def rest_front(front_binary: Path, rest_repo: Path, rest_gate: Gate,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """A front with REST on a free port (--port 0 implies --http-port 0), system shared memory
    on, explicit model control (a test unloads and loads)."""
    with BridgeProcess(rest_repo, "--system-shared-memory", "--model-control-mode", "explicit",
                       "--load-model", "*", env=rest_gate.env,
                       workdir=tmp_path_factory.mktemp("rest"),
                       command=front_command(front_binary)) as f:
        yield f


def http_port(server: BridgeProcess) -> int:
    return int(json.loads(server.port_file.read_text())["http_port"])


def client(server: BridgeProcess, **kwargs: Any) -> Any:
    return rest_runner.RestClient(f"127.0.0.1:{http_port(server)}", **kwargs)


def stub(server: BridgeProcess) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(server.channel())


def rest_json(c: Any, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, data = c.request(method, path, body, headers)
    return status, json.loads(data)


def grpc_infer(server: BridgeProcess, model: str, arrays: dict[str, np.ndarray],
               outputs: list[str] | None = None) -> dict[str, np.ndarray]:
    """The same front's gRPC answer (raw contents), as arrays."""
    req = pb.ModelInferRequest(model_name=model)
    for name, a in arrays.items():
        row = dtypes.by_numpy(a.dtype)
        req.inputs.add(name=name, datatype=row.datatype, shape=a.shape)
        req.raw_input_contents.append(np.ascontiguousarray(a, row.numpy).tobytes())
    for name in outputs or []:
        req.outputs.add(name=name)
    resp = stub(server).ModelInfer(req, timeout=120)
    return {o.name: np.frombuffer(raw, dtypes.by_datatype(o.datatype).numpy).reshape(o.shape)
            for o, raw in zip(resp.outputs, resp.raw_output_contents, strict=True)}


def grpc_error(call: Any, request: Any, **kw: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=60, **kw)
    return info.value


def rest_infer(server: BridgeProcess, model: str, arrays: dict[str, np.ndarray], *,
               binary_inputs: bool, binary_outputs: bool,
               outputs: list[dict[str, Any]] | None = None) -> tuple[int, Any, Any]:
    """(status, response JSON or error body, {name: array} on 200)."""
    inputs = [(name, dtypes.by_numpy(a.dtype).datatype, list(a.shape),
               np.ascontiguousarray(a, dtypes.by_numpy(a.dtype).numpy).tobytes())
              for name, a in arrays.items()]
    body, headers = rest_runner.encode_infer(inputs, binary_inputs=binary_inputs,
                                             binary_outputs=binary_outputs, outputs=outputs)
    status, rheaders, data = client(server).request("POST", f"/v2/models/{model}/infer", body,
                                                    headers)
    if status != 200:
        return status, json.loads(data), None
    doc, got = rest_runner.decode_infer(rheaders, data)
    return status, doc, got


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.issubdtype(want.dtype, np.floating) or want.dtype.name == "bfloat16":
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
        assert (np.signbit(got.astype(np.float64)) == np.signbit(want.astype(np.float64))).all()
    else:
        assert got.tobytes() == want.tobytes()


# --- health and metadata: the gRPC answers, as JSON -------------------------------------------


def test_health_metadata_and_ready_equal_the_grpc_answers(rest_front: BridgeProcess) -> None:
    c, s = client(rest_front), stub(rest_front)
    assert rest_json(c, "GET", "/v2/health/live") == (200, {"live": True})
    assert s.ServerLive(pb.ServerLiveRequest()).live is True
    assert rest_json(c, "GET", "/v2/health/ready") == (200, {"ready": True})
    assert s.ServerReady(pb.ServerReadyRequest()).ready is True
    meta = s.ServerMetadata(pb.ServerMetadataRequest())
    assert rest_json(c, "GET", "/v2") == (200, {"name": meta.name, "version": meta.version,
                                                "extensions": list(meta.extensions)})
    assert rest_json(c, "GET", "/v2/") == rest_json(c, "GET", "/v2")
    for model in sorted(p.name for p in rest_front.repository.iterdir()):
        m = s.ModelMetadata(pb.ModelMetadataRequest(name=model))
        want = {"name": m.name, "versions": list(m.versions), "platform": m.platform,
                **{kind: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                          for t in getattr(m, kind)] for kind in ("inputs", "outputs")}}
        assert rest_json(c, "GET", f"/v2/models/{model}") == (200, want), model
        assert rest_json(c, "GET", f"/v2/models/{model}/versions/1") == (200, want), model
        assert s.ModelReady(pb.ModelReadyRequest(name=model)).ready is True
        assert rest_json(c, "GET", f"/v2/models/{model}/ready") == (
            200, {"name": model, "ready": True})
        assert rest_json(c, "GET", f"/v2/models/{model}/versions/1/ready")[0] == 200


def test_config_and_statistics_are_the_grpc_messages(rest_front: BridgeProcess) -> None:
    c, s = client(rest_front), stub(rest_front)
    config = s.ModelConfig(pb.ModelConfigRequest(name="cf_multi")).config
    want = json_format.MessageToDict(config, preserving_proto_field_name=True)
    status, got = rest_json(c, "GET", "/v2/models/cf_multi/config")
    assert status == 200
    # protobuf's JSON writes int64 as strings and leaves zero values out; the REST answer writes
    # numbers (as Triton does) and every scalar: equal once both are read as numbers.
    def numbers(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: numbers(x) for k, x in v.items()}
        if isinstance(v, list):
            return [numbers(x) for x in v]
        return int(v) if isinstance(v, str) and re.fullmatch(r"-?\d+", v) else v

    def present(got: Any, want: Any) -> None:
        if isinstance(want, dict):
            for k, v in want.items():
                present(got[k], v)
        elif isinstance(want, list):
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                present(g, w)
        else:
            assert got == want
    present(numbers(got), numbers(want))
    assert got["input"][0]["dims"] == [2, 3] and got["max_batch_size"] == config.max_batch_size

    rest_infer(rest_front, "dt_int16", {"x": sample("INT16")}, binary_inputs=True,
               binary_outputs=True)
    stats = s.ModelStatistics(pb.ModelStatisticsRequest(name="dt_int16")).model_stats[0]
    status, got = rest_json(c, "GET", "/v2/models/dt_int16/stats")
    assert status == 200
    (one,) = got["model_stats"]
    assert (one["name"], one["version"]) == ("dt_int16", stats.version)
    assert one["inference_count"] == stats.inference_count >= 1
    assert one["inference_stats"]["success"]["count"] == stats.inference_stats.success.count
    assert isinstance(one["inference_stats"]["success"]["ns"], int)
    status, every = rest_json(c, "GET", "/v2/models/stats")
    assert status == 200 and "dt_int16" in {m["name"] for m in every["model_stats"]}


# --- infer: REST equals gRPC for every datatype, JSON and binary forms -------------------------


@pytest.mark.parametrize("datatype", DATATYPES)
def test_infer_equals_grpc_for_every_datatype(rest_front: BridgeProcess, datatype: str) -> None:
    model, x = dt_model(datatype), sample(datatype)
    want = grpc_infer(rest_front, model, {"x": x})["y"]
    status, doc, got = rest_infer(rest_front, model, {"x": x}, binary_inputs=True,
                                  binary_outputs=True)
    assert status == 200, doc
    assert doc["outputs"] == [{"name": "y", "datatype": datatype, "shape": [2, 3],
                               "parameters": {"binary_data_size": want.nbytes}}]
    assert doc["model_name"] == model and doc["model_version"] == "1"
    assert_same(got["y"], want)
    if datatype in ("FP16", "BF16"):
        # Triton's rule: no JSON form for these; each refusal names the tensor.
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": datatype,
                                       "data": x.astype(np.float64).ravel().tolist()}]})
        status, answer = rest_json(client(rest_front), "POST", f"/v2/models/{model}/infer",
                                   body.encode())
        assert (status, answer) == (400, {"error": (
            f"input 'x': {datatype} data cannot be sent as JSON; send it as binary data "
            "(parameters.binary_data_size, Triton's binary tensor data extension)")})
        status, body, _ = rest_infer(rest_front, model, {"x": x}, binary_inputs=True,
                                     binary_outputs=False)
        assert (status, body) == (400, {"error": (
            f"output 'y': {datatype} data cannot be sent as JSON; request it with "
            "parameters.binary_data=true (or the request parameter binary_data_output=true)")})
        return
    status, doc, got = rest_infer(rest_front, model, {"x": x}, binary_inputs=False,
                                  binary_outputs=False)
    assert status == 200, doc
    data = doc["outputs"][0]["data"]
    if datatype in ("FP32", "FP64"):  # the shortest text reading back as the same value
        assert np.array(data, dtype=want.dtype).tobytes() == want.tobytes() or np.isnan(want).any()
    else:  # integers exactly (INT64/UINT64 extremes too), BOOL as true/false
        assert data == want.ravel().tolist()
    assert_same(got["y"], want)
    # Nested data (one array per dimension) is the same request as flat data.
    body = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": datatype,
                                   "data": x.tolist()}]}).encode()
    status, nested = rest_json(client(rest_front), "POST", f"/v2/models/{model}/infer", body)
    assert (status, nested["outputs"]) == (200, doc["outputs"])


def test_mixed_json_and_binary_inputs_and_outputs(rest_front: BridgeProcess) -> None:
    alpha = np.array([[1.5, -2, 0.25], [3, 4, -5]], np.float32)
    beta = np.array([7, -8, 9], np.int32)
    want = grpc_infer(rest_front, "cf_multi", {"alpha": alpha, "beta": beta})
    header = json.dumps({
        "id": "mix-1",
        "inputs": [
            {"name": "alpha", "shape": [2, 3], "datatype": "FP32", "data": alpha.ravel().tolist()},
            {"name": "beta", "shape": [3], "datatype": "INT32",
             "parameters": {"binary_data_size": beta.nbytes}}],
        "outputs": [{"name": "total", "parameters": {"binary_data": True}},
                    {"name": "greater"}],
    }).encode()
    status, headers, data = client(rest_front).request(
        "POST", "/v2/models/cf_multi/infer", header + beta.tobytes(),
        {"Inference-Header-Content-Length": str(len(header))})
    assert status == 200
    assert headers["content-type"] == "application/octet-stream"
    split = int(headers["inference-header-content-length"])
    doc = json.loads(data[:split])
    assert doc["id"] == "mix-1" and [o["name"] for o in doc["outputs"]] == ["total", "greater"]
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": want["total"].nbytes}
    assert_same(np.frombuffer(data[split:], np.float32).reshape(2, 3), want["total"])
    assert doc["outputs"][1]["data"] == want["greater"].ravel().tolist()
    assert len(data) == split + want["total"].nbytes


def test_bytes_outputs_as_json_strings_and_binary(rest_front: BridgeProcess) -> None:
    """BYTES outputs (Triton's classification extension, the parameter forwarded): as JSON
    strings, and as length-prefixed binary data, both equal to the gRPC answer."""
    x = np.array([[1, 5, 2], [4, 3, 0]], np.float32)
    req = pb.ModelInferRequest(model_name="cf_fp32")
    req.inputs.add(name="data_in", datatype="FP32", shape=[2, 3])
    req.raw_input_contents.append(x.tobytes())
    req.outputs.add(name="data_out").parameters["classification"].int64_param = 3
    resp = stub(rest_front).ModelInfer(req, timeout=60)
    (out,) = resp.outputs
    assert out.datatype == "BYTES"
    want = rest_runner.decode_bytes_elements(resp.raw_output_contents[0])
    for binary in (False, True):
        status, doc, got = rest_infer(
            rest_front, "cf_fp32", {"data_in": x}, binary_inputs=True, binary_outputs=binary,
            outputs=[{"name": "data_out", "parameters": {"classification": 3}}])
        assert status == 200, doc
        assert doc["outputs"][0]["shape"] == list(out.shape)
        if not binary:
            assert doc["outputs"][0]["data"] == [e.decode() for e in want]
        assert list(got["data_out"].ravel()) == want


def test_shared_memory_parameters_over_rest(rest_front: BridgeProcess) -> None:
    """Regions registered over gRPC, used from REST through the shared-memory parameters
    (forwarded as they are): the output lands in the region, the answer carries no data."""
    import os

    from jaxport.client import InferenceClient, SharedMemoryRegion

    model, x = dt_model("FP32"), sample("FP32")
    want = grpc_infer(rest_front, model, {"x": x})["y"]
    tag = f"jaxport_rest_{os.getpid()}"
    with InferenceClient(rest_front.address, timeout=120) as grpc_client, \
            SharedMemoryRegion("rin", f"/{tag}_in", x.nbytes) as r_in, \
            SharedMemoryRegion("rout", f"/{tag}_out", x.nbytes) as r_out:
        r_in.write(x)
        grpc_client.register_system_shared_memory(r_in)
        grpc_client.register_system_shared_memory(r_out)
        try:
            for _ in range(2):  # the front maps the regions once, for every request
                body = json.dumps({
                    "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {
                        "shared_memory_region": "rin", "shared_memory_byte_size": x.nbytes}}],
                    "outputs": [{"name": "y", "parameters": {
                        "shared_memory_region": "rout",
                        "shared_memory_byte_size": x.nbytes}}]}).encode()
                status, doc = rest_json(client(rest_front), "POST", f"/v2/models/{model}/infer",
                                        body)
                assert status == 200, doc
                # Triton's HTTP answer: no data and no shared-memory parameters (its C++
                # client, perf_analyzer's, reads binary_data_size from any output with
                # parameters)
                assert doc["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [2, 3]}]
                assert_same(np.frombuffer(r_out.view(0, x.nbytes), np.float32).reshape(2, 3),
                            want)
        finally:
            grpc_client.unregister_system_shared_memory()


def test_curl(rest_front: BridgeProcess, tmp_path: Path) -> None:
    """curl (when on PATH) gets the answers http.client gets; the docs' examples are these."""
    curl = shutil.which("curl")
    base = f"http://127.0.0.1:{http_port(rest_front)}"
    body = json.dumps({"inputs": [{"name": "data_in", "shape": [2, 3], "datatype": "FP32",
                                   "data": [[1, 2, 3], [4, 5, 6]]}]})
    status, want = rest_json(client(rest_front), "POST", "/v2/models/cf_fp32/infer",
                             body.encode())
    assert status == 200
    if curl is None:
        return  # http.client's answer was checked above; curl itself is not installed
    ready = subprocess.run([curl, "-s", "-w", "%{http_code}", f"{base}/v2/health/ready"],
                           capture_output=True, text=True, check=True).stdout
    assert ready == '{"ready":true}200'
    got = subprocess.run([curl, "-s", "-X", "POST", f"{base}/v2/models/cf_fp32/infer",
                          "-H", "Content-Type: application/json", "-d", body],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(got) == want
    missing = subprocess.run([curl, "-s", "-w", " %{http_code}", f"{base}/v2/models/nope"],
                             capture_output=True, text=True, check=True).stdout
    err = grpc_error(stub(rest_front).ModelMetadata, pb.ModelMetadataRequest(name="nope"))
    assert missing == json.dumps({"error": err.details()}, separators=(",", ":")) + " 404"


# --- errors: the status of the one table, the message naming the offender ----------------------


def test_system_shared_memory_endpoints_share_the_grpc_registry(rest_front: BridgeProcess
                                                                 ) -> None:
    """Triton's REST shared-memory endpoints (bridge/front/rest/shm.go): a region registered
    over REST is the gRPC registry's (status over gRPC, used by REST and gRPC infer), the
    status list is Triton's shape, refusals are the gRPC ones with their HTTP
    status, unregister one and all. tritonclient.http's calls: test_triton_http_clients.py."""
    import os

    from jaxport.client import InferenceClient, SharedMemoryRegion

    c, s = client(rest_front), stub(rest_front)
    model, x = dt_model("FP32"), sample("FP32")
    want = grpc_infer(rest_front, model, {"x": x})["y"]
    base = "/v2/systemsharedmemory"
    tag = f"jaxport_rest_shm_{os.getpid()}"
    with InferenceClient(rest_front.address, timeout=120) as grpc_client, \
            SharedMemoryRegion("rin", f"/{tag}_in", 256) as r_in:
        r_in.write(x)
        register = json.dumps({"key": r_in.key, "offset": 0, "byte_size": 256}).encode()
        assert c.request("POST", f"{base}/region/rin/register", register)[::2] == (200, b"")
        try:
            assert sorted(grpc_client.system_shared_memory_status()) == ["rin"]
            status = [{"name": "rin", "key": r_in.key, "offset": 0, "byte_size": 256}]
            assert rest_json(c, "GET", f"{base}/status") == (200, status)
            assert rest_json(c, "GET", f"{base}/region/rin/status") == (200, status)
            body = json.dumps({"inputs": [{
                "name": "x", "shape": [2, 3], "datatype": "FP32", "parameters": {
                    "shared_memory_region": "rin", "shared_memory_byte_size": x.nbytes}}]})
            for _ in range(2):  # used again: still registered
                got = rest_json(c, "POST", f"/v2/models/{model}/infer", body.encode())
                assert got[0] == 200, got
                assert_same(np.array(got[1]["outputs"][0]["data"], np.float32).reshape(2, 3),
                            want)
            # Refusals: the gRPC call's status and message.
            for path, req, call, grpc_req in (
                (f"{base}/region/rin/register", register, s.SystemSharedMemoryRegister,
                 pb.SystemSharedMemoryRegisterRequest(name="rin", key=r_in.key, byte_size=256)),
                (f"{base}/region/r2/register",
                 json.dumps({"key": r_in.key, "offset": 200, "byte_size": 100}).encode(),
                 s.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(
                     name="r2", key=r_in.key, offset=200, byte_size=100)),
                (f"{base}/region/nope/status", None, s.SystemSharedMemoryStatus,
                 pb.SystemSharedMemoryStatusRequest(name="nope")),
            ):
                err = grpc_error(call, grpc_req)
                method = "GET" if path.endswith("/status") else "POST"
                got = rest_json(c, method, path, req)
                assert got == (rest_runner_status(err.code()), {"error": err.details()}), path
            # What the codec cannot translate: 400 naming the field.
            assert rest_json(c, "POST", f"{base}/region/r3/register", b'{"key": "/k"}') == (
                400, {"error": 'request: "byte_size" is required'})
            assert c.request("GET", f"{base}/region/rin/register")[0] == 405
            # Unregister one (REST), then all.
            assert c.request("POST", f"{base}/region/rin/unregister")[::2] == (200, b"")
            assert rest_json(c, "GET", f"{base}/status") == (200, [])
            grpc_client.register_system_shared_memory(r_in)
            assert rest_json(c, "GET", f"{base}/status")[1][0]["name"] == "rin"
            assert c.request("POST", f"{base}/unregister")[::2] == (200, b"")
            assert grpc_client.system_shared_memory_status() == {}
            # CUDA: a CPU-only server's answers, as over gRPC.
            assert rest_json(c, "GET", "/v2/cudasharedmemory/status") == (200, [])
            assert c.request("POST", "/v2/cudasharedmemory/unregister")[0] == 200
        finally:
            grpc_client.unregister_system_shared_memory()


def rest_runner_status(code: grpc.StatusCode) -> int:
    """The HTTP status the front gives a gRPC code (bridge/front/rest_status.go)."""
    return {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.NOT_FOUND: 404,
            grpc.StatusCode.ALREADY_EXISTS: 409}[code]


def test_errors_are_the_bridges_with_their_http_status(rest_front: BridgeProcess) -> None:
    c, s = client(rest_front), stub(rest_front)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def infer_error(model: str, version: str = "", shape: tuple[int, ...] = (2, 3),
                    data: bytes | None = None) -> grpc.RpcError:
        req = pb.ModelInferRequest(model_name=model, model_version=version)
        req.inputs.add(name="data_in", datatype="FP32", shape=shape)
        req.raw_input_contents.append(x.tobytes() if data is None else data)
        return grpc_error(s.ModelInfer, req)

    def rest_error(model: str, version: str = "", shape: tuple[int, ...] = (2, 3),
                   data: bytes | None = None) -> tuple[int, Any]:
        raw = x.tobytes() if data is None else data
        body, headers = rest_runner.encode_infer([("data_in", "FP32", list(shape), raw)],
                                                 binary_inputs=True)
        return rest_json(c, "POST", rest_runner.model_path(model, version) + "/infer", body,
                         headers)

    # Unknown model and version: 404, the gRPC message (it names them).
    for args in (("no_such_model",), ("cf_fp32", "999")):
        err = infer_error(*args)
        assert err.code() == grpc.StatusCode.NOT_FOUND and args[-1] in err.details()
        assert rest_error(*args) == (404, {"error": err.details()})
    err = grpc_error(s.ModelMetadata, pb.ModelMetadataRequest(name="no_such_model"))
    assert rest_json(c, "GET", "/v2/models/no_such_model") == (404, {"error": err.details()})
    err = grpc_error(s.ModelReady, pb.ModelReadyRequest(name="no_such_model"))
    assert rest_json(c, "GET", "/v2/models/no_such_model/ready") == (
        404, {"error": err.details()})
    # Shape and byte-count mismatches: 400 and the bridge's message naming the input.
    for kwargs in ({"shape": (3, 2)}, {"data": x.tobytes()[:20]}):
        err = infer_error("cf_fp32", **kwargs)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "data_in" in err.details()
        assert rest_error("cf_fp32", **kwargs) == (400, {"error": err.details()})
    # JSON data with too few elements: named as REST has it ("data"), not as the gRPC
    # message it translates to (contents.fp32_contents).
    body = json.dumps({"inputs": [{"name": "data_in", "shape": [2, 3], "datatype": "FP32",
                                   "data": [1, 2, 3, 4, 5]}]}).encode()
    assert rest_json(c, "POST", "/v2/models/cf_fp32/infer", body) == (400, {
        "error": "input 'data_in': \"data\" holds 5 elements; expected 6 (shape [2, 3])"})
    # JSON the codec cannot translate: 400 naming the field.
    for text, message in (
        (b'{"inputs": [{"name": "data_in", "shape": "2x3", "datatype": "FP32", "data": [1]}]}',
         "input 'data_in': shape: expected an array of integers, got \"2x3\""),
        (b'{"inputs": [{"name": "data_in", "shape": [2, 3], "data": [1]}]}',
         'inputs[0]: "datatype" is required'),
        (b'{"inputs": [{"name": "data_in", "shape": [6], "datatype": "INT8", "data": [1, 999]}]}',
         "input 'data_in': data element 1: 999 is not an integer that fits INT8"),
        (b'{"inputs": [', "request body: invalid JSON at byte 12: unexpected end of input"),
    ):
        assert rest_json(c, "POST", "/v2/models/cf_fp32/infer", text) == (400, {"error": message})
    status, answer = rest_json(c, "POST", "/v2/models/cf_fp32/infer", b'{"inputs": []}\x00',
                               {"Inference-Header-Content-Length": "x"})
    assert (status, answer) == (400, {"error": "header Inference-Header-Content-Length: "
                                               "expected a byte count >= 0, got \"x\""})
    # No such endpoint, wrong method.
    status, answer = rest_json(c, "GET", "/v2/models/cf_fp32/explain")
    assert status == 404 and "/v2/models/cf_fp32/explain" in answer["error"]
    status, headers, data = c.request("GET", "/v2/models/cf_fp32/infer")
    assert (status, headers["allow"]) == (405, "POST")
    assert json.loads(data) == {"error": "GET /v2/models/cf_fp32/infer: method not allowed; "
                                         "use POST"}


def test_deadline_header(rest_front: BridgeProcess, rest_gate: Gate) -> None:
    c = client(rest_front)
    body, headers = rest_runner.encode_infer(
        [("x", "INT32", [2, 3], sample("INT32").tobytes())], binary_inputs=True)
    status, answer = rest_json(c, "POST", "/v2/models/dt_int32/infer", body,
                               {**headers, "Timeout": "soon"})
    assert (status, answer) == (400, {"error": 'header Timeout: expected seconds > 0 (e.g. 2.5), '
                                               'got "soon"'})
    # Held at the test gate, the call cannot finish before its deadline: 504, as gRPC's
    # DEADLINE_EXCEEDED.
    with rest_gate.holding("dt_int32"), ThreadPoolExecutor(1) as pool:
        call = pool.submit(rest_json, c, "POST", "/v2/models/dt_int32/infer", body,
                           {**headers, "Timeout": "0.5"})
        rest_gate.wait_held("dt_int32", 1, calls=[call])
        status, answer = call.result(timeout=120)
    assert status == 504 and "deadline" in answer["error"].lower()


def test_repository_index_unload_and_load(rest_front: BridgeProcess) -> None:
    """Triton's repository extension over REST: the index equals the gRPC one; unload makes
    the model unready, load serves it again."""
    c, s = client(rest_front), stub(rest_front)
    index = s.RepositoryIndex(pb.RepositoryIndexRequest())
    want = [{"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
            for m in index.models]
    assert rest_json(c, "POST", "/v2/repository/index") == (200, want)
    assert rest_json(c, "POST", "/v2/repository/index", b'{"ready": true}')[0] == 200
    model = dt_model("UINT32")
    status, _, data = c.request("POST", f"/v2/repository/models/{model}/unload")
    assert (status, data) == (200, b"")
    # false is a 4xx (the OIP REST text; Triton's 400)
    assert rest_json(c, "GET", f"/v2/models/{model}/ready") == (
        400, {"error": f"model '{model}' is not ready"})
    assert s.ModelReady(pb.ModelReadyRequest(name=model)).ready is False
    status, _, data = c.request("POST", f"/v2/repository/models/{model}/load", b"{}")
    assert (status, data) == (200, b"")
    assert rest_json(c, "GET", f"/v2/models/{model}/ready") == (200, {"name": model, "ready": True})
    status, doc, got = rest_infer(rest_front, model, {"x": sample("UINT32")},
                                  binary_inputs=False, binary_outputs=False)
    assert status == 200, doc
    assert_same(got["y"], grpc_infer(rest_front, model, {"x": sample("UINT32")})["y"])
    err = grpc_error(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="nope"))
    status, answer = rest_json(c, "POST", "/v2/repository/models/nope/load")
    assert (status, answer) == (http_status_of(err.code()), {"error": err.details()})
    assert "nope" in answer["error"]


def http_status_of(code: grpc.StatusCode) -> int:
    return rest_runner.REST_STATUS[code.name]


# --- the conformance suite over REST -----------------------------------------------------------


def verdicts(output: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in re.finditer(r"^(PASS|FAIL|N/A) (\S+?):?(?: |$)",
                                                         output, re.MULTILINE)}


def test_conformance_suite_over_rest_judged_like_grpc(rest_front: BridgeProcess) -> None:
    rest = subprocess.run(
        [sys.executable, str(CONFORMANCE / "rest_runner.py"), "--url",
         f"127.0.0.1:{http_port(rest_front)}"], capture_output=True, text=True, timeout=900)
    over_grpc = subprocess.run(
        [sys.executable, str(CONFORMANCE / "runner.py"), "--url", rest_front.address],
        capture_output=True, text=True, timeout=900)
    summary = re.search(r"^conformance python-rest: (\d+) passed, (\d+) failed, "
                        r"(\d+) not applicable$", rest.stdout, re.MULTILINE)
    assert summary, rest.stdout + rest.stderr
    got, want = verdicts(rest.stdout), verdicts(over_grpc.stdout)
    no_rest = {name for name, v in got.items() if v == "N/A"}
    # Not applicable over REST: streams, CUDA shared memory and the gRPC compression cases;
    # over gRPC: the REST-only cases (Content-Encoding, REST shared memory).
    assert no_rest and all(name.startswith(("stream_", "cuda_shm_", "infer_grpc_compression_"))
                           for name in no_rest), no_rest
    no_grpc = {name for name, v in want.items() if v == "N/A"}
    assert no_grpc and all(name.startswith("rest_") for name in no_grpc), no_grpc
    for line in rest.stdout.splitlines():
        if line.startswith("N/A stream_"):
            assert line.endswith("(streams have no REST form (gRPC only))"), line
        if line.startswith("N/A infer_grpc_compression_"):
            assert line.endswith("(gRPC only (this runner speaks REST))"), line
    # Every case both transports run is judged the same (a case failing over gRPC too is the
    # server's, not the codec's), and most pass.
    both = set(got) - no_rest - no_grpc
    assert {n: got[n] for n in both} == {n: want[n] for n in both}, rest.stdout
    assert int(summary.group(1)) >= 60 and rest.returncode == (1 if int(summary.group(2)) else 0)


# --- security, limits, drain ------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured_front(front_binary: Path, rest_repo: Path, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[BridgeProcess, Any, Path]]:
    """mTLS + bearer token + a 1 MiB message limit, serving cf_fp32."""
    from support.certs import make_pki

    work = tmp_path_factory.mktemp("rest-secured")
    repo = work / "repo"
    shutil.copytree(rest_repo / "cf_fp32", repo / "cf_fp32")
    pki = make_pki(work / "pki")
    token = work / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    server = BridgeProcess(
        repo, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca_cert), "--auth-token-file", str(token),
        "--max-message-bytes", str(1 << 20), workdir=work / "front",
        command=front_command(front_binary, "--workers", "1"))
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.read("ca_cert"), private_key=pki.read("client_key"),
        certificate_chain=pki.read("client_cert"))
    with server.start(credentials=creds):
        yield server, pki, creds


def test_token_and_mutual_tls(secured_front: tuple[BridgeProcess, Any, Any]) -> None:
    server, pki, creds = secured_front
    context = rest_runner.ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
    anonymous = client(server, context=context)
    member = client(server, context=context, token="s3cret")
    with grpc.secure_channel(server.address, creds) as channel:
        err = grpc_error(pb_grpc.GRPCInferenceServiceStub(channel).ServerMetadata,
                         pb.ServerMetadataRequest())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    # Health is open, like ServerLive/ServerReady over gRPC; the rest needs the token.
    assert rest_json(anonymous, "GET", "/v2/health/ready") == (200, {"ready": True})
    for path in ("/v2", "/v2/models/cf_fp32", "/v2/models/cf_fp32/ready"):
        status, headers, data = anonymous.request("GET", path)
        assert (status, json.loads(data)) == (401, {"error": err.details()}), path
        assert headers["www-authenticate"] == "Bearer"
    wrong = client(server, context=context, token="guess")
    assert rest_json(wrong, "GET", "/v2")[0] == 401
    assert rest_json(member, "GET", "/v2")[0] == 200
    body = json.dumps({"inputs": [{"name": "data_in", "shape": [2, 3], "datatype": "FP32",
                                   "data": [1, 2, 3, 4, 5, 6]}]}).encode()
    assert rest_json(anonymous, "POST", "/v2/models/cf_fp32/infer", body)[0] == 401
    status, answer = rest_json(member, "POST", "/v2/models/cf_fp32/infer", body)
    assert status == 200 and answer["outputs"][0]["name"] == "data_out"
    # No client certificate: the TLS handshake is refused, as for gRPC.
    no_cert = client(server, context=rest_runner.ssl_context(pki.ca_cert, None, None),
                     token="s3cret")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        no_cert.request("GET", "/v2/health/live")


def test_body_over_the_message_limit_is_refused(secured_front: tuple[BridgeProcess, Any, Any]
                                                ) -> None:
    server, pki, _ = secured_front
    context = rest_runner.ssl_context(pki.ca_cert, pki.client_cert, pki.client_key)
    member = client(server, context=context, token="s3cret")
    n = (1 << 20) // 4 + 1
    body, headers = rest_runner.encode_infer(
        [("data_in", "FP32", [n], np.zeros(n, np.float32).tobytes())], binary_inputs=True)
    status, answer = rest_json(member, "POST", "/v2/models/cf_fp32/infer", body, headers)
    assert (status, answer) == (413, {"error": f"request body of {len(body)} bytes exceeds "
                                               f"--max-message-bytes {1 << 20}"})


def test_conformance_over_mtls_and_token(secured_front: tuple[BridgeProcess, Any, Any]) -> None:
    server, pki, _ = secured_front
    proc = subprocess.run(
        [sys.executable, str(CONFORMANCE / "rest_runner.py"), "--url",
         f"127.0.0.1:{http_port(server)}", "--run", "infer_fp32", "--ca", str(pki.ca_cert),
         "--cert", str(pki.client_cert), "--key", str(pki.client_key), "--token", "s3cret"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = re.search(r"conformance python-rest: (\d+) passed, 0 failed", proc.stdout)
    assert passed and int(passed.group(1)) >= 4, proc.stdout


def test_sigterm_drains_a_rest_call_in_flight(front_binary: Path, rest_repo: Path,
                                              tmp_path: Path) -> None:
    """SIGTERM: the REST listener closes (new connections refused), the call in flight
    finishes with its answer, and the front exits 0 (drained within the grace period)."""
    repo = tmp_path / "repo"
    model = dt_model("FP32")
    shutil.copytree(rest_repo / model, repo / model)
    gate = Gate(tmp_path / "gate")
    x = sample("FP32")
    front = BridgeProcess(repo, "--grace-period-s", "120", env=gate.env,
                          workdir=tmp_path / "front",
                          command=front_command(front_binary, "--workers", "1"))
    with front, ThreadPoolExecutor(1) as pool:
        want = grpc_infer(front, model, {"x": x})["y"]
        port = http_port(front)
        with gate.holding(model):
            call = pool.submit(rest_infer, front, model, {"x": x}, binary_inputs=False,
                               binary_outputs=False)
            gate.wait_held(model, 1, calls=[call])
            front.send_signal(signal.SIGTERM)
            wait_until(lambda: refused(port), "the REST port to refuse new connections")
            assert not call.done(), f"{call.result()} {front.log_text()[-3000:]}"  # still held
        status, doc, got = call.result(timeout=120)
        assert status == 200, f"{doc} {front.log_text()[-3000:]}"
        assert_same(got["y"], want)
        # Drained: the REST call finished within the grace period.
        assert front.wait(120) == 0, front.log_text()[-3000:]


def refused(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    except OSError:  # e.g. a connect timeout on a loaded machine: ask again
        return False
    return False


