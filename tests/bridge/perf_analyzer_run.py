"""`perf_analyzer` (Triton's load generator, from the `tritonclient==2.50.0` wheel) against a real
bridge (issue 14). Not part of `make test`: run with `make test-perf-analyzer`, which installs
it into build/perf (plus `nvidia-cuda-runtime-cu12` for the libcudart.so.12 it links against
even on CPU; the apt package `libb64-0d` must be installed).

Each run must exit 0 without a warning, and afterwards the bridge's metrics must show no
INTERNAL, UNKNOWN or UNIMPLEMENTED: a BOOL-input model with perf_analyzer's default random data
(any byte), a model exported with batch sizes 1,4 at `-b 2` and `-b 3` without `--batching`,
`--streaming`, and `--shared-memory system` (whose clean-up's CudaSharedMemoryUnregister is
answered OK, as by a Triton without GPUs); over REST (`-i http`) with `--shared-memory system`,
and over gRPC with `--grpc-compression-algorithm gzip` and `deflate` (issue 27).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.bridge import BridgeProcess

PERF_VENV = Path(__file__).resolve().parents[2] / "build" / "perf"
PERF = PERF_VENV / "bin" / "perf_analyzer"


def _flags(params, flag, x):
    return jnp.where(flag, x + params["offset"], -x)


def _rows(params, x):
    return jnp.tanh(x @ params["w"])


@pytest.fixture(scope="module")
def perf_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("perf-repo")
    export(_flags, {"offset": np.int32(3)},
           {"flag": jax.ShapeDtypeStruct((16,), np.bool_),
            "x": jax.ShapeDtypeStruct((16,), np.int32)},
           repo / "flags" / "1", output_names=["y"], goldens=1, quiet=True)
    w = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    export(_rows, {"w": w}, {"x": jax.ShapeDtypeStruct((1, 8), np.float32)},
           repo / "rows" / "1", output_names=["y"], batch_sizes=(1, 4), goldens=1, quiet=True)
    return repo


def _env() -> dict[str, str]:
    site = next((PERF_VENV / "lib").glob("python3*/site-packages"))
    cudart = site / "nvidia" / "cuda_runtime" / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{cudart}:{env.get('LD_LIBRARY_PATH', '')}"
    return env


def _perf(bridge: BridgeProcess, model: str, *args: str) -> str:
    """One perf_analyzer run over gRPC, or over REST when args say `-i http`."""
    url = bridge.address
    if "http" in args:
        url = f"127.0.0.1:{json.loads(bridge.port_file.read_text())['http_port']}"
    else:
        args = ("-i", "grpc", *args)
    cmd = [str(PERF), "-m", model, "-u", url,
           "--concurrency-range", "2", "--measurement-mode", "count_windows",
           "--measurement-request-count", "50", "--stability-percentage", "1000",
           "--max-trials", "3", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env())
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{output}"
    assert "warning" not in output.lower() and "error" not in output.lower(), output
    return output


def _no_internal(bridge: BridgeProcess) -> dict:
    """The bridge's metrics (summed over its workers); no call ended INTERNAL, UNKNOWN or
    UNIMPLEMENTED."""
    metrics = bridge.metrics()
    codes = {dict(labels).get("code") for (name, labels), value in metrics.items()
             if name == "jaxport_grpc_requests_total" and value > 0}
    assert not codes & {"INTERNAL", "UNKNOWN", "UNIMPLEMENTED"}, codes
    return metrics


@pytest.mark.parametrize("args", [
    ("flags", ()),
    ("rows", ("-b", "2")),
    ("rows", ("-b", "3")),
    ("rows", ("-b", "3", "--streaming")),
    ("flags", ("--streaming",)),
    ("rows", ("-b", "2", "--shared-memory", "system")),
    ("rows", ("-b", "2", "-i", "http", "--shared-memory", "system")),
    ("flags", ("-i", "http")),
    ("rows", ("-b", "2", "--grpc-compression-algorithm", "gzip")),
    ("flags", ("--streaming", "--grpc-compression-algorithm", "deflate")),
], ids=["bool-random", "b2", "b3", "b3-streaming", "bool-streaming", "b2-system-shm",
        "http-b2-system-shm", "http-bool-random", "b2-grpc-gzip", "bool-streaming-grpc-deflate"])
def test_perf_analyzer_runs_cleanly(perf_repo: Path, args) -> None:
    assert PERF.exists(), f"{PERF} missing: run `make test-perf-analyzer`"
    model, extra = args
    with BridgeProcess(perf_repo, "--system-shared-memory") as bridge:
        _perf(bridge, model, *extra)
        metrics = _no_internal(bridge)
        assert bridge.alive()
    if "--shared-memory" in extra and "http" not in extra:
        # its clean-up also unregisters CUDA regions: answered OK
        method = "/inference.GRPCInferenceService/CudaSharedMemoryUnregister"
        key = ("jaxport_grpc_requests_total", (("code", "OK"), ("method", method)))
        assert metrics.get(key, 0) >= 1, sorted(k for k in metrics if k[0].endswith("_total"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
