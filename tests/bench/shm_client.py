"""Large tensors through the bridge's system shared memory (Triton's extension), client side.

Runs in the load process: creates one /dev/shm object for the input and one for the output,
registers each once (SystemSharedMemoryRegister), then per request copies the input into its
region, calls ModelInfer (only metadata crosses gRPC) and copies the output out of its region.
The timed span is exactly that: client copy in + ModelInfer round trip + client copy out.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from tests.bench.load import _client_heap


def run_shm_repeats(target: str, model: str, x: np.ndarray, repeats: int, rtol: float,
                    atol: float) -> dict[str, Any]:
    """One warm-up call then `repeats` calls of the elementwise model (y = 2x + 0.5) with x and
    -x alternating; every output is checked, and the output region is filled with NaN before
    each call (untimed) so a stale or missing write cannot pass."""
    from multiprocessing import shared_memory

    import grpc
    from jaxport.protocol import codecs
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pbg

    _client_heap()
    out: dict[str, Any] = {"latencies": [], "errors": 0, "mismatches": 0, "first_error": ""}
    nbytes = x.nbytes
    xs = [x, -x]
    expected = [v * np.float32(2.0) + np.float32(0.5) for v in xs]
    tag = f"bench{os.getpid()}_{nbytes}"
    blocks = [shared_memory.SharedMemory(create=True, size=nbytes) for _ in range(2)]
    in_arr = np.ndarray(x.shape, "<f4", buffer=blocks[0].buf)
    out_arr = np.ndarray(x.shape, "<f4", buffer=blocks[1].buf)
    try:
        with grpc.insecure_channel(target) as channel:
            stub = pbg.GRPCInferenceServiceStub(channel)
            refs = {}
            for role, block in zip(("in", "out"), blocks, strict=True):
                name = f"{tag}_{role}"
                stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                    name=name, key="/" + block.name, offset=0, byte_size=nbytes), timeout=30)
                refs[role] = codecs.SharedMemoryRef(name, nbytes)
            request = pb.ModelInferRequest(model_name=model, id=f"shm{nbytes}")
            tensor = request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
            codecs.to_parameters(refs["in"].parameters(), tensor.parameters)
            codecs.to_parameters(refs["out"].parameters(), request.outputs.add(name="y").parameters)
            for i in range(repeats + 1):
                k = i % 2
                out_arr.fill(np.nan)
                t0 = time.perf_counter()
                try:
                    np.copyto(in_arr, xs[k])
                    response = stub.ModelInfer(request, timeout=300)
                    y = out_arr.copy()
                except grpc.RpcError as exc:
                    out["errors"] += 1
                    out["first_error"] = out["first_error"] or f"{exc.code().name}: {exc.details()}"
                    continue
                dt = time.perf_counter() - t0
                bad = ""
                if [o.name for o in response.outputs] != ["y"] or list(
                        response.raw_output_contents) != [b""]:
                    bad = "response carries data or other outputs besides the shm output 'y'"
                elif codecs.shared_memory_ref("output", "y", response.outputs[0].parameters
                                              ) != refs["out"]:
                    bad = "response output 'y' does not name its shared memory region"
                elif not np.allclose(y, expected[k], rtol=rtol, atol=atol):
                    bad = "shared memory output differs from 2x + 0.5"
                if bad:
                    out["mismatches"] += 1
                    out["first_error"] = out["first_error"] or bad
                elif i:
                    out["latencies"].append(dt)
            stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name=""))
    finally:
        del in_arr, out_arr
        for block in blocks:
            block.close()
            block.unlink()
    return out
