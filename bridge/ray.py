"""The bridge as a Ray Serve application: `serve run jaxport.bridge.ray:app repository=DIR`.

Each replica hosts the same model core as `jaxport serve` (Repository + InferenceCore +
InferenceServicer, no grpc server of its own); Serve's gRPC proxy receives the Open Inference
Protocol calls (`inference.GRPCInferenceService`, registered through
`grpc_options.grpc_servicer_functions` = `SERVICER_FUNCTION`) and hands each one to a replica
method named after the RPC. tritonclient, the jaxport clients and the conformance runners call
the proxy's port unchanged (see docs/scale-out.md).

Errors: a replica method never lets an exception reach Serve (Serve would answer INTERNAL with
the whole Ray traceback). It maps it with `jaxport.bridge.status.status_of`, the bridge's one
error table, and sets the status on Serve's `grpc_context`: same codes and messages as
`jaxport serve`.

What a replica refuses, because a call reaches ONE replica of many (UNIMPLEMENTED, the message
says why and what to do instead): `RepositoryModelLoad`/`RepositoryModelUnload` (they would
change one replica only) and the system shared memory RPCs (the caller's /dev/shm is not the
replica's host). Everything else is answered by the replica that gets the call; statistics are
that replica's own.

Ray is imported only here and only when this module is used (`pip install 'jaxport[ray]'`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import types
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
from jaxport.protocol.errors import Code, ProtocolError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2 as mc
from ray import serve

# Serve's proxy pickles each request message to hand it to a replica. Pickle finds a class by
# its __module__, and the generated code names its messages' module 'inference.grpc_service_pb2'
# (the proto's own path; the files live in jaxport.protocol.gen.inference), which no process
# can import: without these aliases every call fails "Can't pickle <class
# 'inference.grpc_service_pb2.ServerReadyRequest'>". This module is what the proxy imports
# (SERVICER_FUNCTION) and what every replica imports (the deployment class), so both sides
# have them. (The lasting fix belongs in proto/generate.py: docs/scale-out.md.)
_package = sys.modules.setdefault("inference", types.ModuleType("inference"))
for _module in (pb, mc):
    _alias = _module.DESCRIPTOR.name.removesuffix(".proto").replace("/", ".") + "_pb2"
    sys.modules.setdefault(_alias, _module)
    setattr(_package, _alias.rpartition(".")[2], _module)

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
SERVICER_FUNCTION = "jaxport.bridge.ray.add_servicer_to_server"
"""What Serve's `grpc_options.grpc_servicer_functions` must list (config file or serve.start):
the generated `add_GRPCInferenceServiceServicer_to_server`, imported through this module so the
proxy gets the pickling aliases above. Light: no JAX, no model core in the proxy."""


def add_servicer_to_server(servicer: Any, server: Any) -> None:
    """Registers `inference.GRPCInferenceService` with Serve's gRPC proxy."""
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)

# Trailing metadata each answer carries: which replica and which Ray node served the call (how
# a caller, and tests/scale, see the load spread over the cluster).
REPLICA_KEY = "jaxport-replica"
NODE_KEY = "jaxport-node"

# Settings of `jaxport serve` that mean the same thing inside a replica; the rest (ports, TLS,
# auth, metrics, shared memory, drain) belong to Serve's proxy and cluster, not to a replica.
MODEL_SETTINGS = (
    "engine", "compiled_shapes", "model_version_policy", "max_inflight_per_model",
    "max_queue_per_model",
    "batching", "max_queue_delay_us", "preferred_batch_sizes", "batch_queue_size",
    "batching_models", "log_level", "model_name",
)
# Arguments of the app builder that configure the Serve deployment itself (passed through).
DEPLOYMENT_OPTIONS = (
    "num_replicas", "autoscaling_config", "ray_actor_options", "max_ongoing_requests",
    "max_queued_requests", "health_check_period_s", "health_check_timeout_s",
    "graceful_shutdown_timeout_s", "max_replicas_per_node",
)
DEFAULT_MAX_ONGOING_REQUESTS = 16
# Extensions `jaxport serve` may list that a replica does not claim (their RPCs are refused).
REFUSED_EXTENSIONS = ("model_repository", "system_shared_memory")


class UnsupportedUnderServe(ProtocolError):
    """An RPC whose meaning cannot hold when calls are spread over replicas."""

    code = Code.UNIMPLEMENTED


def _refused(rpc: str, why: str) -> UnsupportedUnderServe:
    return UnsupportedUnderServe(f"{rpc} is not supported by jaxport on Ray Serve: {why}")


_REPOSITORY_WHY = (
    "a call reaches one replica of many, so it would change that replica only; change the "
    "repository directory and redeploy the application (serve deploy / serve run) instead")
_SHM_WHY = (
    "replicas run on other hosts than the caller, so they cannot see its /dev/shm; send "
    "tensors in the request")


def _replica_servicer_class() -> type:
    """The bridge's servicer with what cannot hold across replicas refused (see module doc).
    Built in the replica: the servicer module brings the model core (JAX) with it."""
    from jaxport.bridge.servicer import InferenceServicer

    class ReplicaServicer(_Refusals, InferenceServicer):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            # No model_repository: load/unload are refused (RepositoryIndex still answers).
            self._extensions = [e for e in self._extensions if e not in REFUSED_EXTENSIONS]

    return ReplicaServicer


class _Refusals:
    """The RPCs a replica refuses (UNIMPLEMENTED, saying why)."""

    def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        raise _refused("RepositoryModelLoad", _REPOSITORY_WHY)

    def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        raise _refused("RepositoryModelUnload", _REPOSITORY_WHY)

    def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        raise _refused("SystemSharedMemoryStatus", _SHM_WHY)

    def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        raise _refused("SystemSharedMemoryRegister", _SHM_WHY)

    def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        raise _refused("SystemSharedMemoryUnregister", _SHM_WHY)


class _CallContext:
    """The part of `grpc.ServicerContext` the servicer uses, for a call that Serve's proxy
    received: no deadline reaches the replica (Serve's `request_timeout_s` bounds the call
    instead) and the caller is taken as present until the call ends."""

    def __init__(self) -> None:
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def time_remaining(self) -> float | None:
        return None

    def is_active(self) -> bool:
        return True

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details
        raise grpc.RpcError(details)

    def invocation_metadata(self) -> tuple[()]:
        return ()


def _status(exc: BaseException, ctx: _CallContext, method: str) -> tuple[grpc.StatusCode, str]:
    """The status `jaxport serve` gives: the code a handler set (as grpc keeps it), else the
    one error table."""
    from jaxport.bridge.status import status_of

    if ctx.code() not in (None, grpc.StatusCode.OK):
        return ctx.code(), ctx.details()  # type: ignore[return-value]
    return status_of(exc, method)


def _unary(name: str, response_type: type) -> Callable[..., Any]:
    method = f"/{SERVICE.full_name}/{name}"

    async def rpc(self: OIPDeployment, request: Any, grpc_context: Any) -> Any:
        ctx = _CallContext()
        try:
            response = await asyncio.to_thread(self._call, name, request, ctx)
        except Exception as exc:
            code, details = _status(exc, ctx, method)
            grpc_context.set_code(code)
            grpc_context.set_details(details)
            response = response_type()
        self._tag(grpc_context)
        return response

    rpc.__name__ = rpc.__qualname__ = name
    return rpc


class OIPDeployment:
    """One replica: the model core of `jaxport serve`, answering each OIP RPC by its name.

    Models load in the constructor, so Serve reports the replica RUNNING only once the
    repository is loaded (failed models are reported per model, as in `jaxport serve`).
    """

    def __init__(self, repository: str, settings: Mapping[str, Any] | None = None) -> None:
        # Imported here: the model core (JAX) lives in the replicas, not in the process that
        # builds the application.
        from jaxport.artifact.location import is_url
        from jaxport.bridge.core import build_core, load_all, prepare_process
        from jaxport.bridge.settings import Settings

        # A URL (http(s)://, file://) stays a string: every replica reads the repository
        # itself (jaxport.bridge.repository), no file system shared by the nodes needed.
        config = Settings(repository=repository if is_url(repository) else Path(repository),
                          **dict(settings or {}))
        prepare_process(config)  # as `jaxport serve`: logs, JAX settings, heap settings
        core = build_core(config, _replica_servicer_class())  # the core of `jaxport serve`
        self._repository, self._servicer = core.repository, core.servicer
        load_all(core.repository, core.state)
        try:
            import ray

            context = serve.get_replica_context()
            self._replica = context.replica_id.unique_id
            self._node = ray.get_runtime_context().get_node_id()
        except Exception:  # outside a Serve replica (unit use): name the process instead
            self._replica, self._node = f"pid-{os.getpid()}", "local"

    def _call(self, name: str, request: Any, ctx: _CallContext) -> Any:
        return getattr(self._servicer, name)(request, ctx)

    def _tag(self, grpc_context: Any) -> None:
        grpc_context.set_trailing_metadata([(REPLICA_KEY, self._replica), (NODE_KEY, self._node)])

    async def ModelStreamInfer(self, requests: AsyncIterator[pb.ModelInferRequest],
                               grpc_context: Any) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """One response per request, in order, a failed request answered in `error_message`
        and the stream going on: the servicer's own stream loop, one request at a time (the
        stream stays on this replica)."""
        self._tag(grpc_context)
        async for request in requests:
            ctx = _CallContext()
            responses = await asyncio.to_thread(
                lambda r=request, c=ctx: list(self._servicer.ModelStreamInfer(iter([r]), c)))
            for response in responses:
                yield response


for _method in SERVICE.methods:
    if not _method.client_streaming and not _method.server_streaming:
        setattr(OIPDeployment, _method.name,
                _unary(_method.name, getattr(pb, _method.output_type.name)))
# Every RPC of the service is answered by the deployment (unsupported ones: UNIMPLEMENTED).
assert all(hasattr(OIPDeployment, m.name) for m in SERVICE.methods)
assert all(hasattr(pb_grpc.GRPCInferenceServiceServicer, m.name) for m in SERVICE.methods)


def _typed(name: str, value: Any, kind: type) -> Any:
    """`serve run ... key=value` passes strings; a config file passes YAML values."""
    if isinstance(value, str) and kind is not str:
        if kind is bool:
            return value.strip().lower() in ("1", "true", "yes", "on")
        if kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}") from None
        import json

        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{name}: expected JSON, got {value!r}") from None
    return value


_OPTION_TYPES: dict[str, type] = {
    "num_replicas": int, "autoscaling_config": dict, "ray_actor_options": dict,
    "max_ongoing_requests": int, "max_queued_requests": int, "health_check_period_s": float,
    "health_check_timeout_s": float, "graceful_shutdown_timeout_s": float,
    "max_replicas_per_node": int,
}


def _model_settings(args: Mapping[str, Any]) -> dict[str, Any]:
    """Model-core settings from builder args, parsed as `jaxport serve` parses its flags."""
    from jaxport.bridge.settings import Settings

    fields = {f.name: f for f in dataclasses.fields(Settings)}
    out: dict[str, Any] = {}
    for key in MODEL_SETTINGS:
        if key not in args:
            continue
        value = args[key]
        parse = fields[key].metadata.get("parse")
        if isinstance(value, str) and parse is not None:
            value = parse(value)
        elif isinstance(value, str) and isinstance(fields[key].default, bool):
            value = _typed(key, value, bool)
        elif isinstance(value, str) and isinstance(fields[key].default, int):
            value = _typed(key, value, int)
        elif isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return out


def app(args: Mapping[str, Any]) -> serve.Application:
    """The application builder: `serve run jaxport.bridge.ray:app repository=DIR [key=value]`.

    `repository` (required): the model repository (`DIR/<model>/<version>/`), a path every
    node can read, or an `http(s)://` URL of one (listed by its index.json) that every
    replica reads for itself. Model-core settings as in `jaxport serve` (`MODEL_SETTINGS`: engine,
    model_version_policy, max_inflight_per_model, batching...). Deployment options passed to
    Serve (`DEPLOYMENT_OPTIONS`): num_replicas, autoscaling_config, ray_actor_options,
    max_ongoing_requests (default 16), ... Unknown keys are refused (a typo must not be
    silently ignored).
    """
    args = dict(args)
    repository = args.pop("repository", None)
    if not repository:
        raise ValueError("jaxport.bridge.ray:app needs repository=DIR (DIR/<model>/<version>/)")
    unknown = sorted(set(args) - set(MODEL_SETTINGS) - set(DEPLOYMENT_OPTIONS))
    if unknown:
        raise ValueError(f"jaxport.bridge.ray:app: unknown argument(s) {unknown}; known: "
                         f"repository, {', '.join(MODEL_SETTINGS + DEPLOYMENT_OPTIONS)}")
    settings = _model_settings(args)
    options: dict[str, Any] = {"max_ongoing_requests": DEFAULT_MAX_ONGOING_REQUESTS}
    for key in DEPLOYMENT_OPTIONS:
        if key in args:
            options[key] = _typed(key, args[key], _OPTION_TYPES[key])
    if "autoscaling_config" in options:
        options.pop("num_replicas", None)
    deployment = serve.deployment(name="jaxport")(OIPDeployment)
    return deployment.options(**options).bind(str(repository), settings)
