"""tritonclient's system shared memory against a real bridge (Triton's own client, unchanged).

MUST run in its own process: tritonclient's generated `inference.*` protobuf messages clash
with ours in one process. Takes the inputs from WORK/inputs.npz, does every call with
tritonclient, and writes WORK/result.json (extensions, statuses, each error case's status code
and message) and WORK/outputs.npz (outputs read back from shared memory, and the same request
answered over the wire for comparison); the pytest side asserts on them and compares with JAX.

    python triton_shm.py --url 127.0.0.1:PORT --work DIR [--disabled]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def import_triton_shared_memory() -> types.ModuleType:
    """`tritonclient.utils.shared_memory`, which (2.41) imports `pkg_resources` only to find its
    bundled libcshm.so; setuptools >= 81 no longer ships `pkg_resources`. When it is missing,
    that one function is provided (the library loaded is still tritonclient's own)."""
    try:
        import pkg_resources  # noqa: F401
    except ModuleNotFoundError:
        root = Path(importlib.util.find_spec("tritonclient").origin).parent.parent
        shim = types.ModuleType("pkg_resources")
        shim.resource_filename = (  # type: ignore[attr-defined]
            lambda package, name: str(root / package.replace(".", "/") / name))
        sys.modules["pkg_resources"] = shim
    import tritonclient.utils.shared_memory as module
    return module


shm = import_triton_shared_memory()

REGION_BYTES = 4096
OUT_OFFSET = 64  # region "out" starts 64 bytes into its object


def outcome(call: Callable[[], Any]) -> list[str]:
    """[status code name, message] of a call expected to fail, or ["OK", ""]."""
    try:
        call()
    except InferenceServerException as exc:
        return [str(exc.status()).removeprefix("StatusCode."), exc.message() or ""]
    return ["OK", ""]


def status_dict(client: grpcclient.InferenceServerClient, name: str = "") -> dict[str, list]:
    response = client.get_system_shared_memory_status(region_name=name)
    return {k: [v.key, v.offset, v.byte_size] for k, v in response.regions.items()}


def shm_input(name: str, shape: list[int], datatype: str, region: str, byte_size: int,
              offset: int = 0) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, shape, datatype)
    tensor.set_shared_memory(region, byte_size, offset)
    return tensor


def raw_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def shm_output(name: str, region: str, byte_size: int, offset: int = 0
               ) -> grpcclient.InferRequestedOutput:
    out = grpcclient.InferRequestedOutput(name)
    out.set_shared_memory(region, byte_size, offset)
    return out


def run_enabled(client: grpcclient.InferenceServerClient, inputs: dict[str, np.ndarray],
                tag: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    result: dict[str, Any] = {"errors": {}}
    errors = result["errors"]
    outputs: dict[str, np.ndarray] = {}
    key_in, key_out = f"/jaxport_test_{tag}_in", f"/jaxport_test_{tag}_out"
    h_in = shm.create_shared_memory_region("in", key_in, REGION_BYTES)
    h_out = shm.create_shared_memory_region("out", key_out, REGION_BYTES)
    try:
        client.unregister_system_shared_memory()  # a clean slate: unregister all is idempotent
        client.register_system_shared_memory("in", key_in, REGION_BYTES)
        client.register_system_shared_memory("out", key_out, 1024, offset=OUT_OFFSET)
        result["status_all"] = status_dict(client)
        result["status_in"] = status_dict(client, "in")

        # mlp: x (2x8 FP32) from shared memory, its output into shared memory.
        x = inputs["mlp_x"]
        shm.set_shared_memory_region(h_in, [x])
        res = client.infer("mlp", [shm_input("x", [2, 8], "FP32", "in", x.nbytes)],
                           outputs=[shm_output("output", "out", 32)])
        out = res.get_output("output")
        result["mlp_response_output"] = {
            "datatype": out.datatype, "shape": list(out.shape),
            "parameters": sorted(out.parameters), "raw_entries": [
                len(b) for b in res.get_response().raw_output_contents],
        }
        outputs["mlp_shm"] = shm.get_contents_as_numpy(h_out, np.float32, [2, 4],
                                                       offset=OUT_OFFSET).copy()
        wire = client.infer("mlp", [raw_input("x", x, "FP32")])
        outputs["mlp_wire"] = wire.as_numpy("output")

        # The same through ModelStreamInfer, output at another offset of region "out".
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer("mlp", [shm_input("x", [2, 8], "FP32", "in", x.nbytes)],
                                      outputs=[shm_output("output", "out", 32, offset=512)])
            res, err = answers.get(timeout=60)
        finally:
            client.stop_stream()
        result["stream_error"] = None if err is None else str(err)
        outputs["mlp_stream_shm"] = shm.get_contents_as_numpy(
            h_out, np.float32, [2, 4], offset=OUT_OFFSET + 512).copy()

        # mixed: a (BF16) and flag (BOOL) from shared memory at offsets, idx raw in the
        # message; h and m into shared memory at offsets, s over the wire.
        a16, idx, flag = inputs["mixed_a_u16"], inputs["mixed_idx"], inputs["mixed_flag"]
        shm.set_shared_memory_region(h_in, [a16], offset=256)
        shm.set_shared_memory_region(h_in, [flag], offset=512)
        res = client.infer(
            "mixed",
            [shm_input("a", [3, 4], "BF16", "in", a16.nbytes, offset=256),
             raw_input("idx", idx, "INT64"),
             shm_input("flag", [3], "BOOL", "in", flag.nbytes, offset=512)],
            outputs=[shm_output("h", "out", 24, offset=128),
                     grpcclient.InferRequestedOutput("s"),
                     shm_output("m", "out", 3, offset=256)],
        )
        outputs["mixed_h_u16"] = shm.get_contents_as_numpy(
            h_out, np.uint16, [3, 4], offset=OUT_OFFSET + 128).copy()
        outputs["mixed_s"] = res.as_numpy("s")
        outputs["mixed_m"] = shm.get_contents_as_numpy(
            h_out, np.bool_, [3], offset=OUT_OFFSET + 256).copy()
        wire = client.infer("mixed", [_bf16_input(a16),
                                      raw_input("idx", idx, "INT64"),
                                      raw_input("flag", flag, "BOOL")])
        outputs["mixed_h_wire"] = wire.as_numpy("h").astype(np.float32)
        outputs["mixed_s_wire"] = wire.as_numpy("s")
        outputs["mixed_m_wire"] = wire.as_numpy("m")

        # Error paths, each one status naming what is wrong.
        x_in = shm_input("x", [2, 8], "FP32", "in", x.nbytes)
        errors["register_duplicate"] = outcome(
            lambda: client.register_system_shared_memory("in", key_in, 64))
        errors["register_missing_key"] = outcome(
            lambda: client.register_system_shared_memory("r1", "/jaxport_no_such_key", 64))
        errors["register_escaping_key"] = outcome(
            lambda: client.register_system_shared_memory("r2", "/../etc/passwd", 64))
        errors["register_beyond_object"] = outcome(
            lambda: client.register_system_shared_memory("r3", key_in, 200, offset=4000))
        errors["status_unknown"] = outcome(
            lambda: client.get_system_shared_memory_status(region_name="nope"))
        errors["infer_unknown_region"] = outcome(lambda: client.infer(
            "mlp", [shm_input("x", [2, 8], "FP32", "nope", 64)]))
        errors["infer_wrong_byte_size"] = outcome(lambda: client.infer(
            "mlp", [shm_input("x", [2, 8], "FP32", "in", 60)]))
        errors["infer_beyond_region"] = outcome(lambda: client.infer(
            "mlp", [shm_input("x", [2, 8], "FP32", "in", 64, offset=4090)]))
        errors["infer_output_too_small"] = outcome(lambda: client.infer(
            "mlp", [x_in], outputs=[shm_output("output", "out", 16)]))
        errors["infer_output_unknown_region"] = outcome(lambda: client.infer(
            "mlp", [x_in], outputs=[shm_output("output", "nope", 32)]))
        errors["unregister_unknown"] = outcome(
            lambda: client.unregister_system_shared_memory("nope"))
        client.unregister_system_shared_memory("in")
        errors["infer_after_unregister"] = outcome(lambda: client.infer("mlp", [x_in]))
        result["status_after_unregister_in"] = status_dict(client)
        client.unregister_system_shared_memory()
        result["status_after_unregister_all"] = status_dict(client)
        result["alive"] = client.is_server_live()
    finally:
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)
    return result, outputs


def _bf16_input(a16: np.ndarray) -> grpcclient.InferInput:
    # tritonclient takes BF16 as float32 and keeps the high 2 bytes: exact for bf16 values.
    as_f32 = (a16.astype(np.uint32) << 16).view(np.float32)
    return raw_input("a", as_f32, "BF16")


def run_disabled(client: grpcclient.InferenceServerClient, inputs: dict[str, np.ndarray],
                 tag: str) -> dict[str, Any]:
    key = f"/jaxport_test_{tag}_off"
    handle = shm.create_shared_memory_region("off", key, REGION_BYTES)
    try:
        x = inputs["mlp_x"]
        shm.set_shared_memory_region(handle, [x])
        return {"errors": {
            "register": outcome(lambda: client.register_system_shared_memory("in", key, 64)),
            "status": outcome(lambda: client.get_system_shared_memory_status()),
            "unregister": outcome(lambda: client.unregister_system_shared_memory()),
            "infer": outcome(lambda: client.infer(
                "mlp", [shm_input("x", [2, 8], "FP32", "in", x.nbytes)])),
        }, "alive": client.is_server_live()}
    finally:
        shm.destroy_shared_memory_region(handle)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--disabled", action="store_true")
    args = parser.parse_args()
    inputs = dict(np.load(args.work / "inputs.npz"))
    tag = f"{os.getpid()}"
    client = grpcclient.InferenceServerClient(args.url)
    extensions = list(client.get_server_metadata().extensions)
    if args.disabled:
        result, outputs = run_disabled(client, inputs, tag), {}
    else:
        result, outputs = run_enabled(client, inputs, tag)
    result["extensions"] = extensions
    (args.work / "result.json").write_text(json.dumps(result, indent=1))
    np.savez(args.work / "outputs.npz", **outputs)
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
