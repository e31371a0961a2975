"""AsyncInferenceClient (grpc.aio) against a REAL bridge: the same calls, results and errors as
InferenceClient; and both clients on a channel the caller owns.

No pytest plugin: each test runs its coroutine with asyncio.run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import numpy as np
import pytest
from client_helpers import TOKEN, mtls, same
from client_models import ECHO_SHAPE, run_jax
from jaxport.client import (
    AsyncInferenceClient,
    InferenceClient,
    InferenceServerError,
    ModelIndex,
    SharedMemoryRegion,
    SharedMemoryStatus,
    TensorMetadata,
)
from jaxport.protocol.errors import InvalidArgumentError
from support.bridge import BridgeProcess
from support.certs import Pki
from support.gate import Gate

#: Inputs of `slow`; the deadline tests hold it at the test gate, so no answer can come before
#: their deadline on any machine (not "enough rounds to be slow").
SLOW = {"x": np.full((256, 256), 0.01, np.float32), "n": np.array(3, np.int32)}


def run[T](fn: Callable[[AsyncInferenceClient], Awaitable[T]], address: str, **kwargs: Any) -> T:
    """Open an AsyncInferenceClient on a fresh loop, await fn(client), close it."""
    async def main() -> T:
        async with AsyncInferenceClient(address, timeout=30, **kwargs) as client:
            return await fn(client)
    return asyncio.run(main())


async def error_of(awaitable: Awaitable[Any]) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as info:
        await awaitable
    return info.value


def test_health_and_metadata(bridge: BridgeProcess) -> None:
    async def calls(c: AsyncInferenceClient) -> None:
        assert await c.server_live() and await c.server_ready()
        assert await c.model_ready("echo_fp32")
        assert (await error_of(c.model_ready("no_such_model"))).code == "NOT_FOUND"
        await c.wait_ready(timeout=60, model="echo_fp32")  # ready already: a bound
        server = await c.server_metadata()
        assert server.name and server.extensions
        meta = await c.model_metadata("echo_fp32")
        assert meta.inputs == (TensorMetadata("x", "FP32", ECHO_SHAPE),)
        assert meta.versions == ("1",)
        assert (await c.model_config("echo_fp32")).name == "echo_fp32"
        stats = await c.model_statistics("echo_fp32")
        assert [s.name for s in stats.model_stats] == ["echo_fp32"]
        index = await c.repository_index()
        assert ModelIndex("echo_fp32", "1", "READY", "") in index
    run(calls, bridge.address)


def test_infer_matches_jax_raw_and_typed(bridge: BridgeProcess) -> None:
    x = np.arange(6, dtype=np.int64).reshape(ECHO_SHAPE) - 3

    async def calls(c: AsyncInferenceClient) -> None:
        (want,) = run_jax("echo_int64", {"x": x})
        for raw in (True, False):
            r = await c.infer("echo_int64", {"x": x}, request_id="a-1", raw=raw)
            assert (r.id, r.model_name, r.model_version) == ("a-1", "echo_int64", "1")
            assert same(r["y"], want)
        # Many calls in flight at once on one channel.
        results = await asyncio.gather(*(c.infer("echo_int64", {"x": x + i}) for i in range(8)))
        for i, r in enumerate(results):
            assert same(r["y"], run_jax("echo_int64", {"x": x + i})[0])
    run(calls, bridge.address)


def test_errors_are_the_same_types(bridge: BridgeProcess, gate: Gate) -> None:
    x = np.ones(ECHO_SHAPE, np.float32)

    async def calls(c: AsyncInferenceClient) -> None:
        err = await error_of(c.infer("no_such_model", {"x": x}))
        assert err.code == "NOT_FOUND" and err.status_code is grpc.StatusCode.NOT_FOUND
        with InferenceClient(bridge.address, timeout=30) as sync:
            with pytest.raises(InferenceServerError) as same_call:
                sync.infer("no_such_model", {"x": x})
        assert (err.code, err.message) == (same_call.value.code, same_call.value.message)
        err = await error_of(c.infer("echo_fp32", {"x": np.ones((3, 2), np.float32)}))
        assert err.code == "INVALID_ARGUMENT" and "'x'" in err.message
        with pytest.raises(InvalidArgumentError, match="unsupported dtype 'complex64'"):
            await c.infer("echo_fp32", {"x": np.ones(2, np.complex64)})
        with gate.holding("slow"):
            err = await error_of(c.infer("slow", SLOW, timeout=0.2))
        assert err.code == "DEADLINE_EXCEEDED"
    run(calls, bridge.address)


def test_unreachable_server_is_unavailable() -> None:
    async def calls(c: AsyncInferenceClient) -> None:
        assert (await error_of(c.server_live())).code == "UNAVAILABLE"
    run(calls, "127.0.0.1:1")


def test_stream_infer(bridge: BridgeProcess) -> None:
    requests = [{"x": np.full(ECHO_SHAPE, i, dtype=np.int32)} for i in range(6)]

    async def feed() -> AsyncIterator[dict[str, np.ndarray]]:
        for r in requests:
            yield r

    async def calls(c: AsyncInferenceClient) -> None:
        for source in (requests, feed()):
            results = [r async for r in c.stream_infer("echo_int32", source)]
            assert [r.id for r in results] == [str(i) for i in range(6)]
            for i, r in enumerate(results):
                assert same(r["y"], run_jax("echo_int32", requests[i])[0])
    run(calls, bridge.address)


def test_stream_errors(bridge: BridgeProcess, gate: Gate) -> None:
    good = {"x": np.ones(ECHO_SHAPE, dtype=np.float32)}

    async def calls(c: AsyncInferenceClient) -> None:
        results = [r async for r in c.stream_infer("echo_fp32", [good, good], outputs=["nope"],
                                                   raise_errors=False)]
        assert [r.id for r in results] == ["0", "1"]
        assert all(r.error.startswith("INVALID_ARGUMENT: unknown requested output 'nope'")
                   for r in results)
        with pytest.raises(InferenceServerError) as info:
            [r async for r in c.stream_infer("echo_fp32", [good], outputs=["nope"])]
        assert info.value.code == "INVALID_ARGUMENT"
        with gate.holding("slow"), pytest.raises(InferenceServerError) as info:
            [r async for r in c.stream_infer("slow", [SLOW], timeout=0.2)]
        assert info.value.code == "DEADLINE_EXCEEDED"

        def broken():
            yield good
            raise KeyError("caller bug")

        with pytest.raises(KeyError, match="caller bug"):
            [r async for r in c.stream_infer("echo_fp32", broken())]
        assert await c.server_live()
    run(calls, bridge.address)


def test_mutual_tls_and_token(secure_bridge: BridgeProcess, pki: Pki) -> None:
    x = np.ones(ECHO_SHAPE, np.float32)

    async def calls(c: AsyncInferenceClient) -> None:
        assert (await c.server_metadata()).name == "jaxport"
        (r,) = [r async for r in c.stream_infer("echo_fp32", [{"x": x}])]
        assert same(r["y"], x)
    run(calls, secure_bridge.address, token=TOKEN, **mtls(pki))

    async def refused(c: AsyncInferenceClient) -> None:
        assert await c.server_live()  # open by design (docs/security.md)
        assert (await error_of(c.server_metadata())).code == "UNAUTHENTICATED"
        assert (await error_of(c.infer("echo_fp32", {"x": x}))).code == "UNAUTHENTICATED"
    run(refused, secure_bridge.address, token="wrong", **mtls(pki))


def test_shared_memory(repository: Path) -> None:
    tag = f"jaxport_aio_{os.getpid()}"
    x = np.arange(6, dtype=np.float32).reshape(ECHO_SHAPE)

    async def calls(c: AsyncInferenceClient) -> None:
        with SharedMemoryRegion("in", f"/{tag}_in", 4096) as r_in, \
                SharedMemoryRegion("out", f"/{tag}_out", 4096) as r_out:
            await c.register_system_shared_memory(r_in)
            await c.register_system_shared_memory(r_out)
            try:
                assert await c.system_shared_memory_status("in") == {
                    "in": SharedMemoryStatus("in", r_in.key, 0, 4096)}
                r = await c.infer("echo_fp32", {"x": x}, shared_memory_inputs={"x": r_in},
                                  shared_memory_outputs={"y": r_out})
                assert same(r["y"], x)
            finally:
                await c.unregister_system_shared_memory()
            assert await c.system_shared_memory_status() == {}

    with BridgeProcess(repository, "--system-shared-memory") as shm_bridge:
        run(calls, shm_bridge.address)


# --- a channel the caller owns ----------------------------------------------------------------


def test_sync_client_on_the_callers_channel(bridge: BridgeProcess) -> None:
    channel = grpc.insecure_channel(bridge.address)
    try:
        with InferenceClient(channel=channel, timeout=30) as client:
            assert client.channel is channel
            assert client.server_live()
        # Closing the client left the caller's channel open.
        with InferenceClient(channel=channel, timeout=30) as again:
            assert again.model_ready("echo_fp32")
    finally:
        channel.close()


def test_async_client_on_the_callers_channel(bridge: BridgeProcess) -> None:
    async def main() -> None:
        channel = grpc.aio.insecure_channel(bridge.address)
        try:
            async with AsyncInferenceClient(channel=channel, timeout=30) as client:
                assert client.channel is channel
                assert await client.server_live()
            async with AsyncInferenceClient(channel=channel, timeout=30) as again:
                assert await again.model_ready("echo_fp32")
        finally:
            await channel.close()
    asyncio.run(main())


@pytest.mark.parametrize("cls", [InferenceClient, AsyncInferenceClient])
def test_target_or_channel_not_both(cls: type) -> None:
    with pytest.raises(ValueError, match="either a target"):
        cls()
    with pytest.raises(ValueError, match="either a target"):
        cls("127.0.0.1:1", channel=object())
    with pytest.raises(ValueError, match="tls: channel settings do not apply"):
        cls(channel=object(), tls=True)
