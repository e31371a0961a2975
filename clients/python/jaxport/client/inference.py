"""`InferenceClient`: a blocking Open Inference Protocol gRPC client that needs no JAX.

Works against a jaxport bridge and any other server of the protocol in Triton's dialect.
Tensors go in and come out as numpy arrays (raw little-endian bytes on the wire by default);
every gRPC failure becomes an `InferenceServerError` carrying the status code and the server's
message unchanged.
"""

from __future__ import annotations

import itertools
import json
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
    "DEFAULT_RETRY_POLICY",
    "InferResult",
    "InferenceClient",
    "InferenceServerError",
    "ModelIndex",
    "ModelMetadata",
    "RetryPolicy",
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
        """Keep the status code and details of a failed call (grpc.Call errors of the blocking
        API and grpc.aio.AioRpcError of the asyncio one)."""
        if isinstance(exc, grpc.Call | grpc.aio.AioRpcError):
            return cls(exc.code().name, exc.details() or "")
        return cls(grpc.StatusCode.UNKNOWN.name, str(exc))


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


_SERVICE = "inference.GRPCInferenceService"
# Idempotent reads: also retried on DEADLINE_EXCEEDED returned by the server.
_READ_METHODS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
                 "ModelConfig", "RepositoryIndex", "ModelStatistics", "SystemSharedMemoryStatus",
                 "CudaSharedMemoryStatus")


@dataclass(frozen=True)
class RetryPolicy:
    """gRPC's own retry (the service config's `retryPolicy`, applied by the channel under every
    call): a call failing with UNAVAILABLE (server restarting, connection refused) is tried again
    after an exponential, jittered backoff, up to `max_attempts` in all (gRPC caps it at 5).
    Read-only calls (health, metadata, config, repository index, statistics, shared-memory
    status) are also retried on DEADLINE_EXCEEDED returned by the server; inference and calls
    that change state are not, and streams never. The call's timeout bounds all attempts."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 3.0
    backoff_multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not 2 <= self.max_attempts <= 5:
            raise ValueError(f"retry policy: max_attempts must be 2..5, got {self.max_attempts}")
        if not (0 < self.initial_backoff_s <= self.max_backoff_s and self.backoff_multiplier > 0):
            raise ValueError("retry policy: need 0 < initial_backoff_s <= max_backoff_s and "
                             f"backoff_multiplier > 0, got {self.initial_backoff_s}, "
                             f"{self.max_backoff_s}, {self.backoff_multiplier}")

    def service_config(self) -> str:
        """The gRPC service config JSON (channel option `grpc.service_config`)."""
        def policy(*codes: str) -> dict[str, Any]:
            return {"maxAttempts": self.max_attempts,
                    "initialBackoff": f"{self.initial_backoff_s:.3f}s",
                    "maxBackoff": f"{self.max_backoff_s:.3f}s",
                    "backoffMultiplier": self.backoff_multiplier,
                    "retryableStatusCodes": list(codes)}
        return json.dumps({"methodConfig": [
            {"name": [{"service": _SERVICE}], "retryPolicy": policy("UNAVAILABLE")},
            {"name": [{"service": _SERVICE, "method": m} for m in _READ_METHODS],
             "retryPolicy": policy("UNAVAILABLE", "DEADLINE_EXCEEDED")},
            # A stream is not retried: its requests are not idempotent as a whole.
            {"name": [{"service": _SERVICE, "method": "ModelStreamInfer"}]},
        ]})

    def channel_options(self) -> list[tuple[str, Any]]:
        """Options that turn the policy on; they also shorten the reconnect backoff (100 ms
        growing to max_backoff_s instead of 1 s to 120 s) so a restarted server is reached
        while the retries last."""
        return [("grpc.enable_retries", 1), ("grpc.service_config", self.service_config()),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", int(self.max_backoff_s * 1000))]


DEFAULT_RETRY_POLICY = RetryPolicy()
"""5 attempts, backoff 0.2 s doubling up to 3 s."""


@dataclass(frozen=True)
class _ChannelSpec:
    """How to open a channel: options and credentials (None = plaintext)."""

    options: list[tuple[str, Any]]
    credentials: grpc.ChannelCredentials | None


def _channel_spec(
    *, max_message_bytes: int, tls: bool, root_certificates: bytes | str | Path | None,
    client_certificate: bytes | str | Path | None, client_key: bytes | str | Path | None,
    tls_server_name: str | None, retry: RetryPolicy | None,
) -> _ChannelSpec:
    if (client_certificate is None) != (client_key is None):
        raise ValueError("client_certificate and client_key must be given together")
    options: list[tuple[str, Any]] = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    if retry is not None:
        options.extend(retry.channel_options())
    credentials = None
    if tls or any(v is not None for v in (root_certificates, client_certificate, client_key)):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read_pem(root_certificates),
            private_key=_read_pem(client_key),
            certificate_chain=_read_pem(client_certificate),
        )
    return _ChannelSpec(options, credentials)


def connect(
    module: Any, target: str | None, channel: Any, *, max_message_bytes: int, tls: bool,
    root_certificates: bytes | str | Path | None, client_certificate: bytes | str | Path | None,
    client_key: bytes | str | Path | None, tls_server_name: str | None, token: str | None,
    retry: RetryPolicy | None,
) -> tuple[Any, bool, tuple[tuple[str, str], ...]]:
    """(channel, whether the client owns it, call metadata) for either client: `module` is
    `grpc` or `grpc.aio`, whose channel factories take the same arguments. A caller's channel is
    used as it is and never closed by the client."""
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    if channel is not None:
        return channel, False, metadata
    spec = _channel_spec(
        max_message_bytes=max_message_bytes, tls=tls, root_certificates=root_certificates,
        client_certificate=client_certificate, client_key=client_key,
        tls_server_name=tls_server_name, retry=retry)
    if spec.credentials is not None:
        opened = module.secure_channel(str(target), spec.credentials, options=spec.options)
    else:
        opened = module.insecure_channel(str(target), options=spec.options)
    return opened, True, metadata


def rest_url_message(url: str, what: str = "--url") -> str:
    """One line for a gRPC address given as an http(s):// URL (the REST endpoint's form)."""
    bare = url.split("://", 1)[1].split("/", 1)[0]
    return (f"{what} {url!r} is a URL; a gRPC address is HOST:PORT with no scheme, e.g. "
            f"{bare!r} (jaxport serve: gRPC on --port, default 8001; http://HOST:PORT is its "
            "REST endpoint, --http-port, default 8000)")


def _check_target(target: str | None, channel: Any, channel_args: dict[str, Any]) -> str:
    """Exactly one of target / channel; a caller's channel takes no channel settings; a target
    is a gRPC address, never an http(s):// URL (gRPC would only answer 'Misformatted domain
    name' on the first call)."""
    if (target is None) == (channel is None):
        raise ValueError("give either a target ('host:port') or an existing channel, not both")
    if target is not None and str(target).lower().startswith(("http://", "https://")):
        raise ValueError(rest_url_message(str(target), "target"))
    if channel is not None:
        given = sorted(k for k, v in channel_args.items() if v not in (None, False))
        if given:
            raise ValueError(f"{', '.join(given)}: channel settings do not apply to an existing "
                             "channel; set them when creating it")
        return "<caller's channel>"
    return str(target)


def _infer_request(
    model: str, inputs: Mapping[str, np.ndarray], *, outputs: Sequence[str] | None,
    version: str, request_id: str, raw: bool,
    parameters: Mapping[str, codecs.ParameterValue] | None,
    shared_memory_inputs: Mapping[str, Placement] | None,
    shared_memory_outputs: Mapping[str, Placement] | None,
    classes: Mapping[str, int] | None = None,
) -> tuple[pb.ModelInferRequest, codecs.SharedMemoryResolver]:
    """The wire request of `infer` and the resolver of outputs placed in shared memory.
    Outputs named in `classes` are requested with Triton's classification parameter (their
    top-k count), after those of `outputs`."""
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
    classes = dict(classes or {})
    for name, count in classes.items():
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 1:
            raise InvalidArgumentError(f"requested output '{name}': class count must be an "
                                       f"integer >= 1, got {count!r}")
    requested = list(outputs or ())
    requested += [n for n in classes if n not in requested]
    request = codecs.build_infer_request(
        model, inputs, outputs=requested or None, version=version, request_id=request_id,
        raw=raw, parameters=parameters, input_shared_memory=in_refs,
        output_shared_memory=out_refs,
    )
    for out in request.outputs:
        if out.name in classes:
            out.parameters[codecs.CLASSIFICATION].int64_param = int(classes[out.name])

    def resolve(kind: str, tensor: str, ref: codecs.SharedMemoryRef) -> memoryview:
        if ref.region not in regions:
            raise InvalidArgumentError(f"{kind} '{tensor}': the server put it in shared "
                                       f"memory region '{ref.region}', not mapped here")
        return regions[ref.region].resolve(kind, tensor, ref)

    return request, resolve


def _model_metadata(r: pb.ModelMetadataResponse) -> ModelMetadata:
    return ModelMetadata(
        name=r.name,
        versions=tuple(r.versions),
        platform=r.platform,
        inputs=_tensor_metadata(r.inputs),
        outputs=_tensor_metadata(r.outputs),
    )


def _stream_result(message: pb.ModelStreamInferResponse, raise_errors: bool) -> InferResult:
    """One message of ModelStreamInfer as a result (or the error it carries)."""
    if message.error_message:
        if raise_errors:
            raise InferenceServerError.from_stream_error(message.error_message)
        r = message.infer_response
        return InferResult(r.model_name, r.model_version, r.id, {}, error=message.error_message)
    return InferResult.from_response(message.infer_response)


def _tensor_metadata(items: Iterable[Any]) -> tuple[TensorMetadata, ...]:
    return tuple(TensorMetadata(t.name, t.datatype, tuple(t.shape)) for t in items)


class InferenceClient:
    """A connection to one server; a context manager.

    Give either `target` ("host:port"), and the client opens and owns (closes) its channel, or
    `channel=` an existing `grpc.Channel` the caller keeps owning (`close()` leaves it open;
    channel settings below then belong to that channel and are refused here).
    max_message_bytes: send and receive limit (default 256 MiB).
    timeout: default per-call deadline in seconds (None: no deadline; each call may override).
    TLS is used when `tls` is true or any of root_certificates / client_certificate /
    client_key is given (PEM bytes or a file path; no root certificates = system roots);
    tls_server_name overrides the name checked against the server certificate.
    token: sent as `authorization: Bearer <token>` metadata on every call.
    retry: a `RetryPolicy` (e.g. `DEFAULT_RETRY_POLICY`) turns on gRPC's retries; off by
    default, so a call to a server that is down fails at once with UNAVAILABLE.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        channel: grpc.Channel | None = None,
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
            grpc, target, channel, max_message_bytes=max_message_bytes, tls=tls,
            root_certificates=root_certificates, client_certificate=client_certificate,
            client_key=client_key, tls_server_name=tls_server_name, token=token, retry=retry)
        self._stub = pb_grpc.GRPCInferenceServiceStub(self._channel)

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel (for generated stubs of other services on the same connection)."""
        return self._channel

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the channel if this client opened it (calls in flight are cancelled); a
        caller's channel is left open."""
        if self._owns_channel:
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
        return _model_metadata(self._call(self._stub.ModelMetadata, request, timeout))

    def model_config(
        self, model: str, version: str = "", *, timeout: float | None = None
    ) -> model_config_pb2.ModelConfig:
        """Triton-style model configuration: the `ModelConfig` message itself (`.name`,
        `.max_batch_size`, `.input`, `.output`, `.parameters["engine"].string_value`, ...).

        tritonclient's `get_model_config()` returns the ModelConfigResponse around it, so code
        written for tritonclient reads `.config` first; here that step is done:
        `client.model_config(m)` is tritonclient's `client.get_model_config(m).config`.
        """
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
        classes: Mapping[str, int] | None = None,
    ) -> InferResult:
        """Run one inference. outputs: names to return (None = all); raw=False sends typed
        `contents` instead of raw bytes (not possible for FP16/BF16).

        classes: Triton's classification extension, output name -> k (tritonclient's
        `InferRequestedOutput(name, class_count=k)`): those outputs come back as BYTES arrays
        of the top k entries `b"value:index[:label]"` (per batch row when the model's batch
        axis is known). They are requested besides `outputs`; a request that names outputs
        gets only those, so with `outputs=None` only the `classes` outputs come back.

        Shared memory (server on this host with the extension on, regions registered with
        `register_system_shared_memory`): inputs named in `shared_memory_inputs` are written
        into their region and sent by reference; outputs named in `shared_memory_outputs` are
        requested into their region (from the offset to its end) and read back from it.
        """
        request, resolve = _infer_request(
            model, inputs, outputs=outputs, version=version, request_id=request_id, raw=raw,
            parameters=parameters, shared_memory_inputs=shared_memory_inputs,
            shared_memory_outputs=shared_memory_outputs, classes=classes)
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
                yield _stream_result(message, raise_errors)
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
