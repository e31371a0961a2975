"""The Open Inference Protocol servicer: each RPC is convert (codecs) -> core -> convert.

No error handling here beyond what the protocol itself defines (a failed request inside
ModelStreamInfer is answered in `error_message` and the stream continues, as Triton does);
exceptions are turned into statuses by `jaxport.bridge.status`, the one place for that.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import grpc
from jaxport.bridge import messages
from jaxport.bridge.inference import InferenceCore, Started
from jaxport.bridge.limits import deadline_from_remaining
from jaxport.bridge.model import Model, Prepared, TensorSig
from jaxport.bridge.repository import Repository
from jaxport.bridge.shared_memory import EXTENSION as SHARED_MEMORY_EXTENSION
from jaxport.bridge.shared_memory import SharedMemoryRegistry, disabled_error
from jaxport.bridge.statistics import Duration
from jaxport.bridge.status import status_of
from jaxport.protocol import codecs
from jaxport.protocol.errors import InvalidArgumentError, NotFoundError, clip
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2 as mc

SERVER_NAME = "jaxport"
PLATFORM = "jax"
# Only what this server really implements (Triton extension names); "system_shared_memory"
# is added when the server runs with --system-shared-memory.
EXTENSIONS = ("model_repository", "model_configuration", "statistics")
# CUDA shared memory: this server has no CUDA devices, so (as a Triton built without GPU
# support) no region can be registered; status lists none and unregistering is a no-op.
NO_CUDA = "this server has no CUDA devices"
# Triton's classification extension (`classification` on a requested output): listed by this
# servicer; kept out of EXTENSIONS, which other front ends filter to their own set.
CLASSIFICATION_EXTENSION = "classification"


def _server_version() -> str:
    try:
        return importlib.metadata.version("jaxport")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


class ServerState:
    """Liveness/readiness flags: ready after the initial load, not ready while draining."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._draining = threading.Event()

    @property
    def ready(self) -> bool:
        """ServerReady."""
        return self._ready.is_set() and not self._draining.is_set()

    def set_ready(self) -> None:
        """The initial repository load finished."""
        self._ready.set()

    def set_draining(self) -> None:
        """Shutdown began: report not ready so balancers stop sending new work."""
        self._draining.set()


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def _tensor_metadata(sig: TensorSig) -> pb.ModelMetadataResponse.TensorMetadata:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=sig.name, datatype=sig.datatype, shape=list(sig.shape)
    )


def _size_parameters(model: Model) -> dict[str, str]:
    """ModelConfig parameters naming the sizes a model with symbolic dimensions runs, which
    ModelMetadata's -1 cannot say (docs/bridge.md, "Symbolic dimensions"): `dims`, every
    dimension's rule in the `--dim` syntax (`B=1..64,T=8..2048:8`), on every engine; with bucket
    programs (`--engine pjrt`) `buckets`, the only sizes served (`B=2,T=16;B=2,T=32`), and
    `padding`, the dimensions a shorter request is padded along up to a bucket and the mask
    input marking the padding (`T=attention_mask`). Empty for a fixed-shape model."""
    dimensions = model.manifest.dimensions
    if not dimensions:
        return {}
    params = {"dims": ",".join(
        f"{d.name}={d.min}..{d.max}" + (f":{d.multiple_of}" if d.multiple_of > 1 else "")
        for d in dimensions)}
    order = [d.name for d in dimensions]
    buckets = sorted({tuple(p.dims[n] for n in order) for p in model.programs.values()
                      if p.dims})
    if buckets:
        params["buckets"] = ";".join(",".join(f"{n}={v}" for n, v in zip(order, sizes,
                                                                          strict=True))
                                     for sizes in buckets)
        if model.manifest.padding:
            params["padding"] = ",".join(f"{p.dim}={p.mask_input}"
                                         for p in model.manifest.padding)
    return params


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """`inference.GRPCInferenceService` over a Repository and an InferenceCore.

    `shared_memory`: the registry of system shared-memory regions, or None when the extension
    is disabled (every use then fails FAILED_PRECONDITION naming the flag).
    """

    def __init__(self, repository: Repository, core: InferenceCore, state: ServerState,
                 shared_memory: SharedMemoryRegistry | None = None) -> None:
        self._repo = repository
        self._core = core
        self._state = state
        self._version = _server_version()
        self._shm = shared_memory
        self._extensions = [*EXTENSIONS, CLASSIFICATION_EXTENSION,
                            *([SHARED_MEMORY_EXTENSION] if shared_memory else [])]

    # -- health and metadata ---------------------------------------------------------------

    def ServerLive(self, request: pb.ServerLiveRequest, context: grpc.ServicerContext
                   ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request: pb.ServerReadyRequest, context: grpc.ServicerContext
                    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._state.ready)

    def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.ServicerContext
                   ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=self._repo.is_ready(request.name, request.version))

    def ServerMetadata(self, request: pb.ServerMetadataRequest, context: grpc.ServicerContext
                       ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(
            name=SERVER_NAME, version=self._version, extensions=self._extensions
        )

    def ModelMetadata(self, request: pb.ModelMetadataRequest, context: grpc.ServicerContext
                      ) -> pb.ModelMetadataResponse:
        model = self._repo.get(request.name, request.version)
        if request.version:
            versions = [str(model.version)]
        else:
            versions = [str(s.version) for s in self._repo.statuses(model.name)
                        if s.model is not None and s.state == "READY"]
        return pb.ModelMetadataResponse(
            name=model.name,
            versions=versions,
            platform=PLATFORM,
            inputs=[_tensor_metadata(s) for s in model.inputs],
            outputs=[_tensor_metadata(s) for s in model.outputs],
        )

    def ModelConfig(self, request: pb.ModelConfigRequest, context: grpc.ServicerContext
                    ) -> pb.ModelConfigResponse:
        model = self._repo.get(request.name, request.version)
        batched = bool(model.batch_sizes)

        def dims(sig: TensorSig) -> list[int]:
            return list(sig.shape[1:] if batched and sig.shape and sig.shape[0] == -1
                        else sig.shape)

        def data_type(sig: TensorSig) -> int:
            return mc.DataType.Value("TYPE_" + sig.datatype)

        # Triton's label_filename: the output's labels file (artifact-relative) when its labels
        # were read, i.e. when classification answers `value:index:label`.
        label_files = {o.name: o.labels_file for o in model.manifest.outputs
                       if o.labels_file and o.name in model.labels}
        config = mc.ModelConfig(
            name=model.name,
            platform=PLATFORM,
            backend=f"jaxport-{model.engine_name}",
            max_batch_size=max(model.batch_sizes) if batched else 0,
            input=[mc.ModelInput(name=s.name, data_type=data_type(s), dims=dims(s))
                   for s in model.inputs],
            output=[mc.ModelOutput(name=s.name, data_type=data_type(s), dims=dims(s),
                                   label_filename=label_files.get(s.name, ""))
                    for s in model.outputs],
        )
        config.parameters["engine"].string_value = model.engine_name
        config.parameters["schema_version"].string_value = str(model.manifest.schema_version)
        for key, value in _size_parameters(model).items():
            config.parameters[key].string_value = value
        if model.directory is not None:  # for the front's native engine, which strips it
            config.parameters["artifact"].string_value = model.directory
        if model.batcher is not None:  # as Triton reports it; the native front routes by it
            batching = model.batcher.config
            config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
            config.dynamic_batching.max_queue_delay_microseconds = batching.max_queue_delay_us
        return pb.ModelConfigResponse(config=config)

    def ModelStatistics(self, request: pb.ModelStatisticsRequest,
                        context: grpc.ServicerContext) -> pb.ModelStatisticsResponse:
        if request.name:
            if request.version:
                models = [self._repo.get(request.name, request.version)]
            else:
                self._repo.get(request.name)  # NOT_FOUND / UNAVAILABLE as for any request
                models = [s.model for s in self._repo.statuses(request.name)
                          if s.model is not None and s.state == "READY"]
        else:
            models = self._repo.ready_models()
        response = pb.ModelStatisticsResponse()
        dur = _duration
        for model in models:
            s = model.statistics.snapshot()
            response.model_stats.add(
                name=model.name,
                version=str(model.version),
                last_inference=s.last_inference_ms,
                inference_count=s.inference_count,
                execution_count=s.execution_count,
                inference_stats=pb.InferStatistics(
                    success=dur(s.success), fail=dur(s.fail), queue=dur(s.queue),
                    compute_input=dur(s.compute_input), compute_infer=dur(s.compute_infer),
                    compute_output=dur(s.compute_output),
                ),
                batch_stats=[
                    pb.InferBatchStatistics(
                        batch_size=b.batch_size, compute_input=dur(b.compute_input),
                        compute_infer=dur(b.compute_infer), compute_output=dur(b.compute_output))
                    for b in s.batches
                ],
            )
        return response

    # -- repository ------------------------------------------------------------------------

    def RepositoryIndex(self, request: pb.RepositoryIndexRequest,
                        context: grpc.ServicerContext) -> pb.RepositoryIndexResponse:
        if request.repository_name:
            raise NotFoundError(
                f"unknown repository '{clip(request.repository_name)}': this server has one "
                "repository; send an empty repository_name"
            )
        response = pb.RepositoryIndexResponse()
        for s in self._repo.index(ready_only=request.ready):
            response.models.add(name=s.name, version=str(s.version) if s.version else "",
                                state=s.state, reason=s.reason)
        return response

    def RepositoryModelLoad(self, request: pb.RepositoryModelLoadRequest,
                            context: grpc.ServicerContext) -> pb.RepositoryModelLoadResponse:
        if request.repository_name:
            raise NotFoundError(f"unknown repository '{clip(request.repository_name)}'")
        if request.parameters:
            names = clip(", ".join(sorted(request.parameters)))
            raise InvalidArgumentError(
                f"load parameters are not supported (got: {names}): Triton's 'config' override "
                "and 'file:' uploads are refused here, because the artifact's manifest is the "
                "model configuration and its files are checksummed by the exporter; put a new "
                "version directory in the repository and load the model without parameters "
                "(docs/bridge.md, Model repository)"
            )
        self._repo.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    def RepositoryModelUnload(self, request: pb.RepositoryModelUnloadRequest,
                              context: grpc.ServicerContext
                              ) -> pb.RepositoryModelUnloadResponse:
        if request.repository_name:
            raise NotFoundError(f"unknown repository '{clip(request.repository_name)}'")
        self._repo.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()

    # -- system shared memory ----------------------------------------------------------------

    def _registry(self, what: str) -> SharedMemoryRegistry:
        if self._shm is None:
            raise disabled_error(what)
        return self._shm

    def _resolve(self, kind: str, tensor: str, ref: codecs.SharedMemoryRef) -> memoryview:
        """The codecs' SharedMemoryResolver: the registry's bytes, or the disabled error."""
        return self._registry(f"{kind} '{clip(tensor)}' uses shared memory").resolve(
            kind, tensor, ref)

    def SystemSharedMemoryStatus(self, request: pb.SystemSharedMemoryStatusRequest,
                                 context: grpc.ServicerContext
                                 ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for r in self._registry("SystemSharedMemoryStatus").status(request.name):
            response.regions[r.name].CopyFrom(pb.SystemSharedMemoryStatusResponse.RegionStatus(
                name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size))
        return response

    def SystemSharedMemoryRegister(self, request: pb.SystemSharedMemoryRegisterRequest,
                                   context: grpc.ServicerContext
                                   ) -> pb.SystemSharedMemoryRegisterResponse:
        self._registry("SystemSharedMemoryRegister").register(
            request.name, request.key, request.offset, request.byte_size)
        return pb.SystemSharedMemoryRegisterResponse()

    def SystemSharedMemoryUnregister(self, request: pb.SystemSharedMemoryUnregisterRequest,
                                     context: grpc.ServicerContext
                                     ) -> pb.SystemSharedMemoryUnregisterResponse:
        self._registry("SystemSharedMemoryUnregister").unregister(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # -- CUDA shared memory: answered as a Triton built without GPU support ---------------------

    def CudaSharedMemoryStatus(self, request: pb.CudaSharedMemoryStatusRequest,
                               context: grpc.ServicerContext
                               ) -> pb.CudaSharedMemoryStatusResponse:
        if request.name:  # Triton's shared-memory manager: a named region it does not hold
            raise NotFoundError(
                f"Unable to find cuda shared memory region: '{clip(request.name)}' "
                f"({NO_CUDA})")
        return pb.CudaSharedMemoryStatusResponse()

    def CudaSharedMemoryRegister(self, request: pb.CudaSharedMemoryRegisterRequest,
                                 context: grpc.ServicerContext
                                 ) -> pb.CudaSharedMemoryRegisterResponse:
        raise InvalidArgumentError(
            f"failed to register CUDA shared memory region: '{clip(request.name)}', GPUs not "
            f"supported ({NO_CUDA}; use system shared memory: --system-shared-memory)")

    def CudaSharedMemoryUnregister(self, request: pb.CudaSharedMemoryUnregisterRequest,
                                   context: grpc.ServicerContext
                                   ) -> pb.CudaSharedMemoryUnregisterResponse:
        return pb.CudaSharedMemoryUnregisterResponse()  # nothing can be registered

    # -- inference -------------------------------------------------------------------------

    def _infer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext
               ) -> pb.ModelInferResponse:
        return self._respond(request, *self._begin(request, context))

    def joins_batch(self, request: pb.ModelInferRequest) -> bool:
        """Whether this ModelInfer request goes to its model's dynamic batcher (False for a
        model that cannot be had: ModelInfer itself answers that)."""
        try:
            model = self._repo.get(request.model_name, request.model_version)
        except Exception:
            return False
        return model.batcher is not None

    def infer_together(self, calls: Sequence[tuple[pb.ModelInferRequest, grpc.ServicerContext]]
                       ) -> list[pb.ModelInferResponse | Exception]:
        """ModelInfer for calls that arrived together (`jaxport.bridge.worker`: frames read
        at once): every request is started before any is waited for, so those for one
        model's dynamic batcher join its queue together instead of one thread each, then
        each is finished in order. Per call exactly what ModelInfer answers, or the exception
        it would raise."""
        begun: list[tuple[Any, ...] | Exception] = []
        for request, context in calls:
            try:
                begun.append((request, *self._begin(request, context)))
            except Exception as exc:
                begun.append(exc)
        out: list[pb.ModelInferResponse | Exception] = []
        for item in begun:
            if isinstance(item, Exception):
                out.append(item)
                continue
            try:
                out.append(self._respond(*item))
            except Exception as exc:
                out.append(exc)
        return out

    def _begin(self, request: pb.ModelInferRequest, context: grpc.ServicerContext
               ) -> tuple[Model, dict[str, messages.SharedMemoryOutput], Started]:
        model = self._repo.get(request.model_name, request.model_version)
        placed: dict[str, messages.SharedMemoryOutput] = {}

        def prepare() -> Prepared:
            return _prepare(model, request, self._resolve, placed)

        started = self._core.start(
            model, prepare,
            deadline=deadline_from_remaining(context.time_remaining()),
            is_active=context.is_active,
        )
        return model, placed, started

    @staticmethod
    def _respond(request: pb.ModelInferRequest, model: Model,
                 placed: dict[str, messages.SharedMemoryOutput], started: Started
                 ) -> pb.ModelInferResponse:
        return messages.encode_infer_response(
            started.finish(), model_name=model.name, model_version=str(model.version),
            request_id=request.id, shared_memory=placed,
        )

    def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext
                   ) -> pb.ModelInferResponse:
        return self._infer(request, context)

    def ModelStreamInfer(self, request_iterator: Iterable[pb.ModelInferRequest],
                         context: grpc.ServicerContext
                         ) -> Iterator[pb.ModelStreamInferResponse]:
        for request in request_iterator:
            try:
                _wants_final_flag(request)  # a malformed flag fails the request, not the stream
                response = self._infer(request, context)
            except Exception as exc:
                code, details = status_of(exc, "/inference.GRPCInferenceService/ModelStreamInfer")
                failed = pb.ModelStreamInferResponse(
                    error_message=f"{code.name}: {details}",
                    infer_response=pb.ModelInferResponse(
                        model_name=request.model_name, model_version=request.model_version,
                        id=request.id,
                    ),
                )
                _mark_final(failed.infer_response, request)
                yield failed
            else:
                _mark_final(response, request)
                yield pb.ModelStreamInferResponse(infer_response=response)


ENABLE_EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"


def _wants_final_flag(request: pb.ModelInferRequest) -> bool:
    """Triton's `triton_enable_empty_final_response` (bool) request parameter: the caller
    (tritonclient's `enable_empty_final_response=True`, decoupled-aware clients) wants every
    stream response to say whether it is the request's last. INVALID_ARGUMENT if not a bool."""
    param = request.parameters.get(ENABLE_EMPTY_FINAL_RESPONSE)
    if param is None:
        return False
    if param.WhichOneof("parameter_choice") != "bool_param":
        raise InvalidArgumentError(
            f"invalid value type for '{ENABLE_EMPTY_FINAL_RESPONSE}' parameter, expected "
            "bool_param"
        )
    return param.bool_param


def _mark_final(response: pb.ModelInferResponse, request: pb.ModelInferRequest) -> None:
    """`triton_final_response: true` on the request's one response (models here are never
    decoupled: the one response is also the last, so no empty response follows it)."""
    param = request.parameters.get(ENABLE_EMPTY_FINAL_RESPONSE)
    if param is not None and param.WhichOneof("parameter_choice") == "bool_param" \
            and param.bool_param:
        response.parameters[FINAL_RESPONSE].bool_param = True


def _prepare(model: Model, request: pb.ModelInferRequest, resolve: codecs.SharedMemoryResolver,
             placed: dict[str, messages.SharedMemoryOutput]) -> Prepared:
    """The request validated once by `Model.prepare`: each input's header checked against the
    model before it is decoded (the codecs check the bytes), then the requested outputs.

    Requested outputs bound for shared memory are resolved into `placed` here, before any
    work, and checked against the model's output size when it is fixed.
    """
    if not request.outputs:  # all outputs, none classified or in shared memory (the usual)
        return model.prepare(
            [(t.name, t.datatype, t.shape) for t in request.inputs],
            lambda: messages.decode_request_inputs(request, resolve))
    prepared = model.prepare(
        [(t.name, t.datatype, t.shape) for t in request.inputs],
        lambda: messages.decode_request_inputs(request, resolve),
        messages.requested_output_names(request),
        messages.requested_classifications(request),
    )
    placed.update(messages.requested_shared_memory_outputs(request, resolve))
    for sig in model.outputs:
        if sig.name in placed and all(d >= 0 for d in sig.shape):
            codecs.check_output_fits(sig.name, sig.datatype, sig.shape, placed[sig.name].ref)
    return prepared
