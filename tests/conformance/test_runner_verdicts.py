"""The Python runner's verdicts against a deliberately wrong server: a call that succeeds where the
case expects an error status is a FAIL with a clear line (never a crash or a PASS), and a case
needing a feature the server does not claim is N/A, not a failure."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import grpc
import pytest
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

HERE = Path(__file__).resolve().parent
CASES = HERE / "cases"


class Yes(pb_grpc.GRPCInferenceServiceServicer):
    """Answers every call successfully: every model is ready, every infer returns one output."""

    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="yes", version="0")

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=True)

    def ModelMetadata(self, request, context):
        return pb.ModelMetadataResponse(name=request.name, versions=["1"])

    def ModelInfer(self, request, context):
        out = pb.ModelInferResponse(model_name=request.model_name, model_version="1",
                                    id=request.id)
        out.outputs.add(name="data_out", datatype="FP32", shape=[1])
        out.raw_output_contents.append(b"\0\0\0\0")
        return out

    def CudaSharedMemoryRegister(self, request, context):
        return pb.CudaSharedMemoryRegisterResponse()

    def CudaSharedMemoryStatus(self, request, context):
        response = pb.CudaSharedMemoryStatusResponse()
        response.regions["ghost"].name = "ghost"
        return response


@pytest.fixture(scope="module")
def yes_server():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Yes(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def wrong_cases(tmp: Path, names: tuple[str, ...] = (
        "error_model_ready_unknown", "error_unknown_version", "metadata_unknown_model",
        "error_raw_and_typed", "health_server_live", "cuda_shm_register_refused",
        "cuda_shm_status_empty")) -> Path:
    """Cases whose expected answer the fake server never gives (committed cases, copied)."""
    out = tmp / "cases"
    (out / "data").mkdir(parents=True)
    shutil.copy(HERE / "features.json", tmp / "features.json")  # the table beside the cases
    for name in names:
        case = json.loads((CASES / f"{name}.json").read_text())
        for t in [*case.get("request", {}).get("inputs", []), *case["expect"].get("outputs", [])]:
            if "data" in t:
                shutil.copy(CASES / t["data"], out / t["data"])
        (out / f"{name}.json").write_text(json.dumps(case))
    return out


def run_runner(url: str, cases: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HERE / "runner.py"), "--url", url,
                           "--cases", str(cases), *extra],
                          capture_output=True, text=True, timeout=120)


def test_unexpected_success_is_a_failure(yes_server: str, tmp_path: Path) -> None:
    done = run_runner(yes_server, wrong_cases(tmp_path))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "Traceback" not in done.stderr and "KeyError" not in out
    # the protocol allows NOT_FOUND or ready=false (case alternatives): ready=true is neither
    assert ("FAIL error_model_ready_unknown: call succeeded (ready=True), expected status "
            "NOT_FOUND | or: model ready is True, expected False") in out
    assert ("FAIL error_unknown_version: call succeeded (model 'cf_fp32' version '1', outputs "
            "['data_out']), expected status NOT_FOUND") in out
    assert ("FAIL metadata_unknown_model: call succeeded (name='conformance_no_such_model' "
            "versions=['1']), expected status NOT_FOUND") in out
    assert "FAIL error_raw_and_typed: call succeeded (" in out
    assert "PASS health_server_live" in out
    assert ("FAIL cuda_shm_register_refused: call succeeded (CudaSharedMemoryRegister answered "
            in out)
    assert "FAIL cuda_shm_status_empty: regions ['ghost'], expected []" in out
    assert "conformance python: 1 passed, 6 failed" in out


def test_unexpected_success_is_a_failure_async(yes_server: str, tmp_path: Path) -> None:
    done = run_runner(yes_server, wrong_cases(tmp_path), "--async")
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("FAIL error_model_ready_unknown: call succeeded (ready=True), expected status "
            "NOT_FOUND") in done.stdout
    assert "FAIL cuda_shm_status_empty: regions ['ghost'], expected []" in done.stdout
    assert "conformance python-async: 1 passed, 6 failed" in done.stdout


def test_features_not_claimed_are_not_applicable(yes_server: str, tmp_path: Path) -> None:
    done = run_runner(yes_server, wrong_cases(tmp_path), "--features", "core")
    out = done.stdout
    assert "N/A error_unknown_version (needs jaxport-models, versions)" in out, out
    assert "N/A error_raw_and_typed (needs jaxport-models)" in out
    # core cases still run, and still fail when the server answers wrongly
    assert "FAIL error_model_ready_unknown: call succeeded" in out
    assert "N/A cuda_shm_status_empty (needs cuda-shm-cpu)" in out
    assert "conformance python: 1 passed, 2 failed, 4 not applicable" in out
    assert done.returncode == 1
    bad = run_runner(yes_server, tmp_path / "cases", "--features", "versions,nonsense")
    assert bad.returncode == 2 and "unknown feature(s) ['nonsense']" in bad.stderr


def test_the_feature_table_is_read_from_beside_the_cases(yes_server: str, tmp_path: Path
                                                         ) -> None:
    """One feature table for every runner: a feature it lists is known, one it lacks is not."""
    cases = wrong_cases(tmp_path)
    table = json.loads((tmp_path / "features.json").read_text())
    table["features"]["only-in-this-table"] = "a feature this copy of the table adds"
    (tmp_path / "features.json").write_text(json.dumps(table))
    done = run_runner(yes_server, cases, "--features", "only-in-this-table")
    assert "features claimed: only-in-this-table" in done.stdout, done.stdout + done.stderr
    (tmp_path / "features.json").unlink()
    gone = run_runner(yes_server, cases)
    assert gone.returncode == 2 and "features.json" in gone.stderr


def test_compression_cases_really_compress(tmp_path: Path) -> None:
    """The gRPC compression cases send grpc-encoding gzip / deflate: a server that accepts
    only uncompressed messages refuses both (so the cases cannot pass on a server ignoring
    compression by accident), and the REST-only cases are N/A for the gRPC runner."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         options=[("grpc.compression_enabled_algorithms_bitset", 1)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Yes(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        cases = wrong_cases(tmp_path, ("infer_grpc_compression_gzip",
                                       "infer_grpc_compression_deflate", "rest_infer_gzip_json"))
        done = run_runner(f"127.0.0.1:{port}", cases)
    finally:
        server.stop(grace=None)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    for algorithm in ("gzip", "deflate"):
        assert (f"FAIL infer_grpc_compression_{algorithm}: status UNIMPLEMENTED" in out
                and f"'{algorithm}'" in out), out
    assert "N/A rest_infer_gzip_json (REST only (this runner speaks gRPC))" in out
    assert "conformance python: 0 passed, 2 failed, 1 not applicable" in out


class WrongRest(BaseHTTPRequestHandler):
    """A REST server that accepts everything and answers every infer uncompressed, with its
    outputs in the body (never in shared memory); it records each POST (path, headers, body)."""

    seen: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        answer = b""
        if self.path.endswith("/infer"):
            answer = json.dumps({"model_name": "cf_multi", "outputs": [
                {"name": "total", "datatype": "FP32", "shape": [1], "data": [0.0]}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:
        answer = b"[]" if "systemsharedmemory" in self.path else b'{"name": "wrong"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_rest_compression_and_shm_verdicts(tmp_path: Path) -> None:
    """The REST runner compresses the body as the case says, fails an answer without the
    expected Content-Encoding, fails outputs answered in the body when they belong in shared
    memory, unregisters the region and removes its /dev/shm object after that failure, and
    marks gRPC compression N/A."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongRest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    before = set(Path("/dev/shm").glob("jaxport_conformance_*"))
    try:
        cases = wrong_cases(tmp_path, ("rest_infer_gzip_json", "rest_system_shm_infer",
                                       "infer_grpc_compression_gzip"))
        done = subprocess.run([sys.executable, str(HERE / "rest_runner.py"), "--url",
                               f"127.0.0.1:{server.server_address[1]}", "--cases", str(cases)],
                              capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert ("FAIL rest_infer_gzip_json: answer Content-Encoding '(none)' to Accept-Encoding "
            "'gzip', expected 'gzip'") in out, out
    assert "FAIL rest_system_shm_infer: outputs ['total'] came back in the answer" in out
    assert "N/A infer_grpc_compression_gzip (gRPC only (this runner speaks REST))" in out
    infer = [s for s in WrongRest.seen if s[0] == "/v2/models/cf_multi/infer"]
    compressed = [s for s in infer if s[1].get("content-encoding") == "gzip"]
    assert len(compressed) == 1 and compressed[0][1]["accept-encoding"] == "gzip"
    assert json.loads(gzip.decompress(compressed[0][2]))["inputs"][0]["name"] == "alpha"
    paths = [s[0] for s in WrongRest.seen]
    register = [p for p in paths if p.endswith("/register")]
    assert len(register) == 1
    assert paths.count(register[0].replace("/register", "/unregister")) == 1
    assert set(Path("/dev/shm").glob("jaxport_conformance_*")) == before


class HealthRest(BaseHTTPRequestHandler):
    """Health answers by path: /v2/health/live 200 with an empty body (Triton's),
    /v2/health/ready 200 saying {"ready": false} (a contradiction), /v2/models/M/ready 400 with
    an empty body (Triton's "not ready" for an unknown model), /v2/models/cf_fp32/ready 503."""

    def do_GET(self) -> None:
        status, answer = {"/v2/health/live": (200, b""),
                          "/v2/health/ready": (200, b'{"ready": false}'),
                          "/v2/models/cf_fp32/ready": (503, b'{"error": "busy"}'),
                          }.get(self.path, (400, b""))
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def test_rest_health_is_the_status_code(tmp_path: Path) -> None:
    """Over REST a health answer is its status (KServe v2: 200 true, 4xx false) whatever the
    body: an empty 200 is live, a 400 for an unknown model is ready=false (an alternative the
    case allows); a JSON body contradicting the status, or a 503, fails."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), HealthRest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cases = wrong_cases(tmp_path, ("health_server_live", "health_server_ready",
                                       "error_model_ready_unknown", "health_model_ready"))
        done = subprocess.run([sys.executable, str(HERE / "rest_runner.py"), "--url",
                               f"127.0.0.1:{server.server_address[1]}", "--cases", str(cases)],
                              capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    out = done.stdout
    assert "PASS health_server_live" in out and "PASS error_model_ready_unknown" in out, out
    assert ("FAIL health_server_ready: /v2/health/ready: HTTP 200 with body {'ready': False}: "
            "the status says ready=True") in out
    assert "FAIL health_model_ready: HTTP 503 ('busy'), expected 200" in out
    assert "conformance python-rest: 2 passed, 2 failed" in out


class NotReady(Yes):
    """Triton's answer to ModelReady of a model it does not serve: OK, ready=false."""

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=False)


def test_model_ready_unknown_allows_ready_false(tmp_path: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(NotReady(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        done = run_runner(f"127.0.0.1:{port}", wrong_cases(tmp_path, ("error_model_ready_unknown",
                                                                      "health_model_ready")))
    finally:
        server.stop(grace=None)
    assert "PASS error_model_ready_unknown" in done.stdout, done.stdout + done.stderr
    assert "FAIL health_model_ready: model ready is False, expected True" in done.stdout


def test_rest_raw_cases_need_the_binary_data_extension(tmp_path: Path) -> None:
    """KServe v2's REST protocol is JSON only: a case whose REST form sends binary tensors
    (raw contents, FP16/BF16) needs Triton's binary data extension (binary-data), claimed by
    the server's binary_tensor_data extension or --features; JSON cases still run."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), WrongRest)  # /v2 lists no extensions
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cases = wrong_cases(tmp_path, ("infer_fp32_raw", "infer_fp32_typed", "infer_fp16_raw"))
        done = subprocess.run([sys.executable, str(HERE / "rest_runner.py"), "--url",
                               f"127.0.0.1:{server.server_address[1]}", "--cases", str(cases),
                               "--features", "jaxport-models"],
                              capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    out = done.stdout
    assert "N/A infer_fp32_raw (needs binary-data)" in out, out + done.stderr
    assert "N/A infer_fp16_raw (needs binary-data)" in out
    assert "FAIL infer_fp32_typed: " in out  # judged (the fake answers the wrong model's output)
