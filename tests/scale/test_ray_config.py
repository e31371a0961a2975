"""jaxport's Ray entry points without a cluster: the shipped Serve config file is one Serve
accepts and builds; the application builder turns its args (and `serve run ... key=value`
strings) into the deployment and the front's flags; a replica's front process (FrontProcess)
starts, reports its ports, waits for SERVING through the health Watch, stops on SIGTERM, and a
front that refuses its flags fails with the front's one line. The cluster itself:
tests/scale/scale_ray.py (make test-scale).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest
import yaml
from jaxport.bridge import ray as jray

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "bridge" / "deploy" / "ray" / "serve.yaml"


def test_serve_config_is_valid_and_builds() -> None:
    from ray.serve.schema import ServeDeploySchema

    config = ServeDeploySchema.model_validate(yaml.safe_load(CONFIG.read_text()))
    assert config.grpc_options.grpc_servicer_functions == [jray.SERVICER_FUNCTION]
    assert config.proxy_location == "HeadOnly"
    (application,) = config.applications
    assert application.import_path == "jaxport.bridge.ray:app"
    built = jray.app(application.args)
    deployment = built._bound_deployment
    assert deployment.name == "jaxport"
    assert deployment.num_replicas == 2
    assert deployment.ray_actor_options["num_cpus"] == 1
    assert deployment.max_ongoing_requests == 16
    assert deployment.init_args == ("/srv/jaxport-repo", ["--max-inflight-per-model=4"])
    assert deployment.init_kwargs == {"ttl_s": 3 * 10.0 + 30.0}


def test_builder_turns_args_into_front_flags() -> None:
    """Deployment options go to Serve (strings from `serve run` parsed); the replica's own
    options to the replica; every other key is a `jaxport serve` flag (the front checks it)."""
    built = jray.app({"repository": "/r", "num_replicas": "3", "max_inflight_per_model": "4",
                      "batching": True, "preferred_batch_sizes": "8,32",
                      "model_control_mode": "explicit", "load_model": ["a", "b"],
                      "ray_actor_options": '{"num_cpus": 0.5}', "port": "8001",
                      "host": "0.0.0.0", "health_check_period_s": "2"})
    deployment = built._bound_deployment
    assert deployment.num_replicas == 3
    assert deployment.ray_actor_options["num_cpus"] == 0.5
    assert deployment._deployment_config.health_check_period_s == 2.0
    assert deployment.init_args == ("/r", [
        "--max-inflight-per-model=4", "--batching=true", "--preferred-batch-sizes=8,32",
        "--model-control-mode=explicit", "--load-model=a", "--load-model=b"])
    assert deployment.init_kwargs == {"host": "0.0.0.0", "port": 8001, "ttl_s": 3 * 2.0 + 30.0}


def test_builder_refuses_what_it_cannot_take() -> None:
    with pytest.raises(ValueError, match="needs repository=DIR"):
        jray.app({})
    with pytest.raises(ValueError, match="port_file cannot be given: the replica writes"):
        jray.app({"repository": "/r", "port_file": "/p"})
    with pytest.raises(ValueError, match="worker_python cannot be given"):
        jray.app({"repository": "/r", "worker_python": "/p"})
    with pytest.raises(ValueError, match="num_replicas: expected int, got 'two'"):
        jray.app({"repository": "/r", "num_replicas": "two"})


def test_every_rpc_is_a_deployment_method() -> None:
    """Serve's proxy calls the replica method named after the RPC: all of them exist, each
    takes Serve's grpc_context, the stream is an async generator."""
    for method in jray.SERVICE.methods:
        fn = getattr(jray.FrontDeployment, method.name)
        assert "grpc_context" in inspect.signature(fn).parameters, method.name
        assert inspect.isasyncgenfunction(fn) == method.client_streaming, method.name
    assert set(jray.REFUSED_THROUGH_PROXY) <= {m.name for m in jray.SERVICE.methods}


@pytest.fixture(scope="module")
def front() -> Path:
    from jaxport.bridge.cli import binary_problem, front_binary

    binary, named_by = front_binary([], {})
    assert binary_problem(binary, named_by) is None, binary_problem(binary, named_by)
    return binary


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The oldest back-compat artifact as model `nested` (no export needed)."""
    import shutil

    backcompat = sorted(p for p in (REPO / "tests" / "backcompat").iterdir()
                        if (p / "manifest.json").is_file())[0]
    root = tmp_path_factory.mktemp("ray-repo")
    shutil.copytree(backcompat, root / "nested" / "1")
    return root


def test_front_process_starts_serves_and_stops(front: Path, repository: Path,
                                               tmp_path: Path) -> None:
    """What a replica runs: the front on 127.0.0.1 free ports, its ports from the port file,
    SERVING through the health Watch, an answer, SIGTERM ends it with status 0."""
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    port_file = tmp_path / "ports.json"
    command = jray.front_command(front, str(repository), host="127.0.0.1", port=0, http_port=-1,
                                 metrics_port=-1, port_file=port_file)
    assert command[-2:] == ["--worker-python", sys.executable]
    proc = jray.FrontProcess(command, port_file)
    try:
        ports = proc.wait_listening(120)
        assert ports["pid"] == proc.proc.pid and ports["http_port"] == -1
        address = f"127.0.0.1:{ports['grpc_port']}"
        proc.wait_serving(address, 120)
        import grpc
        from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

        with grpc.insecure_channel(address) as channel:
            ready = pb_grpc.GRPCInferenceServiceStub(channel).ModelReady(
                pb.ModelReadyRequest(name="nested"), timeout=60)
        assert ready.ready
    finally:
        proc.stop(grace_s=30)
    assert proc.proc.returncode == 0
    assert not proc.alive


def test_a_front_refusing_its_flags_fails_the_replica_in_one_line(
        front: Path, repository: Path, tmp_path: Path) -> None:
    """A builder argument the front does not take (`serve run ... max_inflight=4`): the
    replica's start fails with the front's own line, which Serve shows as the deploy error."""
    port_file = tmp_path / "ports.json"
    command = jray.front_command(front, str(repository), host="127.0.0.1", port=0, http_port=-1,
                                 metrics_port=-1, port_file=port_file,
                                 flags=jray._flag_args({"max_inflight": 4}))
    proc = jray.FrontProcess(command, port_file)
    with pytest.raises(RuntimeError) as info:
        proc.wait_listening(120)
    assert str(info.value) == (
        "jaxport-front exited with status 2: jaxport-front: error: unrecognized argument: "
        "--max-inflight=4 (see `jaxport-front --help`)")
    assert json.dumps(str(info.value)).count("\\n") == 0
