"""`AsyncInferenceClient`: the asyncio twin of `InferenceClient`, on `grpc.aio`.

Same calls, same arguments, same results and the same `InferenceServerError` for a failed
call; every call is a coroutine (`await client.infer(...)`), `stream_infer` is an async
iterator, and the client is an async context manager (`async with`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
import grpc.aio
import numpy as np
from jaxport.client.inference import (
    DEFAULT_MAX_MESSAGE_BYTES,
    InferenceServerError,
    InferResult,
    ModelIndex,
    ModelMetadata,
    Placement,
    RetryPolicy,
    ServerMetadata,
    SharedMemoryStatus,
    _check_target,
    _infer_request,
    _model_metadata,
    _stream_result,
    connect,
)
from jaxport.client.shared_memory import SharedMemoryRegion
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2

__all__ = ["AsyncInferenceClient"]


class AsyncInferenceClient:
    """An asyncio connection to one server; `async with` closes a channel it opened.

    Arguments as `InferenceClient`: `target` ("host:port", the client opens and owns a
    `grpc.aio` channel) or `channel=` an existing `grpc.aio.Channel` the caller keeps owning;
    max_message_bytes, timeout, TLS (tls / root_certificates / client_certificate / client_key /
    tls_server_name), token and retry mean the same. Create it inside the event loop that will
    use it (grpc.aio channels belong to one loop).
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.aio.Channel | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        timeout: float | None = None,
        tls: bool = False,
        root_certificates: bytes | str | Path | None = None,
        client_certificate: bytes | str | Path | None = None,
        client_key: bytes | str | Path | None = None,
        tls_server_name: str | None = None,
        token: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.target = _check_target(target, channel, {
            "tls": tls, "root_certificates": root_certificates,
            "client_certificate": client_certificate, "client_key": client_key,
            "tls_server_name": tls_server_name, "retry": retry})
        self.timeout = timeout
        self._channel, self._owns_channel, self._metadata = connect(
            grpc.aio, target, channel, max_message_bytes=max_message_bytes, tls=tls,
            root_certificates=root_certificates, client_certificate=client_certificate,
            client_key=client_key, tls_server_name=tls_server_name, token=token, retry=retry)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    # --- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the channel if this client opened it (calls in flight are cancelled); a
        caller's channel is left open."""
        if self._owns_channel:
            await self._channel.close()

    async def __aenter__(self) -> AsyncInferenceClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return await method(
                request,
                timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise InferenceServerError.from_rpc_error(exc) from exc

    # --- health and metadata -----------------------------------------------------------------

    async def server_live(self, *, timeout: float | None = None) -> bool:
        return (await self._call(self._stub.ServerLive, pb.ServerLiveRequest(), timeout)).live

    async def server_ready(self, *, timeout: float | None = None) -> bool:
        return (await self._call(self._stub.ServerReady, pb.ServerReadyRequest(), timeout)).ready

    async def model_ready(self, model: str, version: str = "", *,
                          timeout: float | None = None) -> bool:
        request = pb.ModelReadyRequest(name=model, version=version)
        return (await self._call(self._stub.ModelReady, request, timeout)).ready

    async def wait_ready(self, timeout: float = 30.0, model: str | None = None) -> None:
        """Wait until the server (and `model`, if given) is ready; TimeoutError if not."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = "no answer"
        while loop.time() < deadline:
            try:
                ready = await self.server_ready(timeout=max(0.1, deadline - loop.time()))
                if ready and model is not None:
                    ready = await self.model_ready(model, timeout=max(0.1, deadline - loop.time()))
                if ready:
                    return
                last = "not ready"
            except InferenceServerError as exc:
                last = str(exc)
            await asyncio.sleep(0.1)
        what = f"model '{model}' on {self.target}" if model else self.target
        raise TimeoutError(f"{what} not ready after {timeout:g} s ({last})")

    async def server_metadata(self, *, timeout: float | None = None) -> ServerMetadata:
        r = await self._call(self._stub.ServerMetadata, pb.ServerMetadataRequest(), timeout)
        return ServerMetadata(r.name, r.version, tuple(r.extensions))

    async def model_metadata(self, model: str, version: str = "", *,
                             timeout: float | None = None) -> ModelMetadata:
        request = pb.ModelMetadataRequest(name=model, version=version)
        return _model_metadata(await self._call(self._stub.ModelMetadata, request, timeout))

    async def model_config(self, model: str, version: str = "", *,
                           timeout: float | None = None) -> model_config_pb2.ModelConfig:
        """The `ModelConfig` message itself (tritonclient's `get_model_config(m).config`; see
        `InferenceClient.model_config`)."""
        request = pb.ModelConfigRequest(name=model, version=version)
        return (await self._call(self._stub.ModelConfig, request, timeout)).config

    async def model_statistics(self, model: str = "", version: str = "", *,
                               timeout: float | None = None) -> pb.ModelStatisticsResponse:
        request = pb.ModelStatisticsRequest(name=model, version=version)
        return await self._call(self._stub.ModelStatistics, request, timeout)

    # --- inference ---------------------------------------------------------------------------

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        version: str = "",
        request_id: str = "",
        raw: bool = True,
        parameters: Mapping[str, codecs.ParameterValue] | None = None,
        timeout: float | None = None,
        shared_memory_inputs: Mapping[str, Placement] | None = None,
        shared_memory_outputs: Mapping[str, Placement] | None = None,
        classes: Mapping[str, int] | None = None,
    ) -> InferResult:
        """Run one inference (see `InferenceClient.infer`, `classes` included)."""
        request, resolve = _infer_request(
            model, inputs, outputs=outputs, version=version, request_id=request_id, raw=raw,
            parameters=parameters, shared_memory_inputs=shared_memory_inputs,
            shared_memory_outputs=shared_memory_outputs, classes=classes)
        return InferResult.from_response(
            await self._call(self._stub.ModelInfer, request, timeout), resolve)

    async def stream_infer(
        self,
        model: str,
        requests: Iterable[Mapping[str, np.ndarray]] | AsyncIterable[Mapping[str, np.ndarray]],
        *,
        outputs: Sequence[str] | None = None,
        version: str = "",
        raw: bool = True,
        raise_errors: bool = True,
        parameters: Mapping[str, codecs.ParameterValue] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[InferResult]:
        """Send each mapping of inputs (a plain or an async iterable) over one ModelStreamInfer
        stream; yield results as they arrive (see `InferenceClient.stream_infer`: ids "0",
        "1", ...; errors raise, or with raise_errors=False come back in `InferResult.error`;
        `timeout` bounds the whole stream)."""
        call = self._stub.ModelStreamInfer(
            timeout=self.timeout if timeout is None else timeout, metadata=self._metadata)
        failure: list[BaseException] = []

        async def feeds() -> AsyncIterator[Mapping[str, np.ndarray]]:
            if isinstance(requests, AsyncIterable):
                async for inputs in requests:
                    yield inputs
            else:
                for inputs in requests:
                    yield inputs

        async def write() -> None:
            try:
                counter = itertools.count()
                async for inputs in feeds():
                    await call.write(codecs.build_infer_request(
                        model, inputs, outputs=outputs, version=version,
                        request_id=str(next(counter)), raw=raw, parameters=parameters))
                await call.done_writing()
            except asyncio.CancelledError:
                raise
            except grpc.RpcError:
                pass  # the call ended; read() reports why
            except Exception as exc:
                failure.append(exc)
                call.cancel()

        writer = asyncio.create_task(write())
        try:
            while True:
                try:
                    message = await call.read()
                except (grpc.RpcError, asyncio.CancelledError) as exc:
                    if failure:
                        raise failure[0] from None
                    if isinstance(exc, grpc.RpcError):
                        raise InferenceServerError.from_rpc_error(exc) from exc
                    raise
                if message is grpc.aio.EOF:
                    break
                yield _stream_result(message, raise_errors)
        finally:
            call.cancel()
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
        if failure:
            raise failure[0]

    # --- system shared memory ----------------------------------------------------------------

    async def register_system_shared_memory(self, region: SharedMemoryRegion, *,
                                            timeout: float | None = None) -> None:
        """Tell the server about `region` (same host; `jaxport serve --system-shared-memory`)."""
        await self._call(self._stub.SystemSharedMemoryRegister,
                         pb.SystemSharedMemoryRegisterRequest(
                             name=region.name, key=region.key, offset=0,
                             byte_size=region.byte_size), timeout)

    async def unregister_system_shared_memory(self, name: str = "", *,
                                              timeout: float | None = None) -> None:
        await self._call(self._stub.SystemSharedMemoryUnregister,
                         pb.SystemSharedMemoryUnregisterRequest(name=name), timeout)

    async def system_shared_memory_status(self, name: str = "", *, timeout: float | None = None
                                          ) -> dict[str, SharedMemoryStatus]:
        response = await self._call(self._stub.SystemSharedMemoryStatus,
                                    pb.SystemSharedMemoryStatusRequest(name=name), timeout)
        return {k: SharedMemoryStatus(v.name, v.key, v.offset, v.byte_size)
                for k, v in sorted(response.regions.items())}

    # --- repository --------------------------------------------------------------------------

    async def repository_index(self, *, ready: bool = False, repository: str = "",
                               timeout: float | None = None) -> list[ModelIndex]:
        request = pb.RepositoryIndexRequest(repository_name=repository, ready=ready)
        r = await self._call(self._stub.RepositoryIndex, request, timeout)
        return [ModelIndex(m.name, m.version, m.state, m.reason) for m in r.models]

    async def load_model(self, model: str, *, repository: str = "",
                         timeout: float | None = None) -> None:
        request = pb.RepositoryModelLoadRequest(repository_name=repository, model_name=model)
        await self._call(self._stub.RepositoryModelLoad, request, timeout)

    async def unload_model(self, model: str, *, repository: str = "",
                           timeout: float | None = None) -> None:
        request = pb.RepositoryModelUnloadRequest(repository_name=repository, model_name=model)
        await self._call(self._stub.RepositoryModelUnload, request, timeout)
