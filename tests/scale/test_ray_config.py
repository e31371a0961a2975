"""The Ray Serve entry points without a cluster: the shipped Serve config file is one Serve
accepts, and the application builder turns its args (and `serve run ... key=value` strings)
into the deployment it describes. The cluster itself: tests/scale/scale_ray.py (make test-scale).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "bridge" / "deploy" / "ray" / "serve.yaml"


def test_serve_config_is_valid_and_builds() -> None:
    from jaxport.bridge import ray as jray
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
    assert built._bound_deployment.init_args == ("/srv/jaxport-repo", {"engine": "exported"})


def test_builder_parses_serve_run_strings() -> None:
    """`serve run jaxport.bridge.ray:app repository=R num_replicas=3 ...` passes strings."""
    from jaxport.bridge import ray as jray

    built = jray.app({"repository": "/r", "num_replicas": "3", "max_inflight_per_model": "4",
                      "batching": "true", "preferred_batch_sizes": "8,32",
                      "ray_actor_options": '{"num_cpus": 0.5}'})
    deployment = built._bound_deployment
    assert deployment.num_replicas == 3
    assert deployment.ray_actor_options["num_cpus"] == 0.5
    assert deployment.init_args == ("/r", {"max_inflight_per_model": 4, "batching": True,
                                           "preferred_batch_sizes": (8, 32)})


def test_builder_refuses_unknown_and_missing() -> None:
    from jaxport.bridge import ray as jray

    with pytest.raises(ValueError, match="needs repository=DIR"):
        jray.app({})
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['num_replica'\]"):
        jray.app({"repository": "/r", "num_replica": 2})


def test_every_rpc_is_a_deployment_method() -> None:
    """Serve's proxy calls the replica method named after the RPC: all of them exist, unary
    ones take Serve's grpc_context, the stream is an async generator."""
    import inspect

    from jaxport.bridge import ray as jray

    for method in jray.SERVICE.methods:
        fn = getattr(jray.OIPDeployment, method.name)
        assert "grpc_context" in inspect.signature(fn).parameters, method.name
        assert inspect.isasyncgenfunction(fn) == method.client_streaming, method.name


#: A replica's constructor (what Serve runs on each node), outside Ray: it builds the core of
#: `jaxport serve` and loads the repository; the index says what loaded.
REPLICA = (
    "import json, sys\n"
    "from jaxport.bridge.ray import OIPDeployment\n"
    "replica = OIPDeployment(sys.argv[1])\n"
    "print(json.dumps([[s.name, s.version, s.state, s.reason]\n"
    "                  for s in replica._repository.index()]))\n"
)


def test_replica_loads_a_repository_over_http(tmp_path: Path) -> None:
    """`app(repository="http://...")`: each replica reads the repository by URL, so nodes
    need no shared file system (served here by a real loopback HTTP server)."""
    import json
    import shutil
    import subprocess
    import sys

    from jaxport.artifact import index as index_mod

    sys.path.insert(0, str(REPO / "tests" / "artifact"))
    from loopback_http import serving

    backcompat = sorted(p for p in (REPO / "tests" / "backcompat").iterdir()
                        if (p / "manifest.json").is_file())[0]
    root = tmp_path / "repo"
    shutil.copytree(backcompat, root / "nested" / "1")
    index_mod.write(root)
    with serving(root) as http:
        done = subprocess.run([sys.executable, "-c", REPLICA, http.url], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "/nested/1/model.jaxexport" in http.requests
    assert json.loads(done.stdout.splitlines()[-1]) == [["nested", 1, "READY", ""]]
