"""The `jaxport-client` wheel built by `make client-wheel` installs into a fresh venv WITHOUT
JAX (its dependencies from PyPI) and works there: the CLI, and the examples against a live
bridge.

The venv is made by the project's interpreter (`python -m venv`, no system site packages); the
wheel and sdist are built into a temporary directory (the Makefile target builds from a copy, so
nothing is left in the tree; `support.client_wheel`). What the wheel must NOT carry (the bridge,
the server's codecs, the manifest schema) is checked in tests/artifact/test_import_graph.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from client_helpers import Server
from support.client_wheel import build_client_dist

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(*cmd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and sdist of `make client-wheel`."""
    out = tmp_path_factory.mktemp("client-dist")
    build_client_dist(out)
    return out


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> Path:
    root = tmp_path_factory.mktemp("client-venv")
    (wheel,) = dist.glob("jaxport_client-*-py3-none-any.whl")
    venv = root / "venv"
    done = run(sys.executable, "-m", "venv", venv)
    assert done.returncode == 0, done.stderr
    done = run(venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
               wheel)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def test_wheel_and_sdist_contents(dist: Path) -> None:
    (wheel,) = dist.glob("jaxport_client-0.1.0-py3-none-any.whl")
    (sdist,) = dist.glob("jaxport_client-0.1.0.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for module in ("jaxport/client/inference.py", "jaxport/client/aio.py", "jaxport/cli.py",
                   "jaxport/protocol/codecs.py",
                   "jaxport/protocol/gen/inference/grpc_service_pb2_grpc.py"):
        assert module in names, module
    with tarfile.open(sdist) as t:
        members = set(t.getnames())
    assert {"jaxport_client-0.1.0/pyproject.toml",
            "jaxport_client-0.1.0/jaxport/client/aio.py"} <= members


@pytest.mark.parametrize("example", ["basic.py", "async_infer.py"])
def test_examples_from_the_installed_wheel(
    client_venv: Path, server: Server, example: str, tmp_path: Path
) -> None:
    # Run from a copy outside the tree, so `jaxport` can only come from the venv.
    script = tmp_path / example
    shutil.copy(REPO / "clients/python/examples" / example, script)
    done = run(client_venv / "bin/python", "-I", script, server.url, "echo", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "y: float32 [3]" in done.stdout


def test_imports_without_jax(client_venv: Path) -> None:
    code = (
        "import sys\n"
        "import jaxport.client, jaxport.protocol.codecs, jaxport.protocol.errors, jaxport.cli\n"
        "from jaxport.protocol.gen.inference import grpc_service_pb2_grpc\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
        "try:\n"
        "    import jax\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('jax is installed in the client venv')\n"
        "print(jaxport.client.__file__)\n"
    )
    done = run(client_venv / "bin/python", "-c", code)
    assert done.returncode == 0, done.stderr
    assert str(client_venv) in done.stdout  # the installed copy, not the work tree


def test_cli_without_the_full_distribution(client_venv: Path) -> None:
    done = run(client_venv / "bin/jaxport", "--version")
    assert done.returncode == 0
    assert "jaxport-client 0.1.0" in done.stdout and "not installed" in done.stdout
    for command in ("export", "verify", "serve"):
        done = run(client_venv / "bin/jaxport", command, "--help")
        assert done.returncode == 1
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"jaxport {command}: error: ")
        assert "pip install jaxport" in lines[0]


def test_infer_from_the_installed_client(
    client_venv: Path, server: Server, tmp_path: Path
) -> None:
    np.save(tmp_path / "x.npy", np.arange(3, dtype=np.float32))
    done = run(client_venv / "bin/jaxport", "infer", "--url", server.url, "--model", "echo",
               "--input", f"x=@{tmp_path / 'x.npy'}", "--json")
    assert done.returncode == 0, done.stderr
    assert '"data": [0.0, 1.0, 2.0]' in done.stdout
