"""CUDA shared-memory RPCs answered as a Triton built without GPU support (issue 14): status
lists no region (a named one is NOT_FOUND), unregister is OK with nothing registered (what
perf_analyzer's clean-up calls), register is INVALID_ARGUMENT naming the region and saying this
server has no CUDA devices. Checked with tritonclient (in a subprocess: `triton_cuda_shm.py`)
and the generated stubs against the shared `jaxport serve` (the front answers them itself;
REST's CUDA routes: tests/front/test_rest.py)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess

SCRIPT = Path(__file__).with_name("triton_cuda_shm.py")


def _run_tritonclient(server: BridgeProcess) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--url", server.address],
                          capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "ALL PASS" in proc.stdout and "FAIL" not in proc.stdout, output


def test_tritonclient_cuda_shared_memory_answers(bridge: BridgeProcess) -> None:
    _run_tritonclient(bridge)
    with urllib.request.urlopen(bridge.metrics_url, timeout=30) as response:
        metrics = response.read().decode()
    counted = [line for line in metrics.splitlines()
               if line.startswith("jaxport_grpc_requests_total{")]
    for method, code in (("CudaSharedMemoryStatus", "OK"), ("CudaSharedMemoryUnregister", "OK"),
                         ("CudaSharedMemoryRegister", "INVALID_ARGUMENT"),
                         ("CudaSharedMemoryStatus", "NOT_FOUND")):
        assert any(f'{method}"' in line and f'code="{code}"' in line for line in counted), \
            (method, code, counted)
    assert 'code="INTERNAL"' not in metrics and 'code="UNIMPLEMENTED"' not in metrics, metrics


def test_generated_stub_cuda_shared_memory(stub) -> None:
    assert stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(), timeout=30) \
        == pb.CudaSharedMemoryStatusResponse()
    stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest(name="x"), timeout=30)
    with pytest.raises(grpc.RpcError) as err:
        stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(
            name="cuda_region_7", raw_handle=b"\1" * 64, device_id=0, byte_size=64), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'cuda_region_7'" in err.value.details()
    assert "this server has no CUDA devices" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(name="cuda_region_7"),
                                    timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "'cuda_region_7'" in err.value.details()
