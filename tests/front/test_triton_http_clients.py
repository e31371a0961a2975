"""Triton's own Python clients, HTTP and gRPC, against the native front (issue 27): gRPC
`compression_algorithm` gzip/deflate, HTTP `request_compression_algorithm` and
`response_compression_algorithm` gzip/deflate over JSON and binary tensors, and system shared
memory over REST with tritonclient.http's calls (register, status, infer with inputs and
outputs in regions, the error cases, unregister one and all, CUDA clean-up answered OK).

tritonclient.http needs gevent, which jaxport's venv does not carry: the client runs in its
own venv (`build/tritonclient-http`, made once with TRITONCLIENT from the package index; a
different pin makes it anew) as its own process (triton_http_clients.py: its protobuf symbols
clash with ours in one process). Slow: the first run installs packages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bridge_models as m
import jax
import numpy as np
import pytest
from front_helpers import front_command
from support.bridge import BridgeProcess

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("triton_http_clients.py")
TRITONCLIENT = "tritonclient[http,grpc]==2.73.0"  # the release issue 27 was found with
VENV = REPO / "build" / "tritonclient-http"
F32_TOL = 1e-5  # f32 matmul + tanh: XLA may fuse differently from eager jax

pytestmark = pytest.mark.slow  # installs tritonclient[http] into its venv on first use


@pytest.fixture(scope="module")
def client_python() -> Path:
    stamp = VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != TRITONCLIENT:
        done = subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        done = subprocess.run([VENV / "bin/python", "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", TRITONCLIENT],
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stdout + done.stderr
        stamp.write_text(TRITONCLIENT)
    return VENV / "bin" / "python"


@pytest.fixture(scope="module")
def run(client_python: Path, front_binary: Path, repository: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Any]]:
    work = tmp_path_factory.mktemp("triton-http")
    x = np.random.default_rng(27).standard_normal((2, 8)).astype(np.float32)
    np.savez(work / "inputs.npz", x=x)
    with BridgeProcess(repository, "--system-shared-memory", workdir=work / "front",
                       command=front_command(front_binary, "--workers", "2")) as front:
        http_port = json.loads(front.port_file.read_text())["http_port"]
        proc = subprocess.run(
            [client_python, SCRIPT, "--grpc", front.address, "--http",
             f"127.0.0.1:{http_port}", "--work", work],
            capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stdout + proc.stderr
        assert front.alive()
    yield json.loads((work / "result.json").read_text()), dict(np.load(work / "outputs.npz"))


def expected() -> np.ndarray:
    x = np.random.default_rng(27).standard_normal((2, 8)).astype(np.float32)
    return np.asarray(jax.jit(m.mlp)(m.mlp_params(), x))


def test_grpc_and_http_compression_answers_are_the_uncompressed_ones(run) -> None:
    _, outputs = run
    plain = outputs["grpc_None"]
    np.testing.assert_allclose(plain, expected(), rtol=F32_TOL, atol=F32_TOL)
    names = [k for k in outputs if k.startswith(("grpc_", "http_"))]
    assert len(names) == 3 + 3 * 3 * 2, names  # every algorithm, both ways, JSON and binary
    for name in names:
        if name.endswith("_False"):  # JSON numbers: the same float32 after a decimal round trip
            np.testing.assert_array_equal(outputs[name].astype(np.float32), plain, name)
        else:
            got = outputs[name]
            assert got.dtype == np.float32 and got.tobytes() == plain.tobytes(), name


def test_rest_system_shared_memory_with_tritonclient_http(run) -> None:
    result, outputs = run
    key_in = result["status_all"][0]["key"]
    assert key_in.startswith("/jaxport_test_") and key_in.endswith("_in")
    assert [(r["name"], r["offset"], r["byte_size"]) for r in result["status_all"]] == [
        ("in", 0, 4096), ("out", 64, 1024)]
    assert result["status_in"] == result["status_all"][:1]
    for call in range(2):  # within float tolerance: the engine answering may differ by an ulp
        np.testing.assert_allclose(outputs[f"shm_{call}"], expected(), rtol=F32_TOL, atol=F32_TOL)
        # Triton's answer for an output in shared memory: no data, no parameters.
        assert result[f"response_output_{call}"] == {"name": "output", "datatype": "FP32",
                                                     "shape": [2, 4]}
    # The workers' gRPC refusals, with the HTTP status of their code (rest_status.go).
    errors = result["errors"]
    for case, status, words in (
        ("register_duplicate", "409", ["'in' is already registered"]),
        ("register_missing_key", "400", ["'r1'", "'/jaxport_no_such_key' does not exist"]),
        ("register_beyond_object", "400", ["'r3'", "offset 4000 + byte_size 200"]),
        ("status_unknown", "404", ["'nope' is not registered"]),
        ("infer_unknown_region", "404", ["input 'x'", "'nope' is not registered"]),
        ("infer_output_too_small", "400", ["output 'output'", "needs 32 bytes", "is 16"]),
        ("infer_after_unregister", "404", ["input 'x'", "'in' is not registered"]),
    ):
        assert errors[case][0] == status, (case, errors[case])
        assert all(w in errors[case][1] for w in words), (case, errors[case])
    assert [r["name"] for r in result["status_after_unregister_in"]] == ["out"]
    assert result["status_after_unregister_all"] == []
    assert result["cuda_status"] == []
