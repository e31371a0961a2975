"""A Ray cluster of N nodes on this machine serving jaxport (`jaxport.bridge.ray:app`), for
tests/scale and tests/bench/scale_out.py.

`ray.cluster_utils.Cluster`: a head and N-1 worker nodes, a small object store each, no
dashboard, Ray's temp dir private to the run and short (Unix socket paths must stay under 108
bytes), torn down at the end. Serve starts with its gRPC proxy (HeadOnly) and the application
deploys `replicas` replicas of one CPU each (so with one CPU per node: one per node). Readiness
is waited on through Serve's own status and the registry of fronts, with bounds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Bound on the cluster start plus every replica's front loading the repository.
DEPLOY_TIMEOUT_S = 300.0
#: Ray's object store per node: the smallest Ray accepts is 75 MiB.
OBJECT_STORE_BYTES = 80 * 1024 * 1024
#: Longest temp dir: Ray appends session_<date>_<time>_<us>_<pid>/sockets/plasma_store (~65).
MAX_TEMP_DIR_CHARS = 40
APP_NAME = "jaxport"
#: Environment of the cluster's processes (the nodes inherit this process's). Serve's proxy
#: otherwise sends every call to a replica on its own node while that one has room: with one
#: proxy (HeadOnly) the worker node's replica would idle. Serve's controller kills a proxy
#: that is not ready within 5 s: on a loaded 2-core machine starting it took longer.
RAY_ENV = {"RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0", "RAY_TMPDIR": "",
           "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "300",
           "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "300"}


def free_port() -> int:
    """A port free on every address (Serve's gRPC proxy binds [::])."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::", 0))
        return s.getsockname()[1]


@dataclass
class ServeCluster:
    """A running cluster serving one repository: Serve's gRPC proxy at `url`, the fronts at
    `fronts` (the registry's entries, one per replica)."""

    url: str
    grpc_port: int
    http_port: int
    node_ids: list[str]
    temp_dir: Path
    cluster: object
    start_seconds: float
    deploy_seconds: float
    fronts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def front_addresses(self) -> list[str]:
        return [f["grpc"] for f in self.fronts]


def _wait_running(timeout_s: float) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while True:
        app = serve.status().applications.get(APP_NAME)
        status = getattr(app, "status", None)
        if status == "RUNNING":
            return
        if status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"Serve application {APP_NAME}: {status}: {app.message}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Serve application {APP_NAME} not RUNNING after {timeout_s} s "
                               f"(status {status})")
        time.sleep(0.5)


def wait_fronts(count: int, timeout_s: float, exclude: set[str] = frozenset()) -> list[dict]:
    """The registry's fronts once it lists `count` of them (none of `exclude`'s addresses)."""
    from jaxport.bridge.ray import replicas

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fronts = [f for f in replicas(APP_NAME) if f["grpc"] not in exclude]
        except ValueError:  # no registry yet
            fronts = []
        if len(fronts) >= count:
            return fronts
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(fronts)} of {count} fronts registered after {timeout_s} s")
        time.sleep(0.2)


def _wait_routed(url: str, timeout_s: float) -> None:
    """Until the proxy routes OIP calls to the application (it learns routes after the
    application is RUNNING): ServerReady through the proxy answers ready."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        while True:
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready:
                    return
                last = "not ready"
            except grpc.RpcError as exc:
                last = f"{exc.code().name}: {exc.details()}"
                # Only "no route yet" is worth waiting for; anything else is a failure.
                if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE):
                    raise RuntimeError(f"Serve's gRPC proxy at {url}: {last}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"Serve's gRPC proxy at {url} not routing after "
                                   f"{timeout_s} s: {last}")
            time.sleep(0.2)


@contextlib.contextmanager
def running_serve_cluster(repository: str | Path, *, nodes: int = 2, replicas: int = 2,
                          app_args: Mapping[str, Any] | None = None,
                          ) -> Iterator[ServeCluster]:
    """Start the cluster, deploy `jaxport.bridge.ray:app` over `repository` (more builder
    arguments in `app_args`), wait (bounded) until every front registered and Serve routes
    calls; tear it all down."""
    import ray
    from jaxport.bridge.ray import SERVICER_FUNCTION, app
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.serve.api import _run

    # Ray writes some files (the address of the "current" cluster) to $RAY_TMPDIR/ray whatever
    # temp_dir says: point both at the run's own directory, never /tmp/ray.
    base = Path(tempfile.mkdtemp(prefix="jxr-"))
    temp_dir = base / "ray"
    temp_dir.mkdir()
    assert len(str(temp_dir)) <= MAX_TEMP_DIR_CHARS, temp_dir
    saved = {k: os.environ.get(k) for k in RAY_ENV}
    os.environ.update(RAY_ENV, RAY_TMPDIR=str(base))
    node_args = {"num_cpus": 1, "object_store_memory": OBJECT_STORE_BYTES,
                 "include_dashboard": False, "temp_dir": str(temp_dir)}
    start = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args=dict(node_args))
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**{k: v for k, v in node_args.items()
                                if k not in ("include_dashboard", "temp_dir")})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        node_ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        assert len(node_ids) == nodes, ray.nodes()
        started = time.monotonic() - start
        port, http_port = free_port(), free_port()
        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": "127.0.0.1", "port": http_port},
            grpc_options={"port": port, "grpc_servicer_functions": [SERVICER_FUNCTION]},
        )
        args = {"repository": str(repository), "num_replicas": replicas,
                "ray_actor_options": {"num_cpus": 1}, **dict(app_args or {})}
        _run(app(args), name=APP_NAME, _blocking=False)
        _wait_running(DEPLOY_TIMEOUT_S)
        fronts = wait_fronts(replicas, DEPLOY_TIMEOUT_S)
        _wait_routed(f"127.0.0.1:{port}", DEPLOY_TIMEOUT_S)
        deployed = time.monotonic() - start - started
        yield ServeCluster(f"127.0.0.1:{port}", port, http_port, node_ids, temp_dir, cluster,
                           started, deployed, fronts)
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.shutdown()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(base, ignore_errors=True)
