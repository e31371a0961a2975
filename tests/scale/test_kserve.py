"""KServe deployment files (bridge/deploy/kserve/): the manifests are valid against KServe's CRD
schemas, they agree with the container recipe, and the recipe's command serves a repository laid
out as KServe's storage initializer provides it (/mnt/models).

Validation against KServe's CRD schemas lives in kserve_crds.py (`make test-scale`): the schemas
are KServe's own, in ../shared/reference/kserve/, which a clone of this repository alone lacks.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KSERVE = REPO / "bridge" / "deploy" / "kserve"
MANIFESTS = sorted(KSERVE.glob("*.yaml"))
RUNTIMES = (KSERVE / "servingruntime.yaml", KSERVE / "clusterservingruntime.yaml")



def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _containerfile_command() -> list[str]:
    text = (KSERVE / "Containerfile").read_text()
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    return [*entry, *cmd]


def test_manifests_present() -> None:
    kinds = sorted(_load(p)["kind"] for p in MANIFESTS)
    assert kinds == ["ClusterServingRuntime", "InferenceService", "ServingRuntime"]


#: The one argument the runtimes add to the Containerfile's CMD: KServe puts ONE model at
#: /mnt/models and substitutes {{.Name}} with the InferenceService's name.
MODEL_NAME_ARG = "--model-name={{.Name}}"


@pytest.mark.parametrize("path", RUNTIMES, ids=lambda p: p.name)
def test_runtime_agrees_with_containerfile(path: Path) -> None:
    """Same command line (the Containerfile's CMD plus the model name), gRPC on the h2c port
    the probes use, REST on the http1 port, metrics where Prometheus annotations point, model
    format jaxport over grpc-v2 and v2 (REST)."""
    spec = _load(path)["spec"]
    container = spec["containers"][0]
    assert container["args"][0] == MODEL_NAME_ARG
    assert ["jaxport", "serve", *container["args"][1:]] == _containerfile_command()
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert args["repository"] == "/mnt/models"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"h2c": int(args["port"]), "metrics": int(args["metrics-port"]),
                     "http1": int(args["http-port"])}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == int(args["port"])
    assert spec["annotations"]["prometheus.kserve.io/port"] == args["metrics-port"]
    assert spec["annotations"]["prometheus.kserve.io/path"] == "/metrics"
    assert spec["supportedModelFormats"][0]["name"] == "jaxport"
    assert spec["protocolVersions"] == ["grpc-v2", "v2"]
    isvc = _load(KSERVE / "inferenceservice.yaml")["spec"]["predictor"]["model"]
    assert isvc["modelFormat"]["name"] == "jaxport" and isvc["runtime"] == "jaxport"


#: What the test changes in the container's command, and why: the machine is shared (bind
#: 127.0.0.1, ports picked free) and /mnt/models is a temporary directory here.
SUBSTITUTED = {"--host=0.0.0.0": "--host=127.0.0.1", "--port=8001": "--port=0",
               "--metrics-port=8002": "--metrics-port=0", "--http-port=8080": "--http-port=0"}


def _run_and_call(command: list[str], mnt_models: Path, name: str, artifact: Path) -> None:
    """`command` (ENTRYPOINT + args) run as is but for SUBSTITUTED and the /mnt/models path:
    grpc.health.v1 SERVING (the probes), model `name` answers the artifact's goldens through a
    real client, /metrics answers on the annotated path, REST says the model is ready."""
    import urllib.request

    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess

    args = [SUBSTITUTED.get(a, a) for a in command[2:]]
    args = [f"--repository={mnt_models}" if a == "--repository=/mnt/models" else a for a in args]
    assert sum(a != b for a, b in zip(args, command[2:], strict=True)) == len(SUBSTITUTED) + 1
    jaxport = Path(sys.executable).parent / command[0]
    with BridgeProcess(mnt_models, *args, command=[str(jaxport), command[1]]) as bridge:
        with bridge.channel() as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=30)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        manifest = json.loads((artifact / "manifest.json").read_text())
        with InferenceClient(bridge.address) as client:
            assert {m.name for m in client.repository_index()} == {name}
            for case in manifest["goldens"]:
                inputs = {n: np.load(artifact / p) for n, p in case["inputs"].items()}
                result = client.infer(name, inputs)
                for output, path in case["outputs"].items():
                    np.testing.assert_allclose(np.asarray(result[output]),
                                               np.load(artifact / path), rtol=1e-6)
        with urllib.request.urlopen(bridge.metrics_url, timeout=30) as page:
            assert page.status == 200
            assert name.encode() in page.read()
        # REST (protocolVersion v2) on the port the command asked for.
        http_port = json.loads(bridge.port_file.read_text())["http_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{name}/ready",
                                    timeout=30) as page:
            assert (page.status, json.loads(page.read())) == (200, {"name": name, "ready": True})


def _suite_model(name: str) -> object:
    from scale_helpers import suite_models

    return next(m for m in suite_models().suite_models() if m.name == name)


def test_container_command_serves_a_repository(tmp_path: Path) -> None:
    """The Containerfile's own ENTRYPOINT + CMD (the image run by hand, outside KServe) over a
    /mnt/models holding a repository, `<model>/<version>/`."""
    from scale_helpers import export_suite_model

    mnt_models = tmp_path / "mnt" / "models"
    model = _suite_model("cf_fp32")
    artifact = mnt_models / model.name / "1"
    export_suite_model(model, artifact)
    _run_and_call(_containerfile_command(), mnt_models, model.name, artifact)


@pytest.mark.parametrize("layout", ["version", "model"])
def test_runtime_command_serves_one_model_at_mnt_models(tmp_path: Path, layout: str) -> None:
    """The ServingRuntime's command (Containerfile ENTRYPOINT + the runtime's args, parsed from
    servingruntime.yaml, {{.Name}} = the example InferenceService's name) over what KServe's
    storage initializer leaves at /mnt/models for one model: a version directory
    (`storageUri: .../mlp/1`) or a model directory (`storageUri: .../mlp`, versions 1/, 2/)."""
    from scale_helpers import export_suite_model

    name = _load(KSERVE / "inferenceservice.yaml")["metadata"]["name"]
    runtime_args = _load(KSERVE / "servingruntime.yaml")["spec"]["containers"][0]["args"]
    command = [*_containerfile_command()[:2],
               *(a.replace("{{.Name}}", name) for a in runtime_args)]
    assert f"--model-name={name}" in command
    mnt_models = tmp_path / "mnt" / "models"
    model = _suite_model("cf_fp32")
    if layout == "version":
        artifact = mnt_models
    else:
        export_suite_model(model, mnt_models / "1")
        artifact = mnt_models / "2"
    export_suite_model(model, artifact)
    _run_and_call(command, mnt_models, name, artifact)


@pytest.mark.parametrize("name", ["Containerfile", "Containerfile.native"])
def test_containerfile_copies_only_paths_that_exist(name: str) -> None:
    """Every `COPY` source of the images (but stage-to-stage copies) is a path of this
    repository: a moved package would otherwise break the image build, which only the second
    tier runs (tests/deploy/test_images.py); both build the front as the wheel does and
    install the pinned plugin with bridge/pjrt.py."""
    repo = KSERVE.parents[2]
    text = (KSERVE / name).read_text()
    for line in text.splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (repo / src).exists(), f"{name}: COPY {src}: no such path"
    assert "bridge/front/build_wheel.py" in text and "pjrt install cpu" in text
