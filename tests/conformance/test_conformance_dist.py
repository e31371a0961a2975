"""The suite as a tool other server teams install (issue 29): the `jaxport-conformance` wheel of
`make conformance-dist` installs into a fresh venv where JAX is NOT importable, and its console
script judges a live `jaxport serve` (core profile, gRPC and REST) with JUnit XML whose counts
are the text report's; the Go runner, `go install`ed into a temporary GOBIN, reaches the same
core-profile result. The venv gets grpcio/protobuf/numpy from the package index (as the
client wheel's test does); the bridge serves one suite model (the core profile needs none, but
a server with a model is the realistic one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (REPO / "tests", HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from support.bridge import BridgeProcess  # noqa: E402

pytestmark = pytest.mark.slow

SUMMARY = re.compile(r"^conformance ([\w-]+): (\d+) passed, (\d+) failed"
                     r"(?:, (\d+) not applicable)?$", re.MULTILINE)
CASES = sorted(json.loads(p.read_text())["requires"] == [] for p in (HERE / "cases").glob("*.json"))
CORE = sum(CASES)  # cases of the core profile (no "requires")
TOTAL = len(CASES)


def run(*cmd: str | Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kw)


def summary(stdout: str) -> tuple[str, int, int, int]:
    """(label, passed, failed, not applicable) of a runner's last summary line."""
    found = SUMMARY.findall(stdout)
    assert found, stdout
    label, passed, failed, na = found[-1]
    return label, int(passed), int(failed), int(na or 0)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("conformance-dist")
    done = run("make", "-s", "-C", REPO, "conformance-dist", f"CONFORMANCE_DIST={out}")
    assert done.returncode == 0, done.stdout + done.stderr
    (whl,) = out.glob("jaxport_conformance-*-py3-none-any.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    root = tmp_path_factory.mktemp("conformance-venv") / "venv"
    done = run(sys.executable, "-m", "venv", root)
    assert done.returncode == 0, done.stderr
    done = run(root / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
               wheel)
    assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    import models

    repo = tmp_path_factory.mktemp("conformance-repo")
    models.export_model(models.by_name("cf_fp32"), repo / "cf_fp32" / "1")
    with BridgeProcess(repo, "--http-port", "0") as b:
        yield b


def test_wheel_carries_the_suite_and_no_jax(wheel: Path, venv: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        requires = [line for line in z.read(next(n for n in names if n.endswith("METADATA")))
                    .decode().splitlines() if line.startswith("Requires-Dist:")]
    cases = {p.name for p in (HERE / "cases").glob("*.json")}
    assert {n.rsplit("/", 1)[-1] for n in names if "/data/cases/" in n and n.endswith(".json")
            } == cases
    assert "jaxport_conformance/data/features.json" in names
    assert "jaxport_conformance/_gen/grpc_service_pb2_grpc.py" in names
    assert sorted(r.split()[1].split(">")[0].split("<")[0] for r in requires) == [
        "grpcio", "numpy", "protobuf"]
    assert "jaxport_conformance/kit/reference.py" in names
    for module in ("jax", "jaxlib", "jaxport"):
        done = run(venv / "bin/python", "-I", "-c", f"import {module}")
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, (module, done)


def test_installed_model_kit_runs_without_jax(venv: Path, tmp_path: Path) -> None:
    done = run(venv / "bin/jaxport-conformance", "--write-kit", tmp_path / "kit")
    assert done.returncode == 0, done.stdout + done.stderr
    code = ("import numpy as np, reference; "
            "out = reference.MODELS['cf_multi'].run({'alpha': np.ones((2, 3), np.float32), "
            "'beta': np.array([1, -5, 0], np.int32)}); print(out['positives'], "
            "out['total'].tolist())")
    done = run(venv / "bin/python", "-c", code, cwd=tmp_path / "kit")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(None, 1) == ["[4]", "[[2.0, -7.0, 0.5], [2.0, -7.0, 0.5]]\n"]


@pytest.mark.parametrize("transport", ["grpc", "rest"])
def test_installed_runner_core_profile_with_junit(venv: Path, server: BridgeProcess,
                                                  tmp_path: Path, transport: str) -> None:
    ports = json.loads(server.port_file.read_text())
    url = f"127.0.0.1:{ports['http_port'] if transport == 'rest' else server.port}"
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    done = run(venv / "bin/jaxport-conformance", "--url", url, "--features", "core",
               "--transport", transport, "--junit", junit, "--json", report, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    label, passed, failed, na = summary(done.stdout)
    assert label == ("python-rest" if transport == "rest" else "python")
    # Every core case passes (none is REST-less); every other case is N/A, not failed.
    assert (passed, failed, na) == (CORE, 0, TOTAL - CORE), done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (int(suite.get("tests")), int(suite.get("failures")), int(suite.get("skipped"))) == (
        passed + failed + na, failed, na)
    cases = suite.findall("testcase")
    assert len(cases) == passed + failed + na
    assert sum(c.find("skipped") is not None for c in cases) == na
    doc = json.loads(report.read_text())
    assert (doc["passed"], doc["failed"], doc["not_applicable"]) == (passed, failed, na)


def test_installed_runner_reports_failures_in_junit(venv: Path, server: BridgeProcess,
                                                    tmp_path: Path) -> None:
    """The jaxport-models profile against a server serving one of its models: the cases of the
    other models FAIL (NOT_FOUND), exit 1, and the XML's failures are the text's."""
    junit = tmp_path / "out.xml"
    done = run(venv / "bin/jaxport-conformance", "--url", server.address, "--features",
               "jaxport-models", "--run", "infer_", "--junit", junit)
    assert done.returncode == 1, done.stdout + done.stderr
    _, passed, failed, na = summary(done.stdout)
    assert failed > 0 and passed > 0
    assert "FAIL infer_int8_raw: status NOT_FOUND" in done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (int(suite.get("failures")), int(suite.get("skipped"))) == (failed, na)
    failures = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert len(failures) == failed
    assert "NOT_FOUND" in failures[0].find("failure").get("message")


def test_installed_runner_usage_errors(venv: Path, tmp_path: Path) -> None:
    profile = tmp_path / "profile.txt"
    profile.write_text("# what my server claims\njaxport-models, bf16\nnonsense-feature\n")
    done = run(venv / "bin/jaxport-conformance", "--url", "127.0.0.1:1", "--features", profile)
    assert done.returncode == 2
    assert "unknown feature(s) ['nonsense-feature']" in done.stderr
    done = run(venv / "bin/jaxport-conformance", "--url", "127.0.0.1:1", "--cases",
               tmp_path / "absent")
    assert done.returncode == 2 and f"no case directory {tmp_path / 'absent'}" in done.stderr
    (tmp_path / "cases").mkdir()
    done = run(venv / "bin/jaxport-conformance", "--url", "127.0.0.1:1", "--cases",
               tmp_path / "cases")
    assert done.returncode == 2
    assert f"no feature table {tmp_path / 'features.json'}" in done.stderr


def test_go_install_gives_the_same_core_result(server: BridgeProcess, tmp_path: Path) -> None:
    if shutil.which("go") is None:
        pytest.fail("go is required (go install of clients/go/cmd/jaxport-conformance)")
    gobin = tmp_path / "gobin"
    done = run("go", "install", "./cmd/jaxport-conformance", cwd=REPO / "clients" / "go",
               env={**os.environ, "GOBIN": str(gobin)})
    assert done.returncode == 0, done.stdout + done.stderr
    junit = tmp_path / "go.xml"
    done = run(gobin / "jaxport-conformance", "--url", server.address, "--features", "core",
               "--cases", HERE / "cases", "--junit", junit, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    label, passed, failed, na = summary(done.stdout)
    assert (label, passed, failed, na) == ("go", CORE, 0, TOTAL - CORE), done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (int(suite.get("tests")), int(suite.get("failures")), int(suite.get("skipped"))) == (
        TOTAL, 0, TOTAL - CORE)
