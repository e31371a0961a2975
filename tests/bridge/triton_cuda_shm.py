"""CUDA shared memory with `tritonclient[grpc]` against a server without CUDA devices: the
answers of a Triton built without GPU support (issue 14).

MUST run in its own process (tritonclient's `inference.*` protobuf symbols clash with ours).
Prints `PASS <check>`, exits 1 on the first mismatch.

    python triton_cuda_shm.py --url 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import sys

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


class Mismatch(Exception):
    """A check failed."""


def check(cond: bool, name: str, why: object = "") -> None:
    if not cond:
        raise Mismatch(f"{name}: {why}")
    print(f"PASS {name}", flush=True)


def refused(call, code: str, *parts: str) -> InferenceServerException:
    """The call's InferenceServerException, which must carry `code` and name every part."""
    try:
        call()
    except InferenceServerException as exc:
        text = f"{exc.status()} {exc.message()}"
        if code not in str(exc.status()) or not all(p in exc.message() for p in parts):
            raise Mismatch(f"expected {code} naming {parts}, got {text}") from None
        return exc
    raise Mismatch(f"call succeeded, expected {code}")


def run(url: str) -> None:
    client = grpcclient.InferenceServerClient(url=url)
    status = client.get_cuda_shared_memory_status()
    check(len(status.regions) == 0, "CudaSharedMemoryStatus: no regions", status)
    status = client.get_cuda_shared_memory_status(as_json=True)
    check(status.get("regions", {}) == {}, "CudaSharedMemoryStatus as JSON: no regions", status)
    # perf_analyzer's clean-up: unregister everything, and one region by name.
    client.unregister_cuda_shared_memory()
    check(True, "CudaSharedMemoryUnregister (all) with nothing registered: OK")
    client.unregister_cuda_shared_memory("never_registered")
    check(True, "CudaSharedMemoryUnregister of an unknown name: OK")
    exc = refused(lambda: client.register_cuda_shared_memory("gpu_in", b"\0" * 64, 0, 64),
                  "INVALID_ARGUMENT", "'gpu_in'", "no CUDA devices")
    check(True, "CudaSharedMemoryRegister: INVALID_ARGUMENT naming the region, no CUDA devices",
          exc.message())
    exc = refused(lambda: client.get_cuda_shared_memory_status("gpu_in"), "NOT_FOUND", "'gpu_in'")
    check(True, "CudaSharedMemoryStatus of a named region: NOT_FOUND naming it", exc.message())
    meta = client.get_server_metadata()
    check("cuda_shared_memory" not in meta.extensions,
          "ServerMetadata does not claim cuda_shared_memory", list(meta.extensions))
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    try:
        run(args.url)
    except Mismatch as exc:
        print(f"FAIL {exc}", flush=True)
        return 1
    print("ALL PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
