"""jaxport's platform wheel (`make wheel`, bridge/front/build_wheel.py) carries the native front:
installed with the client wheel into a fresh venv whose PATH has no `go`, `jaxport export`
writes the bundled example model and `jaxport serve` answers it through the front the wheel
shipped, with the artifact's goldens. And where `jaxport serve` looks for the front
(bridge/cli.py `front_binary`): `--front-binary`, the package's, next to the Python.

The wheel tests are slow (the build, then pip installing jax and the rest from the package
index into the venv: minutes); the lookup order is not.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.bridge import BridgeProcess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = "jaxport.exporter.examples"  # the bundled model of `make demo` (exporter/demo.py)
MODEL = "example"
FRONT_IN_WHEEL = "jaxport/bridge/bin/jaxport-front"

#: Run by the venv's Python (`-I`: nothing from the checkout): every golden case of the artifact
#: through the installed client, outputs compared with the goldens by the artifact format's
#: float32 rule (docs/artifact-format.md, Tolerances: |actual - expected| <= 1e-5 + 1e-4|e|).
CALL_GOLDENS = """
import json, sys
import numpy as np
import jaxport.artifact, jaxport.client

url, model, artifact_dir = sys.argv[1:]
checked = []
with jaxport.client.InferenceClient(url) as client:
    for case in jaxport.artifact.open(artifact_dir).goldens():
        got = client.infer(model, dict(case.inputs), timeout=60).outputs
        assert sorted(got) == sorted(case.outputs), (sorted(got), sorted(case.outputs))
        for name, want in case.outputs.items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{case.name}: {name}")
        checked.append(case.name)
print(json.dumps({"cases": checked, "client": jaxport.client.__file__,
                  "artifact": jaxport.artifact.__file__}))
"""


def run(*cmd: str | Path, timeout: float = 600,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`make wheel`: jaxport's platform wheel and the client wheel it depends on."""
    out = tmp_path_factory.mktemp("wheels")
    done = run("make", "-s", "-C", REPO, "wheel", f"JAXPORT_DIST={out / 'jaxport'}",
               f"CLIENT_DIST={out / 'client'}", timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    (jaxport,) = (out / "jaxport").glob("jaxport-*.whl")
    (client,) = (out / "client").glob("jaxport_client-*-py3-none-any.whl")
    return {"jaxport": jaxport, "client": client}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Path:
    """A fresh venv of this interpreter's base Python with both wheels installed (their
    dependencies from the package index)."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    done = run(sys.executable, "-m", "venv", venv)
    assert done.returncode == 0, done.stderr
    done = run(venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
               wheels["client"], wheels["jaxport"], timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def path_without_go(venv: Path) -> str:
    """PATH for the installed venv: its bin, then this PATH's directories that have no `go`
    and are not inside the checkout."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and shutil.which("go", path=d) is None
            and not Path(d).resolve().is_relative_to(REPO)]
    return os.pathsep.join([str(venv / "bin"), *dirs])


@pytest.mark.slow
def test_wheel_is_a_platform_wheel_carrying_a_static_front(wheels: dict[str, Path],
                                                           tmp_path: Path) -> None:
    wheel = wheels["jaxport"]
    assert wheel.name.startswith("jaxport-0.1.0-py3-none-")
    assert not wheel.name.endswith("-any.whl")
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(FRONT_IN_WHEEL)
        assert (info.external_attr >> 16) & 0o111 == 0o111, oct(info.external_attr >> 16)
        wheel_meta = z.read("jaxport-0.1.0.dist-info/WHEEL").decode()
        names = z.namelist()
        binary = tmp_path / "jaxport-front"
        binary.write_bytes(z.read(info))
    # Platlib root (it holds a binary); no Go sources or build tooling shipped.
    assert "Root-Is-Purelib: false" in wheel_meta
    assert not any(n.endswith((".go", "go.mod", "build_wheel.py")) for n in names)
    assert {"jaxport/bridge/cli.py", "jaxport/exporter/examples.py",
            "jaxport/artifact/reader.py"} <= set(names)
    settings = run("go", "version", "-m", binary).stdout
    assert "build\tCGO_ENABLED=0" in settings and "build\t-trimpath=true" in settings, settings
    assert str(REPO).encode() not in binary.read_bytes()  # no build paths inside


@pytest.mark.slow
def test_installed_wheel_serves_on_its_front_without_go(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing from the checkout or this session may leak in: no JAXPORT_* setting (e.g.
    # JAXPORT_FRONT_BINARY), no PYTHONPATH, cwd outside the tree, no go on PATH.
    for var in [v for v in os.environ if v.startswith("JAXPORT_") or v == "PYTHONPATH"]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)
    path = path_without_go(installed)
    assert shutil.which("go", path=path) is None
    env = {**os.environ, "PATH": path}
    artifact = tmp_path / "repo" / MODEL / "1"
    done = run(installed / "bin/jaxport", "export", f"{EXAMPLES}:predict", "--params",
               f"{EXAMPLES}:init", "--input", "x:float32[4,16]", "--out", artifact, "--quiet",
               env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = run(installed / "bin/python", "-I", "-c",
                  "from jaxport.bridge import cli; print(cli.PACKAGED_FRONT)", env=env)
    front = Path(shipped.stdout.strip())
    assert front.is_relative_to(installed) and front.is_file(), shipped.stdout + shipped.stderr

    server = BridgeProcess(tmp_path / "repo", "--workers", "1",
                           command=[str(installed / "bin/jaxport"), "serve"],
                           env={"PATH": path}, workdir=tmp_path / "serve")
    with server:
        # `jaxport serve` exec'd the wheel's front: the process started is that binary.
        assert Path(os.readlink(f"/proc/{server.pid}/exe")) == front.resolve()
        assert "jaxport front: listening on 127.0.0.1:" in server.stdout_text()
        done = run(installed / "bin/python", "-I", "-c", CALL_GOLDENS, server.address, MODEL,
                   artifact, env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr + server.log_text()[-4000:]
    assert server.proc is not None and server.proc.returncode == 0, server.log_text()[-4000:]
    report = json.loads(done.stdout)
    assert report["cases"], report
    for module in ("client", "artifact"):
        assert Path(report[module]).is_relative_to(installed), report


def test_front_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--front-binary`, else the package's front when executable, else next to the Python."""
    from jaxport.bridge import cli
    from jaxport.bridge.settings import Settings

    packaged = tmp_path / "bin" / "jaxport-front"
    monkeypatch.setattr(cli, "PACKAGED_FRONT", packaged)
    beside = Path(sys.executable).parent / "jaxport-front"
    default = Settings.from_argv(["--repository", str(tmp_path)], environ={})
    assert cli.front_binary(default) == beside  # a checkout: no front in the package
    packaged.parent.mkdir()
    packaged.write_bytes(b"")
    assert cli.front_binary(default) == beside  # not executable: not a front
    packaged.chmod(0o755)
    assert cli.front_binary(default) == packaged
    given = Settings.from_argv(["--repository", str(tmp_path), "--front-binary",
                                str(tmp_path / "mine")], environ={})
    assert cli.front_binary(given) == tmp_path / "mine"
