"""Helpers of tests/scale (fixtures in conftest.py): the conformance suite's models, and (for
the Ray suite, `make test-scale`) a two-node Ray cluster on this machine serving them through
Serve's gRPC proxy.

The cluster (`ray.cluster_utils.Cluster`): a head and one worker node, one CPU each, a small
object store, no dashboard, Ray's temp dir private to the session and short (Unix socket
paths must stay under 108 bytes), torn down at the end. Each replica asks for one CPU, so the
two replicas are placed one per node. Readiness is waited on through Serve's own status, with
a bound.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFORMANCE = REPO / "tests" / "conformance"
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))  # support.*

#: Bound on the cluster start plus both replicas loading every suite model (2 loaded cores).
DEPLOY_TIMEOUT_S = 300.0
#: Ray's object store per node: the smallest Ray accepts is 75 MiB.
OBJECT_STORE_BYTES = 80 * 1024 * 1024
#: Longest temp dir: Ray appends session_<date>_<time>_<us>_<pid>/sockets/plasma_store (~65).
MAX_TEMP_DIR_CHARS = 40
APP_NAME = "jaxport"
#: Environment of the cluster's processes (the nodes inherit this process's). Serve's proxy
#: otherwise sends every call to a replica on its own node while that one has room: with one
#: proxy (HeadOnly) the worker node's replica would idle.
#: Serve's controller kills a proxy that is not ready within 5 s (its health check: 10 s) and
#: serve.start then fails with ActorDiedError: on a loaded 2-core machine (make test-all with
#: two CPU burners) starting the proxy took longer, so the cluster waits as long as it needs.
RAY_ENV = {"RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0", "RAY_TMPDIR": "",
           "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "300",
           "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "300"}


def suite_models() -> Any:
    """tests/conformance/models.py, loaded by path: other suites have a `models` module too
    (tests/bench), so `import models` would depend on what ran first."""
    name = "jaxport_conformance_suite_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CONFORMANCE / "models.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def conformance_run() -> Any:
    """tests/conformance/run.py (how `make conformance` runs each language's runner), loaded by
    path under a unique name, like `suite_models`."""
    name = "jaxport_conformance_run"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CONFORMANCE / "run.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def export_suite_model(model: Any, out: Path) -> None:
    """One suite model exported to `out` with every option it needs (batch sizes, labels,
    x64): the suite's one export call, `models.export_model`, as `make conformance` does."""
    suite_models().export_model(model, out)


def export_suite(repository: Path) -> Path:
    """The conformance suite's models exported as `<repository>/<name>/1/`."""
    for model in suite_models().suite_models():
        export_suite_model(model, repository / model.name / "1")
    return repository


def free_port() -> int:
    """A port free on every address (Serve's gRPC proxy binds [::])."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::", 0))
        return s.getsockname()[1]


@dataclass
class ServeCluster:
    """A running two-node cluster serving the suite repository."""

    url: str
    grpc_port: int
    node_ids: list[str]
    temp_dir: Path
    cluster: object
    start_seconds: float
    deploy_seconds: float


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
def running_serve_cluster(suite_repository: Path) -> Iterator[ServeCluster]:
    """Start the cluster, deploy, wait (bounded) until Serve routes calls; tear all down."""
    import ray
    from jaxport.bridge.ray import SERVICER_FUNCTION, app
    from ray import serve
    from ray.cluster_utils import Cluster
    from ray.serve.api import _run

    # Ray writes some files (the address of the "current" cluster) to $RAY_TMPDIR/ray whatever
    # temp_dir says: point both at the session's own directory, never /tmp/ray.
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
        cluster.add_node(**{k: v for k, v in node_args.items()
                            if k not in ("include_dashboard", "temp_dir")})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        node_ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        assert len(node_ids) == 2, ray.nodes()
        started = time.monotonic() - start
        port = free_port()
        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": "127.0.0.1", "port": free_port()},
            grpc_options={"port": port, "grpc_servicer_functions": [SERVICER_FUNCTION]},
        )
        _run(app({"repository": str(suite_repository), "num_replicas": 2,
                       "ray_actor_options": {"num_cpus": 1}}),
                  name=APP_NAME, _blocking=False)
        _wait_running(DEPLOY_TIMEOUT_S)
        _wait_routed(f"127.0.0.1:{port}", DEPLOY_TIMEOUT_S)
        deployed = time.monotonic() - start - started
        yield ServeCluster(f"127.0.0.1:{port}", port, node_ids, temp_dir, cluster,
                           started, deployed)
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
