"""`jaxport model list|load|unload --url`: the real command (a subprocess, no JAX) against a
REAL bridge of its own (load/unload change what it serves); what it did is checked with
`jaxport.client` calls to the same server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest
from client_models import echo
from jaxport.client import InferenceClient
from support.bridge import EXPLICIT, BridgeProcess

JAXPORT = Path(sys.executable).parent / "jaxport"
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def jaxport(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(JAXPORT), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stdout == "", (done.stdout, done.stderr)
    return lines[0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`alpha` and `beta` (y = x, FP32 [2, 3]), a spare copy outside the repository for a
    model added while serving, and `broken` (a version whose manifest is not JSON)."""
    from jaxport.exporter import export

    root = tmp_path_factory.mktemp("model-cli")
    repo = root / "repo"
    spec = {"x": jax.ShapeDtypeStruct((2, 3), np.float32)}
    export(echo, {}, spec, root / "spare" / "1", output_names=("y",), goldens=1, quiet=True)
    for name in ("alpha", "beta"):
        shutil.copytree(root / "spare", repo / name)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "manifest.json").write_text("{not json")
    return repo


@pytest.fixture(scope="module")
def bridge(repo: Path) -> Iterator[BridgeProcess]:
    with BridgeProcess(repo, *EXPLICIT) as b:  # load/unload change what it serves
        yield b


def test_list(bridge: BridgeProcess) -> None:
    done = jaxport("model", "list", "--url", bridge.address)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "ENGINE", "REASON"]
    rows = {line.split()[0]: line.split(maxsplit=4) for line in lines[1:]}
    # A ready version shows the engine serving it (the front's native engine here).
    assert rows["alpha"][1:4] == ["1", "READY", "native"]
    assert rows["beta"][1:4] == ["1", "READY", "native"]
    assert rows["broken"][1:4] == ["1", "UNAVAILABLE", "-"]
    assert "manifest.json" in rows["broken"][4]

    done = jaxport("model", "list", "--url", bridge.address, "--ready", "--json")
    assert done.returncode == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    assert {(e["name"], e["version"], e["state"], e["engine"]) for e in entries} >= \
        {("alpha", "1", "READY", "native"), ("beta", "1", "READY", "native")}
    assert "broken" not in {e["name"] for e in entries}


def test_unload_then_load(bridge: BridgeProcess) -> None:
    done = jaxport("model", "unload", "beta", "--url", bridge.address)
    assert (done.returncode, done.stdout.strip()) == (0, "unloaded beta"), done.stderr
    with InferenceClient(bridge.address) as client:
        assert client.model_ready("beta") is False
        assert client.model_ready("alpha") is True
        listed = jaxport("model", "list", "--url", bridge.address).stdout
        assert any(line.split()[:5] == ["beta", "1", "UNAVAILABLE", "-", "unloaded"]
                   for line in listed.splitlines()), listed

        done = jaxport("model", "load", "beta", "--url", bridge.address)
        assert (done.returncode, done.stdout.strip()) == (0, "loaded beta: version(s) 1 ready")
        np.testing.assert_array_equal(client.infer("beta", {"x": X}).outputs["y"], X)


def test_load_a_model_added_while_serving(bridge: BridgeProcess, repo: Path) -> None:
    shutil.copytree(repo.parent / "spare", repo / "gamma")
    done = jaxport("model", "load", "gamma", "--url", bridge.address)
    assert (done.returncode, done.stdout.strip()) == (0, "loaded gamma: version(s) 1 ready")
    with InferenceClient(bridge.address) as client:
        np.testing.assert_array_equal(client.infer("gamma", {"x": X}).outputs["y"], X)


@pytest.mark.parametrize("args, needle", [
    (["load", "nope"], "jaxport model: error: NOT_FOUND: unknown model 'nope'"),
    (["unload", "nope"], "jaxport model: error: NOT_FOUND: unknown model 'nope': nothing to "
                         "unload"),
    (["load", "broken"], "jaxport model: error: FAILED_PRECONDITION: model 'broken' failed to "
                         "load: "),
])
def test_server_errors_are_one_line_with_the_status(bridge: BridgeProcess, args: list[str],
                                                    needle: str) -> None:
    done = jaxport("model", *args, "--url", bridge.address)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith(needle), line
    if args[1] == "broken":
        assert "manifest.json" in line


def test_unreachable_server() -> None:
    done = jaxport("model", "list", "--url", "127.0.0.1:1", "--timeout", "5")
    assert done.returncode == 1
    assert one_error_line(done).startswith("jaxport model: error: UNAVAILABLE: ")


@pytest.mark.parametrize("args, needle", [
    ([], "the following arguments are required: {list,load,unload}"),
    (["drop", "--url", "x:1"], "invalid choice: 'drop'"),
    (["load", "--url", "x:1"], "the following arguments are required: MODEL"),
    (["list"], "the following arguments are required: --url"),
])
def test_usage_errors(args: list[str], needle: str) -> None:
    done = jaxport("model", *args)
    assert done.returncode == 2
    line = one_error_line(done)
    assert line.startswith("jaxport model") and needle in line, line


def test_model_does_not_import_jax() -> None:
    code = ("import sys; from jaxport.cli import main; rc = main(['model', 'list', '--help']); "
            "sys.exit(3 if 'jax' in sys.modules else rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--ready" in done.stdout and "--url" in done.stdout
