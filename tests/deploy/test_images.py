"""The container images, built and run with podman (image_helpers.py says how on this machine):
bridge/deploy/kserve/Containerfile (`make image`: jaxport serve, the cgo front, the pinned CPU
plugin, the Python workers) from bases made of Debian packages, serving a /mnt/models
repository of the bundled example and a batched model: tritonclient over gRPC and REST gets
the goldens (under the artifact format's tolerance) from the running container, both models
on the native engine, grpc.health.v1 SERVING, /metrics answering, the server running as a
non-root user and draining to exit 0 on SIGTERM. Each image's size is printed with what takes
the space.

Slow (second tier): the first build compiles the front with zig in the container and installs
JAX & co. and the plugin from the package index (10+ minutes on 2 shared cores; podman's layer
cache in build/containers makes an unchanged rebuild take seconds).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from image_helpers import (
    NATIVE_BASE,
    PYTHON_BASE,
    REPO,
    Container,
    build,
    debian_base,
    ensure_tools,
    go_image,
    image_size,
    podman,
)

EXAMPLES = "jaxport.exporter.examples"
TRITONCLIENT = "tritonclient[http,grpc]==2.73.0"
CLIENT_VENV = REPO / "build" / "deploy-tritonclient"
CLIENTS = Path(__file__).with_name("image_clients.py")
#: The artifact format's float32 rule (docs/artifact-format.md, Tolerances).
RTOL, ATOL = 1e-4, 1e-5
PLUGIN_IN_IMAGE = "/opt/jaxport/share/jaxport/pjrt/cpu/pjrt_c_api_cpu_plugin.so"
NATIVE_PLUGIN = "/usr/local/share/jaxport/pjrt/cpu/pjrt_c_api_cpu_plugin.so"
UID = 1000


def makefile_default(name: str) -> str:
    m = re.search(rf"^{name} \?= (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert m, name
    return m[1]


def test_kserve_runtimes_name_the_image_make_image_builds() -> None:
    image = makefile_default("IMAGE")
    for runtime in ("servingruntime.yaml", "clusterservingruntime.yaml"):
        spec = yaml.safe_load((REPO / "bridge/deploy/kserve" / runtime).read_text())["spec"]
        assert spec["containers"][0]["image"] == image, runtime
        assert spec["containers"][0]["securityContext"]["runAsUser"] == UID


@pytest.fixture(scope="module")
def bases() -> dict[str, str]:
    ensure_tools()
    return {"python": debian_base("trixie-python", PYTHON_BASE),
            "native": debian_base("trixie-cc", NATIVE_BASE), "go": go_image()}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A /mnt/models repository (the bundled example, and the same function exported with
    batch sizes 1,4,8) and its golden cases dumped for the client process (cases.json/npz)."""
    import jaxport.artifact

    work = tmp_path_factory.mktemp("image-models")
    repo = work / "models"
    cli = Path(sys.executable).parent / "jaxport"
    for name, args in (("example", ["--input", "x:float32[4,16]"]),
                       ("batched", ["--input", "x:float32[B,16]", "--batch-sizes", "1,4,8"])):
        done = subprocess.run([cli, "export", f"{EXAMPLES}:predict", "--params",
                               f"{EXAMPLES}:init", *args, "--out", repo / name / "1", "--quiet"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    # What a storage initializer leaves: readable by the container's non-root user (pytest's
    # temporary directories are 0700, the exporter's files the user's umask).
    for path in [work, *work.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    cases: dict[str, dict[str, object]] = {}
    arrays: dict[str, np.ndarray] = {}
    for model in ("example", "batched"):
        cases[model] = {}
        for case in jaxport.artifact.open(repo / model / "1").goldens():
            cases[model][case.name] = {"inputs": sorted(case.inputs),
                                       "outputs": sorted(case.outputs)}
            for kind, tensors in (("in", case.inputs), ("out", case.outputs)):
                for name, value in tensors.items():
                    arrays[f"{model}/{case.name}/{kind}/{name}"] = np.asarray(value)
        assert cases[model], model
    (work / "cases.json").write_text(json.dumps(cases))
    np.savez(work / "cases.npz", **arrays)
    return repo, work


@pytest.fixture(scope="module")
def client_python() -> Path:
    """tritonclient in a venv of its own (its stubs clash with ours in one process)."""
    stamp = CLIENT_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != TRITONCLIENT:
        for cmd in ([sys.executable, "-m", "venv", "--clear", str(CLIENT_VENV)],
                    [str(CLIENT_VENV / "bin/python"), "-m", "pip", "install", "-q",
                     "--disable-pip-version-check", TRITONCLIENT]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            assert done.returncode == 0, done.stdout + done.stderr
        stamp.write_text(TRITONCLIENT)
    return CLIENT_VENV / "bin" / "python"


def health_serving(address: str) -> str:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for reply in stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=300):
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    raise AssertionError(f"{address}: health never SERVING")


def check_serving(container: Container, work: Path, client_python: Path) -> dict[str, object]:
    """What every image must do while serving the repository; the client's report."""
    ports = container.ports
    grpc_address = f"127.0.0.1:{ports['grpc_port']}"
    assert health_serving(grpc_address) == "SERVING"
    # Non-root: the server process, seen from the host (rootful podman, no user namespace).
    status = Path(f"/proc/{container.host_pid()}/status").read_text()
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)", status, re.M)
    assert uids and (int(uids[1]), int(uids[2])) == (UID, UID), status
    done = subprocess.run([client_python, CLIENTS, "--grpc", grpc_address, "--http",
                           f"127.0.0.1:{ports['http_port']}", "--work", work],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "DONE" in done.stdout, (
        done.stdout + done.stderr + container.logs()[-4000:])
    report = json.loads((work / "result.json").read_text())
    got = dict(np.load(work / "outputs.npz"))
    cases = json.loads((work / "cases.json").read_text())
    want = dict(np.load(work / "cases.npz"))
    compared = 0
    for model, model_cases in cases.items():
        for case, spec in model_cases.items():
            for name in spec["outputs"]:
                expected = want[f"{model}/{case}/out/{name}"]
                for transport in ("grpc", "http"):
                    actual = got[f"{transport}/{model}/{case}/{name}"]
                    assert actual.dtype == expected.dtype and actual.shape == expected.shape
                    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL,
                                               err_msg=f"{transport} {model} {case} {name}")
                    compared += 1
    assert compared >= 4, compared
    with urllib.request.urlopen(f"http://127.0.0.1:{ports['metrics_port']}/metrics",
                                timeout=60) as reply:
        assert reply.status == 200
        metrics = reply.read().decode()
    for model in cases:
        m = re.search(rf'^nv_inference_request_success{{[^}}]*model="{model}"[^}}]*}} (\S+)$',
                      metrics, re.M)
        assert m and float(m[1]) >= 2 * len(cases[model]), (model, metrics[:3000])
    return report


def python_image_space(tag: str) -> str:
    """What takes the space in the Python image: the base, the plugin, the largest installed
    distributions (du inside the image)."""
    script = (
        "import os, sys\n"
        "def du(p):\n"
        "    if os.path.isfile(p): return os.lstat(p).st_size\n"
        "    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(p)"
        " for f in fs)\n"
        "sp = [p for p in sys.path if p.endswith('site-packages')][0]\n"
        "rows = sorted(((du(os.path.join(sp, n)), n) for n in os.listdir(sp)), reverse=True)\n"
        f"print('plugin', du('{PLUGIN_IN_IMAGE}'))\n"
        "print('venv', du('/opt/jaxport'))\n"
        "print('usr (base)', du('/usr'))\n"
        "for size, name in rows[:12]: print(name, size)\n")
    out = podman("run", "--rm", "--entrypoint", "/opt/jaxport/bin/python", tag, "-c", script)
    return "\n".join(f"  {name:<28} {int(size) / 1e6:8.1f} MB"
                     for name, size in (ln.rsplit(" ", 1) for ln in out.stdout.splitlines()))


@pytest.mark.slow  # builds the image (the cgo front, JAX & co. and the plugin: 10+ min cold)
def test_python_image_serves_natively(bases: dict[str, str], repository: tuple[Path, Path],
                                      client_python: Path) -> None:
    tag = "localhost/jaxport-test/jaxport-serve:latest"
    seconds = build("bridge/deploy/kserve/Containerfile", tag,
                    {"BASE": bases["python"], "GO_IMAGE": bases["go"]})
    repo, work = repository
    args = ["--repository=/mnt/models", "--host=127.0.0.1", "--port=0", "--metrics-port=0",
            "--http-port=0", "--batching-models=batched:2000"]
    with Container(tag, args, {repo: "/mnt/models"}, work / "python") as container:
        report = check_serving(container, work, client_python)
        logs = container.logs()
    assert container.exit_code == 0, logs[-4000:]
    assert report["server_ready"] == [True, True]
    for model in ("example", "batched"):
        assert report[model]["engine"] == "native", report
        assert report[model]["ready"] == [True, True], report
    assert report["batched"]["max_batch_size"] == 8 and report["batched"]["dynamic_batching"]
    engine = [json.loads(ln) for ln in logs.splitlines()
              if ln.startswith("{") and '"msg":"native engine' in ln]
    assert [r["msg"] for r in engine] == ["native engine on"], engine
    assert str(engine[0]["plugin"]).startswith(f"{PLUGIN_IN_IMAGE} (cpu, PJRT API"), engine
    size = image_size(tag)
    print(f"\nimage {tag} (BASE {bases['python']}): {size / 1e6:.0f} MB, built in "
          f"{seconds:.0f} s\n{python_image_space(tag)}")


@pytest.mark.slow  # builds the image (the cgo front and the plugin download: minutes cold)
def test_native_image_serves_without_python(bases: dict[str, str], repository: tuple[Path, Path],
                                            client_python: Path) -> None:
    """The Python-free image: the front alone (no child process, so no Python worker) serves
    the repository the native engine runs whole; goal <= 300 MB."""
    tag = "localhost/jaxport-test/jaxport-front:latest"
    seconds = build("bridge/deploy/kserve/Containerfile.native", tag,
                    {"BASE": bases["native"], "BUILD_BASE": bases["python"],
                     "GO_IMAGE": bases["go"]})
    repo, work = repository
    args = ["--repository=/mnt/models", "--host=127.0.0.1", "--port=0", "--metrics-port=0",
            "--http-port=0", "--batching-models=batched:2000"]
    with Container(tag, args, {repo: "/mnt/models"}, work / "native") as container:
        report = check_serving(container, work, client_python)
        pid = container.host_pid()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        logs = container.logs()
    assert container.exit_code == 0, logs[-4000:]
    assert children == [], children  # no worker process: nothing but the front runs
    for model in ("example", "batched"):
        assert report[model]["engine"] == "native", report
    engine = [json.loads(ln) for ln in logs.splitlines()
              if ln.startswith("{") and '"msg":"native engine' in ln]
    assert [r["msg"] for r in engine] == ["native engine on"], engine
    assert str(engine[0]["plugin"]).startswith(f"{NATIVE_PLUGIN} (cpu, PJRT API"), engine
    size = image_size(tag)
    print(f"\nimage {tag} (BASE {bases['native']}): {size / 1e6:.0f} MB, built in "
          f"{seconds:.0f} s")
    assert size <= 300e6, size
