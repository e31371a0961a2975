"""jaxport on Ray Serve: every replica runs a `jaxport-front`, and clients call the fronts.

    serve run bridge/deploy/ray/serve.yaml                         # or serve deploy / serve.run
    python -m jaxport.bridge.ray addresses --address auto          # the fronts' gRPC addresses

Serve (or Ray) places the replicas, health-checks and restarts them and scales them; each
replica starts one front (`jaxport-front`, the one server: native engine, repository, every
serving rule; Python workers only for models the native engine cannot run) on a free port of
its node and registers the front's addresses in a small registry actor. Callers reach the
fronts directly over gRPC, balancing on their side (`round_robin` over the addresses; see
docs/scale-out.md for Go, Java and Python): no Python hop on the data path.

Serve's gRPC proxy is kept as a convenience (one address, no balancing code in the caller):
the deployment answers each OIP RPC by forwarding it to the replica's own front and handing the
front's answer (or status) back. It costs a Python hop and Serve's proxy per call, and it
refuses what cannot hold when consecutive calls reach different replicas:
RepositoryModelLoad/Unload (they would change one replica) and the system shared memory RPCs
(the caller's /dev/shm is not the replica's), with UNIMPLEMENTED saying why.

Serve's HTTP proxy answers GET on the application's route with the registry as JSON (any
language can read the addresses from there).

Ray is imported only by this module (`pip install 'jaxport[ray]'`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from jaxport.protocol.gen.inference import model_config_pb2 as mc

# Serve's proxy pickles each request message to hand it to a replica. Pickle finds a class by
# its __module__, and the generated code names its messages' module 'inference.grpc_service_pb2'
# (the proto's own path; the files live in jaxport.protocol.gen.inference), which no process
# can import: without these aliases every call fails "Can't pickle <class
# 'inference.grpc_service_pb2.ServerReadyRequest'>". This module is what the proxy imports
# (SERVICER_FUNCTION) and what every replica imports (the deployment class), so both sides
# have them.
_package = sys.modules.setdefault("inference", types.ModuleType("inference"))
for _module in (pb, mc):
    _alias = _module.DESCRIPTOR.name.removesuffix(".proto").replace("/", ".") + "_pb2"
    sys.modules.setdefault(_alias, _module)
    setattr(_package, _alias.rpartition(".")[2], _module)

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
SERVICER_FUNCTION = "jaxport.bridge.ray.add_servicer_to_server"
"""What Serve's `grpc_options.grpc_servicer_functions` must list (config file or serve.start):
the generated `add_GRPCInferenceServiceServicer_to_server`, imported through this module so the
proxy gets the pickling aliases above."""


def add_servicer_to_server(servicer: Any, server: Any) -> None:
    """Registers `inference.GRPCInferenceService` with Serve's gRPC proxy."""
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)


#: Trailing metadata of each answer through Serve's proxy: which replica and which Ray node
#: served it.
REPLICA_KEY = "jaxport-replica"
NODE_KEY = "jaxport-node"
#: The registry's actor name (one per application) and namespace.
REGISTRY_NAMESPACE = "jaxport"
APP_NAME = "jaxport"

#: Builder arguments that configure the Serve deployment itself (passed to Serve).
DEPLOYMENT_OPTIONS: dict[str, type] = {
    "num_replicas": int, "autoscaling_config": dict, "ray_actor_options": dict,
    "max_ongoing_requests": int, "max_queued_requests": int, "health_check_period_s": float,
    "health_check_timeout_s": float, "graceful_shutdown_timeout_s": float,
    "max_replicas_per_node": int,
}
#: Serve's proxy path only: calls one replica holds at once. The direct path has no such
#: bound (the front's own admission, --max-inflight-per-model / --max-queue-per-model).
DEFAULT_MAX_ONGOING_REQUESTS = 16
#: Builder arguments the replica sets itself (a front per replica on a port of its node).
REPLICA_OWNED = {
    "port_file": "the replica writes and reads its front's port file itself",
    "worker_python": "the replica's own Python runs the workers",
}
#: How long start-up may take (every model loaded and compiled) before the replica gives up.
START_TIMEOUT_S = 600.0
#: Serve's default health check period; registry entries live for 3 periods + Serve's timeout
#: without a check refreshing them.
DEFAULT_HEALTH_CHECK_PERIOD_S = 10.0
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 30.0


def _flag_args(flags: Mapping[str, Any]) -> list[str]:
    """`jaxport serve` flags from builder arguments: `max_inflight_per_model: 8` ->
    `--max-inflight-per-model=8`, True/False -> `=true`/`=false`, a list -> the flag once per
    item (`load_model: [a, b]`). The front checks them (one line naming the flag)."""
    out: list[str] = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        values = value if isinstance(value, list | tuple) else [value]
        for v in values:
            if isinstance(v, bool):
                v = "true" if v else "false"
            out.append(f"{flag}={v}")
    return out


def front_command(binary: Path | str, repository: str, *, host: str, port: int, http_port: int,
                  metrics_port: int, port_file: Path, flags: Sequence[str] = ()) -> list[str]:
    """The replica's front: the repository, its node's address and ports, the port file it
    reads, its own Python for the workers, then the user's flags."""
    return [str(binary), "--repository", repository, "--host", host, "--port", str(port),
            "--http-port", str(http_port), "--metrics-port", str(metrics_port),
            "--port-file", str(port_file), "--worker-python", sys.executable, *flags]


def _die_with_parent() -> None:
    """In the front's child process, before exec: SIGKILL when the thread that started it ends
    (the replica's supervisor thread, which lives as long as the replica process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


class FrontProcess:
    """One `jaxport-front` child: started by a supervisor thread (so the child dies with this
    process, PDEATHSIG), its stderr forwarded to ours with the last lines kept for errors, its
    port file read once it listens, its health waited on."""

    def __init__(self, command: list[str], port_file: Path) -> None:
        self.command = command
        self.port_file = port_file
        self.tail: collections.deque[str] = collections.deque(maxlen=20)
        self._started = threading.Event()
        self._exited = threading.Event()
        self._error: BaseException | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        threading.Thread(target=self._supervise, name="jaxport-front", daemon=True).start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    def _supervise(self) -> None:
        try:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        except OSError as exc:
            self._error = RuntimeError(f"cannot start {self.command[0]}: {exc}")
            self._started.set()
            return
        self._started.set()
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.tail.append(line)
            print(line, file=sys.stderr, flush=True)
        self.proc.wait()
        self._exited.set()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_problem(self) -> str:
        """Why the front stopped: its exit status and its one error line (or last line)."""
        code = None if self.proc is None else self.proc.poll()
        errors = [ln for ln in self.tail if ": error: " in ln] or list(self.tail)[-1:]
        return f"jaxport-front exited with status {code}: {errors[-1] if errors else ''}"

    def wait_listening(self, timeout_s: float) -> dict[str, int]:
        """The bound ports (`--port-file`), waiting until the front wrote them or exited."""
        deadline = time.monotonic() + timeout_s
        while not self.port_file.exists():
            if self._exited.wait(0.05):
                raise RuntimeError(self.exit_problem())
            if time.monotonic() > deadline:
                raise TimeoutError(f"jaxport-front did not listen within {timeout_s:.0f} s")
        self.ports = json.loads(self.port_file.read_text())
        return self.ports

    def wait_serving(self, address: str, timeout_s: float) -> None:
        """Until the front's health service says SERVING (its initial load finished), through
        the health service's Watch stream: no polling."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
            try:
                for answer in watch:
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
            except grpc.RpcError as exc:
                if not self.alive:
                    raise RuntimeError(self.exit_problem()) from None
                raise RuntimeError(f"jaxport-front at {address} did not become ready: "
                                   f"{exc.code().name}: {exc.details()}") from None
            finally:
                watch.cancel()
        raise RuntimeError(self.exit_problem())

    def stop(self, grace_s: float) -> None:
        """SIGTERM (the front drains for its --grace-period-s), SIGKILL after `grace_s`."""
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        if not self._exited.wait(grace_s):
            self.proc.kill()
            self._exited.wait(10)


class Registry:
    """The fronts of one application: replica id -> addresses and node, refreshed by each
    replica's health checks; `list()` returns the entries refreshed within their time to live
    whose gRPC port accepts a connection. A Ray actor (`_registry`), detached, num_cpus 0."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Any]] = {}
        self._seen: dict[str, float] = {}
        self._ttl: dict[str, float] = {}

    def register(self, replica: str, entry: dict[str, Any], ttl_s: float) -> None:
        self._entries[replica] = entry
        self._seen[replica] = time.monotonic()
        self._ttl[replica] = ttl_s

    def deregister(self, replica: str) -> None:
        for table in (self._entries, self._seen, self._ttl):
            table.pop(replica, None)

    def list(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        for replica in [r for r, t in self._seen.items() if now - t > self._ttl[r]]:
            self.deregister(replica)
        live = []
        for entry in self._entries.values():
            host, _, port = entry["grpc"].rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=1.0):
                    live.append(entry)
            except OSError:
                continue  # its front is gone; the replica's next health check says so
        return sorted(live, key=lambda e: (e["node"], e["grpc"]))


def _registry(app_name: str, create: bool) -> Any:
    import ray

    name = f"fronts:{app_name}"
    if not create:
        return ray.get_actor(name, namespace=REGISTRY_NAMESPACE)
    return ray.remote(Registry).options(
        name=name, namespace=REGISTRY_NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1).remote()


def replicas(app_name: str = APP_NAME) -> list[dict[str, Any]]:
    """The application's fronts, from a process connected to the cluster (`ray.init`): one
    dict per replica, `{"replica", "node", "grpc": "HOST:PORT", "http": ..., "metrics": ...}`
    (`http`/`metrics` None when off), sorted by node."""
    import ray

    return ray.get(_registry(app_name, create=False).list.remote())


def grpc_target(entries: Sequence[Mapping[str, Any]]) -> str:
    """A gRPC target naming every front, for gRPC's C core (Python's grpcio, C++):
    `ipv4:10.0.0.1:8001,10.0.0.2:8001` (with `grpc.lb_policy_name=round_robin`)."""
    return "ipv4:" + ",".join(e["grpc"] for e in entries)


def _forward_metadata(grpc_context: Any) -> list[tuple[str, str]]:
    """The caller's metadata for the front (a bearer token, traceparent), without Serve's own
    routing keys."""
    skip = {"application", "request_id", "multiplexed_model_id", "user-agent"}
    return [(k, v) for k, v in grpc_context.invocation_metadata()
            if k not in skip and not k.startswith(":") and not k.startswith("grpc-")]


_REPOSITORY_WHY = (
    "a call through Serve's proxy reaches one replica of many, so it would change that replica "
    "only; call each replica's front directly (python -m jaxport.bridge.ray addresses), or "
    "change the repository and redeploy")
_SHM_WHY = (
    "replicas run on other hosts than the caller, so they cannot see its /dev/shm; send "
    "tensors in the request")
REFUSED_THROUGH_PROXY = {
    "RepositoryModelLoad": _REPOSITORY_WHY, "RepositoryModelUnload": _REPOSITORY_WHY,
    "SystemSharedMemoryStatus": _SHM_WHY, "SystemSharedMemoryRegister": _SHM_WHY,
    "SystemSharedMemoryUnregister": _SHM_WHY,
}
#: What ServerMetadata through the proxy does not claim (their RPCs are refused there).
REFUSED_EXTENSIONS = ("model_repository", "system_shared_memory")


def refusal(rpc: str) -> str:
    """The UNIMPLEMENTED text of an RPC refused through Serve's proxy."""
    return f"{rpc} is not supported through Ray Serve's proxy: {REFUSED_THROUGH_PROXY[rpc]}"


def _unary(name: str, response_type: type) -> Callable[..., Any]:
    async def rpc(self: FrontDeployment, request: Any, grpc_context: Any) -> Any:
        self._tag(grpc_context)
        if name in REFUSED_THROUGH_PROXY:
            grpc_context.set_code(grpc.StatusCode.UNIMPLEMENTED)
            grpc_context.set_details(refusal(name))
            return response_type()
        try:
            response = await getattr(self._stub, name)(
                request, metadata=_forward_metadata(grpc_context))
        except grpc.aio.AioRpcError as exc:
            grpc_context.set_code(exc.code())
            grpc_context.set_details(exc.details() or "")
            return response_type()
        if name == "ServerMetadata":
            kept = [e for e in response.extensions if e not in REFUSED_EXTENSIONS]
            del response.extensions[:]
            response.extensions.extend(kept)
        return response

    rpc.__name__ = rpc.__qualname__ = name
    return rpc


class FrontDeployment:
    """One replica: a `jaxport-front` on its node, registered for direct calls, and the OIP
    RPCs of Serve's proxy forwarded to it. Ready (constructor returned) once the front's
    initial load has finished; unhealthy (Serve replaces it) when the front stops."""

    def __init__(self, repository: str, flags: Sequence[str] = (), *, host: str | None = None,
                 port: int = 0, http_port: int = 0, metrics_port: int = 0,
                 app_name: str = APP_NAME, ttl_s: float | None = None,
                 front_binary: str | None = None) -> None:
        from jaxport.bridge.cli import binary_problem
        from jaxport.bridge.cli import front_binary as find_front

        binary, named_by = find_front(
            [] if front_binary is None else ["--front-binary", front_binary], os.environ)
        problem = binary_problem(binary, named_by)
        if problem is not None:
            raise RuntimeError(problem)
        self._replica, self._node, node_ip = _identity()
        self._advertised = node_ip if host in (None, "", "0.0.0.0", "::") else host
        self._dir = Path(tempfile.mkdtemp(prefix="jaxport-replica-"))
        port_file = self._dir / "ports.json"
        command = front_command(binary, repository, host=host or node_ip, port=port,
                                http_port=http_port, metrics_port=metrics_port,
                                port_file=port_file, flags=flags)
        self._front = FrontProcess(command, port_file)
        ports = self._front.wait_listening(START_TIMEOUT_S)
        self.address = f"{self._advertised}:{ports['grpc_port']}"
        self._front.wait_serving(self.address, START_TIMEOUT_S)
        self._aio_stub: pb_grpc.GRPCInferenceServiceStub | None = None

        def where(key: str) -> str | None:
            return None if ports.get(key, -1) < 0 else f"{self._advertised}:{ports[key]}"

        self.entry = {"replica": self._replica, "node": self._node, "grpc": self.address,
                      "http": where("http_port"), "metrics": where("metrics_port"),
                      "pid": ports.get("pid")}
        self._ttl = ttl_s if ttl_s is not None else (
            3 * DEFAULT_HEALTH_CHECK_PERIOD_S + DEFAULT_HEALTH_CHECK_TIMEOUT_S)
        self._app = app_name
        self._register()

    def _register(self) -> None:
        import ray

        ray.get(_registry(self._app, create=True).register.remote(
            self._replica, self.entry, self._ttl))

    def check_health(self) -> None:
        """Serve's health check: the front is alive (else this replica is replaced); the
        registry entry is refreshed."""
        if not self._front.alive:
            raise RuntimeError(self._front.exit_problem())
        self._register()

    async def __call__(self, request: Any) -> dict[str, Any]:
        """HTTP GET through Serve's HTTP proxy: every front of the application."""
        entries = await _registry(self._app, create=False).list.remote()
        return {"replicas": entries, "grpc_target": grpc_target(entries) if entries else None}

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            _registry(self._app, create=False).deregister.remote(self._replica)
        front = getattr(self, "_front", None)
        if front is not None:
            front.stop(grace_s=30)

    @property
    def _stub(self) -> pb_grpc.GRPCInferenceServiceStub:
        """The proxy path's stub to the front, made in the event loop the RPCs run in (an aio
        channel belongs to the loop it is first used in; the constructor runs elsewhere)."""
        if self._aio_stub is None:
            channel = grpc.aio.insecure_channel(self.address, options=[
                ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
            self._aio_stub = pb_grpc.GRPCInferenceServiceStub(channel)
        return self._aio_stub

    def _tag(self, grpc_context: Any) -> None:
        grpc_context.set_trailing_metadata([(REPLICA_KEY, self._replica), (NODE_KEY, self._node)])

    async def ModelStreamInfer(self, requests: AsyncIterator[pb.ModelInferRequest],
                               grpc_context: Any) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """The stream forwarded to the front as one stream (it stays on this replica)."""
        self._tag(grpc_context)
        call = self._stub.ModelStreamInfer(requests, metadata=_forward_metadata(grpc_context))
        try:
            async for response in call:
                yield response
        except grpc.aio.AioRpcError as exc:
            grpc_context.set_code(exc.code())
            grpc_context.set_details(exc.details() or "")


for _method in SERVICE.methods:
    if not _method.client_streaming and not _method.server_streaming:
        setattr(FrontDeployment, _method.name,
                _unary(_method.name, getattr(pb, _method.output_type.name)))
assert all(hasattr(FrontDeployment, m.name) for m in SERVICE.methods)


def _identity() -> tuple[str, str, str]:
    """(replica id, Ray node id, node IP) of this replica."""
    import ray
    from ray import serve

    node_ip = ray.util.get_node_ip_address()
    try:
        replica = serve.get_replica_context().replica_id.unique_id
    except Exception:  # a plain Ray actor, not a Serve replica
        replica = f"{ray.get_runtime_context().get_actor_id() or 'driver'}-{os.getpid()}"
    return replica, ray.get_runtime_context().get_node_id(), node_ip


def _typed(name: str, value: Any, kind: type) -> Any:
    """`serve run ... key=value` passes strings; a config file passes YAML values."""
    if not isinstance(value, str) or kind is str:
        return value
    if kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}") from None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ValueError(f"{name}: expected JSON, got {value!r}") from None


def app(args: Mapping[str, Any]) -> Any:
    """The application builder: `serve run jaxport.bridge.ray:app repository=DIR [key=value]`.

    `repository` (required): a directory at the same path on every node, or a file://,
    http(s):// or s3:// URL every front reads itself. `host` (default: each node's IP), `port`,
    `http_port`, `metrics_port` (default 0: free ports). Serve's deployment options
    (`DEPLOYMENT_OPTIONS`: num_replicas, autoscaling_config, ray_actor_options, ...) go to
    Serve; every other key is a `jaxport serve` flag (`max_inflight_per_model: 8`,
    `batching: true`, `load_model: [a, b]`), checked by the front: a wrong one fails the
    replicas with the front's one line. `port_file` and `worker_python` are the replica's.
    """
    from ray import serve

    args = dict(args)
    repository = args.pop("repository", None)
    if not repository:
        raise ValueError("jaxport.bridge.ray:app needs repository=DIR|URL")
    for key, why in REPLICA_OWNED.items():
        if key in args:
            raise ValueError(f"jaxport.bridge.ray:app: {key} cannot be given: {why}")
    options: dict[str, Any] = {"max_ongoing_requests": DEFAULT_MAX_ONGOING_REQUESTS}
    for key, kind in DEPLOYMENT_OPTIONS.items():
        if key in args:
            options[key] = _typed(key, args.pop(key), kind)
    if "autoscaling_config" in options:
        options.pop("num_replicas", None)
    replica: dict[str, Any] = {}
    for key in ("host", "front_binary"):
        if key in args:
            replica[key] = str(args.pop(key))
    for key in ("port", "http_port", "metrics_port"):
        if key in args:
            replica[key] = _typed(key, args.pop(key), int)
    period = float(options.get("health_check_period_s", DEFAULT_HEALTH_CHECK_PERIOD_S))
    timeout = float(options.get("health_check_timeout_s", DEFAULT_HEALTH_CHECK_TIMEOUT_S))
    deployment = serve.deployment(name="jaxport")(FrontDeployment)
    return deployment.options(**options).bind(
        str(repository), _flag_args(args), **replica, ttl_s=3 * period + timeout)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jaxport.bridge.ray addresses [--address auto] [--app jaxport] [--format ...]`:
    the fronts of a running application, one per line, as JSON, or as one gRPC target."""
    parser = argparse.ArgumentParser(prog="python -m jaxport.bridge.ray")
    sub = parser.add_subparsers(dest="command", required=True)
    addresses = sub.add_parser("addresses", help="the gRPC addresses of the application's fronts")
    addresses.add_argument("--address", default="auto", help="the Ray cluster (ray.init address)")
    addresses.add_argument("--app", default=APP_NAME, help="the Serve application's name")
    addresses.add_argument("--format", choices=("lines", "json", "target"), default="lines",
                           help="lines: HOST:PORT per front; json: every field; target: "
                                "ipv4:A,B for gRPC's C core")
    ns = parser.parse_args(argv)
    import ray

    ray.init(address=ns.address, log_to_driver=False, logging_level="ERROR")
    try:
        entries = replicas(ns.app)
    except ValueError:
        print(f"{parser.prog}: error: no jaxport application {ns.app!r} on this cluster "
              "(no replica registered)", file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    if ns.format == "json":
        print(json.dumps(entries, indent=2))
    elif ns.format == "target":
        print(grpc_target(entries) if entries else "")
    else:
        for e in entries:
            print(e["grpc"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
