"""The model kit's Triton repository (kit/make_triton_repo.py) in a real Triton Inference Server
2.51 on CPU (the nvidia-pytriton wheel, peers/triton_server.py; installed into build/peers/triton
when missing), judged case by case over gRPC and REST with the profile `make conformance-peers`
gives it: every model of the repository loads (Triton's default --exit-on-error refuses to start
otherwise), every applicable case passes, and the only N/A cases are the ones Triton does not
claim (scalar-tensors: Triton has no rank-0 tensors in a non-batching model) or that have no
meaning on the transport. Slow (make test-all): a ~220 MB install once, a server of 14 python
backend stubs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.modules import load

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
pytestmark = pytest.mark.slow


triton_server = load("jaxport_conformance_triton_server", HERE / "peers" / "triton_server.py")
run_peers = load("jaxport_conformance_run_peers", HERE / "peers" / "run_peers.py")
make_triton_repo = load("jaxport_conformance_make_triton_repo",
                         HERE / "kit" / "make_triton_repo.py")


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = triton_server.install(REPO / "build" / "peers" / "triton")
    work = tmp_path_factory.mktemp("triton")
    models = work / "models"
    names = make_triton_repo.write_repository(models, site_packages=str(server.site_packages))
    port, http_port = run_peers.free_port(), run_peers.free_port()
    log = work / "triton.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(server.command(models, port, http_port), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        run_peers.wait_ready(f"127.0.0.1:{port}", proc, log)
        yield {"grpc": f"127.0.0.1:{port}", "rest": f"127.0.0.1:{http_port}", "names": names,
               "log": log}
    finally:
        run_peers.stop(proc)


def run_suite(url: str, transport: str, tmp_path: Path) -> dict[str, Any]:
    """The in-tree Python runner (the wheel's code) against Triton; its --json document."""
    out = tmp_path / f"{transport}.json"
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    done = subprocess.run([sys.executable, "-m", "jaxport_conformance.cli", "--url", url,
                           "--transport", transport, "--features", run_peers.PROFILES["triton"],
                           "--json", str(out)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=REPO)
    assert out.exists(), done.stdout + done.stderr
    doc = json.loads(out.read_text())
    doc["stdout"] = done.stdout
    return doc


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_triton_passes_every_applicable_case(triton: dict[str, Any], transport: str,
                                             tmp_path: Path) -> None:
    assert "Traceback" not in triton["log"].read_text()  # model.py never raised
    doc = run_suite(triton[transport], transport, tmp_path)
    assert doc["failed"] == 0, doc["stdout"]
    not_applicable = {c["name"]: c["message"] for c in doc["cases"] if c["status"] == "N/A"}
    for name, why in not_applicable.items():
        assert (why == "needs scalar-tensors" or "only (this runner speaks" in why
                or "no REST" in why), (name, why)
    assert {"infer_output_shapes_raw", "infer_output_shapes_typed",
            "metadata_model_shapes"} <= set(not_applicable)
    passed = {c["name"] for c in doc["cases"] if c["status"] == "PASS"}
    # Triton's own extensions really ran, BF16 through the python backend included
    assert {"infer_bf16_raw", "check_tripped", "error_model_ready_unknown",
            "health_server_live"} <= passed
    if transport == "grpc":
        assert {"stream_final_response", "classify_labels", "cuda_shm_register_refused",
                "infer_grpc_compression_deflate"} <= passed
    else:
        assert {"rest_system_shm_infer", "rest_infer_gzip_in_deflate_out"} <= passed
    assert doc["passed"] + doc["failed"] + doc["not_applicable"] == len(doc["cases"])


def test_the_repository_serves_every_kit_model_but_the_scalar_one(triton: dict[str, Any]
                                                                  ) -> None:
    assert sorted(triton["names"]) == sorted(set(make_triton_repo.reference.MODELS)
                                             - set(make_triton_repo.LEFT_OUT))
    assert set(make_triton_repo.LEFT_OUT) == {"cf_shapes"}
