"""The Python runner's verdicts against a deliberately wrong server: a call that succeeds where the
case expects an error status is a FAIL with a clear line (never a crash or a PASS), and a case
needing a feature the server does not claim is N/A, not a failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent import futures
from pathlib import Path

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


def wrong_cases(tmp: Path) -> Path:
    """Cases whose expected error the fake server never gives (committed cases, copied)."""
    out = tmp / "cases"
    (out / "data").mkdir(parents=True)
    shutil.copy(HERE / "features.json", tmp / "features.json")  # the table beside the cases
    for name in ("error_model_ready_unknown", "error_unknown_version", "metadata_unknown_model",
                 "error_raw_and_typed", "health_server_live", "cuda_shm_register_refused",
                 "cuda_shm_status_empty"):
        case = json.loads((CASES / f"{name}.json").read_text())
        for t in case.get("request", {}).get("inputs", []):
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
    assert ("FAIL error_model_ready_unknown: call succeeded (ready=True), expected status "
            "NOT_FOUND") in out
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
