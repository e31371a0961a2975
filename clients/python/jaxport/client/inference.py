"""`InferenceClient`: a blocking Open Inference Protocol gRPC client that needs no JAX.

Works against a jaxport bridge and any other server of the protocol in Triton's dialect.
Tensors go in and come out as numpy arrays (raw little-endian bytes on the wire by default);
every gRPC failure becomes an `InferenceServerError` carrying the status code and the server's
message unchanged.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc
import numpy as np
from jaxport.client.shared_memory import SharedMemoryRegion
from jaxport.protocol import codecs, dtypes
from jaxport.protocol.errors import InvalidArgumentError, ProtocolError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "InferResult",
    "InferenceClient",
    "InferenceServerError",
    "ModelIndex",
    "ModelMetadata",
    "ServerMetadata",
    "SharedMemoryStatus",
    "TensorMetadata",
]

# gRPC's 4 MiB default is smaller than real tensors; both directions get this limit.
DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

_Response = TypeVar("_Response")


class InferenceServerError(ProtocolError):
    """A call failed: `code` is the gRPC status name, `message` the server's text unchanged."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def status_code(self) -> grpc.StatusCode:
        """The `grpc.StatusCode` member (UNKNOWN for a name grpc does not know)."""
        return grpc.StatusCode.__members__.get(self.code, grpc.StatusCode.UNKNOWN)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @classmethod
    def from_rpc_error(cls, exc: grpc.RpcError) -> InferenceServerError:
        """Keep the status code and details of a failed call (grpc.Call errors)."""
        code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        return cls(code.name, details or "")


    @classmethod
    def from_stream_error(cls, error_message: str) -> InferenceServerError:
        """The error of a failed request inside ModelStreamInfer. Servers that prefix the
        status name ("INVALID_ARGUMENT: ...", as the jaxport bridge does) keep their code;
        any other text is code UNKNOWN with the message unchanged."""
        code, sep, rest = error_message.partition(": ")
        if sep and code in grpc.StatusCode.__members__ and code != "OK":
            return cls(code, rest)
        return cls("UNKNOWN", error_message)


@dataclass(frozen=True)
class TensorMetadata:
    """Signature of one model input or output (-1 marks a variable dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def dtype(self) -> np.dtype:
        """numpy dtype of the datatype (from the one dtype table)."""
        return dtypes.by_datatype(self.datatype).numpy


@dataclass(frozen=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(frozen=True)
class ModelIndex:
    """One entry of the repository index."""

    name: str
    version: str
    state: str
    reason: str


@dataclass(frozen=True)
class InferResult:
    """Outputs of one inference, by name in the server's order.

    Arrays decoded from raw bytes are read-only views of the response (no copy); `.copy()`
    one to modify it. `error` is only set for a failed request of `stream_infer` with
    `raise_errors=False`.
    """

    model_name: str
    model_version: str
    id: str
    outputs: dict[str, np.ndarray]
    parameters: dict[str, codecs.ParameterValue] = field(default_factory=dict)
    error: str = ""

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]

    @classmethod
    def from_response(cls, response: pb.ModelInferResponse,
                      shared_memory: codecs.SharedMemoryResolver | None = None) -> InferResult:
        """Outputs the server put in shared memory are read (copied) through `shared_memory`."""
        return cls(
            model_name=response.model_name,
            model_version=response.model_version,
            id=response.id,
            outputs=codecs.decode_infer_response(response, shared_memory),
            parameters=codecs.from_parameters(response.parameters),
        )


@dataclass(frozen=True)
class SharedMemoryStatus:
    """One registered system shared-memory region, as the server reports it."""

    name: str
    key: str
    offset: int
    byte_size: int


Placement = SharedMemoryRegion | tuple[SharedMemoryRegion, int]
"""Where a tensor goes in shared memory: a region (offset 0) or (region, offset)."""


def _placed(where: Placement) -> tuple[SharedMemoryRegion, int]:
    return where if isinstance(where, tuple) else (where, 0)


def _read_pem(value: bytes | str | Path | None) -> bytes | None:
    """PEM bytes given directly, or read from a path."""
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def _tensor_metadata(items: Iterable[Any]) -> tuple[TensorMetadata, ...]:
    return tuple(TensorMetadata(t.name, t.datatype, tuple(t.shape)) for t in items)


class InferenceClient:
    """A connection to one server; a context manager that owns (and closes) its gRPC channel.

    target: "host:port". max_message_bytes: send and receive limit (default 256 MiB).
    timeout: default per-call deadline in seconds (None: no deadline; each call may override).
    TLS is used when `tls` is true or any of root_certificates / client_certificate /
    client_key is given (PEM bytes or a file path; no root certificates = system roots);
    tls_server_name overrides the name checked against the server certificate.
    token: sent as `authorization: Bearer <token>` metadata on every call.
    """

    def __init__(
        self,
        target: str,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        timeout: float | None = None,
        tls: bool = False,
        root_certificates: bytes | str | Path | None = None,
        client_certificate: bytes | str | Path | None = None,
        client_key: bytes | str | Path | None = None,
        tls_server_name: str | None = None,
        token: str | None = None,
    ) -> None:
        if (client_certificate is None) != (client_key is None):
            raise ValueError("client_certificate and client_key must be given together")
        self.target = target
        self.timeout = timeout
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        if tls or any(v is not None for v in (root_certificates, client_certificate, client_key)):
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(root_certificates),
                private_key=_read_pem(client_key),
                certificate_chain=_read_pem(client_certificate),
            )
            self._channel = grpc.secure_channel(target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> InferenceClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(
        self, method: Callable[..., _Response], request: Any, timeout: float | None
    ) -> _Response:
        try:
            return method(
                request,
                timeout=self.timeout if timeout is None else timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise InferenceServerError.from_rpc_error(exc) from exc

    # --- health and metadata -----------------------------------------------------------------

    def server_live(self, *, timeout: float | None = None) -> bool:
        return self._call(self._stub.ServerLive, pb.ServerLiveRequest(), timeout).live

    def server_ready(self, *, timeout: float | None = None) -> bool:
        return self._call(self._stub.ServerReady, pb.ServerReadyRequest(), timeout).ready

    def model_ready(self, model: str, version: str = "", *, timeout: float | None = None) -> bool:
        request = pb.ModelReadyRequest(name=model, version=version)
        return self._call(self._stub.ModelReady, request, timeout).ready

    def wait_ready(self, timeout: float = 30.0, model: str | None = None) -> None:
        """Block until the server (and `model`, if given) is ready; raise TimeoutError if not."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                ready = self.server_ready(timeout=max(0.1, deadline - time.monotonic()))
                if ready and model is not None:
                    ready = self.model_ready(model, timeout=max(0.1, deadline - time.monotonic()))
                if ready:
                    return
                last = "not ready"
            except InferenceServerError as exc:
                last = str(exc)
            time.sleep(0.1)
        what = f"model '{model}' on {self.target}" if model else self.target
        raise TimeoutError(f"{what} not ready after {timeout:g} s ({last})")

    def server_metadata(self, *, timeout: float | None = None) -> ServerMetadata:
        r = self._call(self._stub.ServerMetadata, pb.ServerMetadataRequest(), timeout)
        return ServerMetadata(r.name, r.version, tuple(r.extensions))

    def model_metadata(
        self, model: str, version: str = "", *, timeout: float | None = None
    ) -> ModelMetadata:
        request = pb.ModelMetadataRequest(name=model, version=version)
        r = self._call(self._stub.ModelMetadata, request, timeout)
        return ModelMetadata(
            name=r.name,
            versions=tuple(r.versions),
            platform=r.platform,
            inputs=_tensor_metadata(r.inputs),
            outputs=_tensor_metadata(r.outputs),
        )

    def model_config(
        self, model: str, version: str = "", *, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        """Triton-style model configuration (the generated message)."""
        request = pb.ModelConfigRequest(name=model, version=version)
        return self._call(self._stub.ModelConfig, request, timeout).config

    def model_statistics(
        self, model: str = "", version: str = "", *, timeout: float | None = None
    ) -> pb.ModelStatisticsResponse:
        """Cumulative statistics of one model ("" = every model), as the generated message."""
        request = pb.ModelStatisticsRequest(name=model, version=version)
        return self._call(self._stub.ModelStatistics, request, timeout)

    # --- inference ---------------------------------------------------------------------------

    def infer(
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
    ) -> InferResult:
        """Run one inference. outputs: names to return (None = all); raw=False sends typed
        `contents` instead of raw bytes (not possible for FP16/BF16).

        Shared memory (server on this host with the extension on, regions registered with
        `register_system_shared_memory`): inputs named in `shared_memory_inputs` are written
        into their region and sent by reference; outputs named in `shared_memory_outputs` are
        requested into their region (from the offset to its end) and read back from it.
        """
        regions: dict[str, SharedMemoryRegion] = {}
        in_refs: dict[str, codecs.SharedMemoryRef] = {}
        for name, where in (shared_memory_inputs or {}).items():
            if name not in inputs:
                raise InvalidArgumentError(f"input '{name}': given a shared memory region but "
                                           "no array")
            region, offset = _placed(where)
            regions[region.name] = region
            in_refs[name] = region.write(inputs[name], offset)
        out_refs: dict[str, codecs.SharedMemoryRef] = {}
        for name, where in (shared_memory_outputs or {}).items():
            region, offset = _placed(where)
            regions[region.name] = region
            out_refs[name] = codecs.SharedMemoryRef(region.name, region.byte_size - offset,
                                                    offset)
        request = codecs.build_infer_request(
            model, inputs, outputs=outputs, version=version, request_id=request_id, raw=raw,
            parameters=parameters, input_shared_memory=in_refs, output_shared_memory=out_refs,
        )

        def resolve(kind: str, tensor: str, ref: codecs.SharedMemoryRef) -> memoryview:
            if ref.region not in regions:
                raise InvalidArgumentError(f"{kind} '{tensor}': the server put it in shared "
                                           f"memory region '{ref.region}', not mapped here")
            return regions[ref.region].resolve(kind, tensor, ref)

        return InferResult.from_response(self._call(self._stub.ModelInfer, request, timeout),
                                         resolve)

    # --- system shared memory ----------------------------------------------------------------

    def register_system_shared_memory(self, region: SharedMemoryRegion, *,
                                      timeout: float | None = None) -> None:
        """Tell the server about `region` (same host; `jaxport serve --system-shared-memory`)."""
        self._call(self._stub.SystemSharedMemoryRegister, pb.SystemSharedMemoryRegisterRequest(
            name=region.name, key=region.key, offset=0, byte_size=region.byte_size), timeout)

    def unregister_system_shared_memory(self, name: str = "", *,
                                        timeout: float | None = None) -> None:
        """Forget one region on the server, or all of them (empty name)."""
        self._call(self._stub.SystemSharedMemoryUnregister,
                   pb.SystemSharedMemoryUnregisterRequest(name=name), timeout)

    def system_shared_memory_status(self, name: str = "", *, timeout: float | None = None
                                    ) -> dict[str, SharedMemoryStatus]:
        """Registered regions by name (one, or all when `name` is empty)."""
        response = self._call(self._stub.SystemSharedMemoryStatus,
                              pb.SystemSharedMemoryStatusRequest(name=name), timeout)
        return {k: SharedMemoryStatus(v.name, v.key, v.offset, v.byte_size)
                for k, v in sorted(response.regions.items())}

    def stream_infer(
        self,
        model: str,
        requests: Iterable[Mapping[str, np.ndarray]],
        *,
        outputs: Sequence[str] | None = None,
        version: str = "",
        raw: bool = True,
        raise_errors: bool = True,
        parameters: Mapping[str, codecs.ParameterValue] | None = None,
        timeout: float | None = None,
    ) -> Iterator[InferResult]:
        """Send each mapping of inputs over one ModelStreamInfer stream; yield results as they
        arrive. Request i gets id str(i) (match results by `InferResult.id`). A failed request
        raises InferenceServerError (see `from_stream_error` for its code), or with
        raise_errors=False yields an InferResult whose `error` is the server's error_message.
        `parameters` go with every request; `timeout` bounds the whole stream."""
        # grpc consumes the requests on its own thread and would report an exception there
        # only as "Exception iterating requests!": keep it, cancel, and re-raise it here.
        failure: list[BaseException] = []

        def messages() -> Iterator[pb.ModelInferRequest]:
            try:
                for i, inputs in zip(itertools.count(), requests):
                    yield codecs.build_infer_request(
                        model, inputs, outputs=outputs, version=version, request_id=str(i),
                        raw=raw, parameters=parameters,
                    )
            except Exception as exc:
                failure.append(exc)
                call.cancel()

        call = self._stub.ModelStreamInfer(
            messages(),
            timeout=self.timeout if timeout is None else timeout,
            metadata=self._metadata,
        )
        try:
            for message in call:
                if message.error_message:
                    if raise_errors:
                        raise InferenceServerError.from_stream_error(message.error_message)
                    r = message.infer_response
                    yield InferResult(
                        r.model_name, r.model_version, r.id, {}, error=message.error_message
                    )
                    continue
                yield InferResult.from_response(message.infer_response)
        except grpc.RpcError as exc:
            if failure:
                raise failure[0] from None
            raise InferenceServerError.from_rpc_error(exc) from exc
        finally:
            call.cancel()
        if failure:
            raise failure[0]

    # --- repository --------------------------------------------------------------------------

    def repository_index(
        self, *, ready: bool = False, repository: str = "", timeout: float | None = None
    ) -> list[ModelIndex]:
        """Every model version the repository knows (only ready ones with ready=True)."""
        request = pb.RepositoryIndexRequest(repository_name=repository, ready=ready)
        r = self._call(self._stub.RepositoryIndex, request, timeout)
        return [ModelIndex(m.name, m.version, m.state, m.reason) for m in r.models]

    def load_model(
        self, model: str, *, repository: str = "", timeout: float | None = None
    ) -> None:
        """Load (or reload) a model from the server's repository."""
        request = pb.RepositoryModelLoadRequest(repository_name=repository, model_name=model)
        self._call(self._stub.RepositoryModelLoad, request, timeout)

    def unload_model(
        self, model: str, *, repository: str = "", timeout: float | None = None
    ) -> None:
        """Unload a model; it answers UNAVAILABLE/NOT_FOUND until loaded again."""
        request = pb.RepositoryModelUnloadRequest(repository_name=repository, model_name=model)
        self._call(self._stub.RepositoryModelUnload, request, timeout)
