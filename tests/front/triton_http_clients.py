"""tritonclient (HTTP and gRPC, the release pinned in test_triton_http_clients.py) against a live
jaxport front: gRPC compression, HTTP request and response compression, and system shared
memory over REST (tritonclient.http's calls with tritonclient.utils.shared_memory regions).

MUST run in its own venv's process (test_triton_http_clients.py builds it): tritonclient's
generated `inference.*` protobuf messages clash with ours in one process, and its HTTP client
needs gevent. Reads WORK/inputs.npz, writes WORK/result.json (statuses, each error case's HTTP
status and message) and WORK/outputs.npz (every answer's output, and the ones read back from
shared memory); the pytest side asserts on them.

    python triton_http_clients.py --grpc HOST:PORT --http HOST:PORT --work DIR
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

ALGORITHMS = (None, "gzip", "deflate")
REGION_BYTES = 4096
OUT_OFFSET = 64


def outcome(call: Callable[[], Any]) -> list[str]:
    """[HTTP status, message] of a call expected to fail, or ["OK", ""]."""
    try:
        call()
    except InferenceServerException as exc:
        return [str(exc.status()), exc.message() or ""]
    return ["OK", ""]


def compression(grpc_url: str, http_url: str, x: np.ndarray) -> dict[str, np.ndarray]:
    outputs = {}
    g = grpcclient.InferenceServerClient(grpc_url)
    for algorithm in ALGORITHMS:
        tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        res = g.infer("mlp", [tensor], compression_algorithm=algorithm)
        outputs[f"grpc_{algorithm}"] = res.as_numpy("output")
    h = httpclient.InferenceServerClient(http_url)
    for request_algorithm in ALGORITHMS:
        for response_algorithm in ALGORITHMS:
            for binary in (True, False):
                tensor = httpclient.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x, binary_data=binary)
                res = h.infer("mlp", [tensor],
                              outputs=[httpclient.InferRequestedOutput("output",
                                                                       binary_data=binary)],
                              request_compression_algorithm=request_algorithm,
                              response_compression_algorithm=response_algorithm)
                outputs[f"http_{request_algorithm}_{response_algorithm}_{binary}"] = (
                    res.as_numpy("output"))
    return outputs


def shm_input(x: np.ndarray, region: str, offset: int = 0) -> httpclient.InferInput:
    tensor = httpclient.InferInput("x", list(x.shape), "FP32")
    tensor.set_shared_memory(region, x.nbytes, offset)
    return tensor


def shm_output(region: str, byte_size: int, offset: int = 0) -> httpclient.InferRequestedOutput:
    out = httpclient.InferRequestedOutput("output")
    out.set_shared_memory(region, byte_size, offset)
    return out


def shared_memory(http_url: str, x: np.ndarray, tag: str
                  ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    h = httpclient.InferenceServerClient(http_url)
    result: dict[str, Any] = {"errors": {}}
    errors = result["errors"]
    outputs = {}
    key_in, key_out = f"/jaxport_test_{tag}_in", f"/jaxport_test_{tag}_out"
    h_in = shm.create_shared_memory_region("in", key_in, REGION_BYTES)
    h_out = shm.create_shared_memory_region("out", key_out, REGION_BYTES)
    try:
        h.unregister_system_shared_memory()  # unregister all: idempotent
        h.register_system_shared_memory("in", key_in, REGION_BYTES)
        h.register_system_shared_memory("out", key_out, 1024, offset=OUT_OFFSET)
        result["status_all"] = h.get_system_shared_memory_status()
        result["status_in"] = h.get_system_shared_memory_status(region_name="in")
        shm.set_shared_memory_region(h_in, [x], offset=256)
        for call in range(2):  # both workers hold the regions (register reached each)
            res = h.infer("mlp", [shm_input(x, "in", offset=256)],
                          outputs=[shm_output("out", 32, offset=128)])
            result[f"response_output_{call}"] = res.get_output("output")
            outputs[f"shm_{call}"] = shm.get_contents_as_numpy(
                h_out, np.float32, [2, 4], offset=OUT_OFFSET + 128).copy()
        errors["register_duplicate"] = outcome(
            lambda: h.register_system_shared_memory("in", key_in, 64))
        errors["register_missing_key"] = outcome(
            lambda: h.register_system_shared_memory("r1", "/jaxport_no_such_key", 64))
        errors["register_beyond_object"] = outcome(
            lambda: h.register_system_shared_memory("r3", key_in, 200, offset=4000))
        errors["status_unknown"] = outcome(
            lambda: h.get_system_shared_memory_status(region_name="nope"))
        errors["infer_unknown_region"] = outcome(
            lambda: h.infer("mlp", [shm_input(x, "nope")]))
        errors["infer_output_too_small"] = outcome(lambda: h.infer(
            "mlp", [shm_input(x, "in", offset=256)], outputs=[shm_output("out", 16)]))
        h.unregister_system_shared_memory("in")
        errors["infer_after_unregister"] = outcome(
            lambda: h.infer("mlp", [shm_input(x, "in", offset=256)]))
        result["status_after_unregister_in"] = h.get_system_shared_memory_status()
        h.unregister_system_shared_memory()
        result["status_after_unregister_all"] = h.get_system_shared_memory_status()
        result["cuda_status"] = h.get_cuda_shared_memory_status()
        h.unregister_cuda_shared_memory()  # what clients' clean-up does: answered OK
    finally:
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)
    return result, outputs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--http", required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    x = np.load(args.work / "inputs.npz")["x"]
    outputs = compression(args.grpc, args.http, x)
    result, shm_outputs = shared_memory(args.http, x, str(os.getpid()))
    (args.work / "result.json").write_text(json.dumps(result, indent=1))
    np.savez(args.work / "outputs.npz", **outputs, **shm_outputs)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
