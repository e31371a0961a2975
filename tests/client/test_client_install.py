"""`clients/python` installs from PyPI into a fresh venv WITHOUT JAX and works there.

The venv is made by the project's interpreter (`python -m venv`, no system site packages) and
`pip install`s a copy of clients/python (a copy, so the build leaves nothing in the tree).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from client_helpers import Server

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def run(*cmd: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("client-venv")
    source = root / "src"
    shutil.copytree(
        REPO / "clients/python", source,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist"),
    )
    venv = root / "venv"
    done = run(sys.executable, "-m", "venv", venv)
    assert done.returncode == 0, done.stderr
    done = run(venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
               source)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def test_imports_without_jax(client_venv: Path) -> None:
    code = (
        "import sys\n"
        "import jaxport.client, jaxport.protocol.codecs, jaxport.protocol.errors, jaxport.cli\n"
        "from jaxport.protocol.gen.inference import grpc_service_pb2_grpc\n"
        "from jaxport.protocol.gen.jaxport.v1 import manifest_pb2\n"
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
