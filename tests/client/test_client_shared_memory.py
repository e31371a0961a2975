"""`jaxport.client` over system shared memory against a real `jaxport serve
--system-shared-memory` (and the default bridge refusing it); outputs compared with JAX."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from client_helpers import assert_matches_jax, server_error
from client_models import run_jax
from jaxport.client import InferenceClient, SharedMemoryRegion, SharedMemoryStatus
from jaxport.protocol.errors import InvalidArgumentError
from support.bridge import BridgeProcess


@pytest.fixture(scope="module")
def shm_client(repository: Path) -> Iterator[InferenceClient]:
    with BridgeProcess(repository, "--system-shared-memory") as bridge, \
            InferenceClient(bridge.address, timeout=30) as client:
        yield client


@pytest.fixture
def regions() -> Iterator[tuple[SharedMemoryRegion, SharedMemoryRegion]]:
    tag = f"jaxport_client_{os.getpid()}"
    with SharedMemoryRegion("in", f"/{tag}_in", 4096) as a, \
            SharedMemoryRegion("out", f"/{tag}_out", 4096) as b:
        yield a, b


def mixed_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {"a": rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16),
            "idx": np.array([-(2**40), 0, 2**35 + 1], np.int64),
            "flag": np.array([True, True, False])}


def test_infer_through_shared_memory_matches_jax(shm_client: InferenceClient, regions) -> None:
    r_in, r_out = regions
    shm_client.register_system_shared_memory(r_in)
    shm_client.register_system_shared_memory(r_out)
    try:
        assert shm_client.system_shared_memory_status() == {
            "in": SharedMemoryStatus("in", r_in.key, 0, 4096),
            "out": SharedMemoryStatus("out", r_out.key, 0, 4096)}
        inputs = mixed_inputs()
        result = shm_client.infer(
            "mixed", inputs, outputs=["s"],
            shared_memory_inputs={"a": r_in, "flag": (r_in, 1024)},     # idx stays raw
            shared_memory_outputs={"h": (r_out, 64), "m": (r_out, 2048)})
        assert list(result.outputs) == ["s", "h", "m"]
        for name, want in zip(("h", "s", "m"), run_jax("mixed", inputs), strict=True):
            assert_matches_jax(result[name], want, name)
        # the bytes really are in the output region
        h = np.frombuffer(r_out.view(64, 24), ml_dtypes.bfloat16).reshape(3, 4)
        np.testing.assert_array_equal(h, result["h"])
        # too small an output region: the server names the output
        err = server_error(shm_client.infer, "echo_fp32", {"x": np.ones((2, 3), np.float32)},
                           shared_memory_outputs={"y": (r_out, 4096 - 8)})
        assert err.code == "INVALID_ARGUMENT" and "output 'y'" in err.message
        assert "needs 24 bytes" in err.message
    finally:
        shm_client.unregister_system_shared_memory()
    assert shm_client.system_shared_memory_status() == {}
    err = server_error(shm_client.infer, "echo_fp32", {"x": np.ones((2, 3), np.float32)},
                       shared_memory_inputs={"x": r_in})
    assert err.code == "NOT_FOUND" and "region 'in'" in err.message and "input 'x'" in err.message


def test_local_mistakes_are_one_line_errors(shm_client: InferenceClient, regions) -> None:
    r_in, _ = regions
    with pytest.raises(InvalidArgumentError, match="input 'z': given a shared memory region"):
        shm_client.infer("echo_fp32", {"x": np.ones((2, 3), np.float32)},
                         shared_memory_inputs={"z": r_in})
    with pytest.raises(InvalidArgumentError, match="24 bytes at offset 4090 lie beyond"):
        shm_client.infer("echo_fp32", {"x": np.ones((2, 3), np.float32)},
                         shared_memory_inputs={"x": (r_in, 4090)})
    with pytest.raises(InvalidArgumentError, match="not a plain name"):
        SharedMemoryRegion("bad", "/a/b", 64)


def test_default_bridge_refuses_naming_the_flag(bridge: BridgeProcess, regions) -> None:
    r_in, _ = regions
    with InferenceClient(bridge.address, timeout=30) as client:
        err = server_error(client.register_system_shared_memory, r_in)
        assert err.code == "FAILED_PRECONDITION" and "--system-shared-memory" in err.message
        err = server_error(client.infer, "echo_fp32", {"x": np.ones((2, 3), np.float32)},
                           shared_memory_inputs={"x": r_in})
        assert err.code == "FAILED_PRECONDITION" and "input 'x'" in err.message
