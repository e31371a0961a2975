"""Starting the native front in tests, and the row-wise batching model `rows` the routing and
worker tests share (no fixtures here: see conftest.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import serve_command

__all__ = ["FEATURES", "NEVER_US", "PLUGIN", "SIZES", "beyond_plugin", "front_command",
           "rows_model", "rows_params", "rows_request", "worker_records"]
# XLA's CPU PJRT plugin the native engine loads (`make pjrt-plugin`).
PLUGIN = Path(__file__).resolve().parents[2] / "build" / "pjrt" / "pjrt_c_api_cpu_plugin.so"
# The batching model `rows` (exported by conftest's `batched_repo`): FEATURES inputs per row,
# batch sizes SIZES.
FEATURES = 5
SIZES = (1, 4, 8)
# A queue delay no test outlives: a batch is dispatched only when its rows reach the preferred
# size (8, the largest program), never by a clock.
NEVER_US = 3_600_000_000


def rows_model(params, x):
    """Row-wise: y = tanh(x @ w + b); a row routed to the wrong request changes values."""
    return jnp.tanh(x @ params["w"] + params["b"])


def rows_params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12)
    return {"w": rng.standard_normal((FEATURES, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32)}


def rows_request(x: np.ndarray, rid: str) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="rows", id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    return req


def beyond_plugin(artifact: Path, dest: Path) -> Path:
    """A copy of `artifact` at `dest` whose manifest names a StableHLO target (1.99.0) outside
    the plugin's window: the native engine leaves it to the workers."""
    copy = shutil.copytree(artifact, dest)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["versions"]["stablehloTarget"] = "1.99.0"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def worker_records(server) -> list[dict[str, object]]:
    """The front's log records of each worker process it started (worker index, pid), in
    order: a restarted worker appears again with its new pid."""
    return [r for r in server.log_records()
            if r.get("logger") == "jaxport.front" and r.get("msg") == "execution worker started"]


def front_command(binary: Path, *args: str) -> list[str]:
    """A command line for BridgeProcess (which appends the serve flags) that runs `binary` as
    `jaxport serve` does: serve execs the front (same PID) with the flags and its own Python
    as --worker-python."""
    return [*serve_command(), "--front-binary", str(binary), *args]
