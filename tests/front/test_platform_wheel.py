"""jaxport's platform wheel (`make wheel`, bridge/front/build_wheel.py) serves natively without a
toolchain: installed with the client wheel into a fresh venv whose PATH has none of `go`, `gcc`,
`cc`, the documented command `jaxport pjrt install cpu` fetches the pinned CPU plugin into the
venv, `jaxport export` writes the bundled example model and a batched one, and `jaxport serve`
executes both on the native engine (ModelConfig `engine` = `native`) with the artifacts'
goldens as answers. The wheel's tag is honest: `manylinux_2_<N>`, N the highest glibc symbol
version the front (objdump -T) or the plugin it loads needs. (Where `jaxport serve` looks for
the front: tests/bridge/test_serve_cli.py::test_lookup_order.)

Slow: the cgo build, then pip installing jax and the rest from the package index into the
venv, the plugin download (minutes).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.bridge import BridgeProcess

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = "jaxport.exporter.examples"  # the bundled model of `make demo` (exporter/demo.py)
FRONT_IN_WHEEL = "jaxport/bridge/bin/jaxport-front"
#: What the installed venv must do without: the brief's "no Go, gcc or cc" (and their kin).
TOOLCHAIN = ("go", "gcc", "cc", "c++", "g++", "clang", "zig")

#: Run by the venv's Python (`-I`: nothing from the checkout): every golden case of each
#: artifact through the installed client, outputs compared with the goldens by the artifact
#: format's float32 rule (docs/artifact-format.md, Tolerances: |actual - expected| <= 1e-5 +
#: 1e-4|e|), and each model's ModelConfig (engine, max_batch_size, batching).
CALL_GOLDENS = """
import json, sys
import numpy as np
import jaxport.artifact, jaxport.client

url, models = sys.argv[1], json.loads(sys.argv[2])
report = {"client": jaxport.client.__file__, "artifact": jaxport.artifact.__file__}
with jaxport.client.InferenceClient(url) as client:
    for model, artifact_dir in models.items():
        checked = []
        for case in jaxport.artifact.open(artifact_dir).goldens():
            got = client.infer(model, dict(case.inputs), timeout=60).outputs
            assert sorted(got) == sorted(case.outputs), (sorted(got), sorted(case.outputs))
            for name, want in case.outputs.items():
                assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5,
                                           err_msg=f"{model} {case.name}: {name}")
            checked.append(case.name)
        cfg = client.model_config(model, timeout=60)
        report[model] = {"cases": checked, "engine": cfg.parameters["engine"].string_value,
                         "max_batch_size": cfg.max_batch_size,
                         "batching": cfg.HasField("dynamic_batching")}
print(json.dumps(report))
"""


def run(*cmd: str | Path, timeout: float = 600,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                          env=env)


def path_without_toolchain(first: Path | None = None) -> str:
    """This PATH without the directories that hold a compiler or Go, or lie inside the
    checkout; `first` (a venv's bin) in front."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(shutil.which(t, path=d) for t in TOOLCHAIN)
            and not Path(d).resolve().is_relative_to(REPO)]
    return os.pathsep.join([*([str(first)] if first else []), *dirs])


def highest(binary: Path, prefix: str) -> tuple[int, ...]:
    """The highest `PREFIX_x.y[.z]` symbol version `objdump -T` lists for `binary`."""
    out = run("objdump", "-T", binary).stdout
    found = {tuple(int(p) for p in v.split(".")) for v in re.findall(rf"\b{prefix}_([0-9.]+)\b",
                                                                     out)}
    assert found, f"{binary}: no {prefix}_ symbol versions"
    return max(found)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`make wheel`: jaxport's platform wheel and the client wheel it depends on."""
    out = tmp_path_factory.mktemp("wheels")
    done = run("make", "-s", "-C", REPO, "wheel", f"JAXPORT_DIST={out / 'jaxport'}",
               f"CLIENT_DIST={out / 'client'}", timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    (jaxport,) = (out / "jaxport").glob("jaxport-*.whl")
    (client,) = (out / "client").glob("jaxport_client-*-py3-none-any.whl")
    print(f"\nwheel {jaxport.name}: {jaxport.stat().st_size / 2**20:.1f} MiB; "
          f"{done.stderr.strip()}")
    return {"jaxport": jaxport, "client": client}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Path:
    """A fresh venv of this interpreter's base Python with both wheels installed (their
    dependencies from the package index), on a PATH with no toolchain."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    done = run(sys.executable, "-m", "venv", venv)
    assert done.returncode == 0, done.stderr
    env = {**os.environ, "PATH": path_without_toolchain(venv / "bin")}
    done = run(venv / "bin/python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
               wheels["client"], wheels["jaxport"], timeout=1800, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


@pytest.mark.slow  # builds the front with cgo (zig, a few minutes cold)
def test_wheel_is_tagged_for_the_glibc_its_front_and_plugin_need(wheels: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    from jaxport.bridge import pjrt

    wheel = wheels["jaxport"]
    tag = wheel.name.removesuffix(".whl").split("-")[-1]
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(FRONT_IN_WHEEL)
        assert (info.external_attr >> 16) & 0o111 == 0o111, oct(info.external_attr >> 16)
        wheel_meta = z.read("jaxport-0.1.0.dist-info/WHEEL").decode()
        names = z.namelist()
        binary = tmp_path / "jaxport-front"
        binary.write_bytes(z.read(info))
    # Platlib root (it holds a binary); no Go sources or build tooling shipped.
    assert "Root-Is-Purelib: false" in wheel_meta
    assert f"Tag: py3-none-{tag}" in wheel_meta
    assert not any(n.endswith((".go", "go.mod", "build_wheel.py")) for n in names)
    assert {"jaxport/bridge/cli.py", "jaxport/bridge/pjrt.py", "jaxport/exporter/examples.py",
            "jaxport/artifact/reader.py"} <= set(names)
    settings = run("go", "version", "-m", binary).stdout
    assert "build\tCGO_ENABLED=1" in settings and "build\t-trimpath=true" in settings, settings
    assert str(REPO).encode() not in binary.read_bytes()  # no build paths inside
    # The front, compiled by zig for glibc 2.17, needs nothing newer (measured: GLIBC_2.3.2);
    # the pinned plugin needs 2.27 (and GLIBCXX/CXXABI within manylinux_2_27's: gcc 7's).
    front = highest(binary, "GLIBC")
    plugin_so = REPO / "build" / "pjrt" / pjrt.CPU.library  # make setup installs it
    plugin = highest(plugin_so, "GLIBC")
    assert front <= (2, 17), front
    assert plugin[:2] == pjrt.CPU.glibc, plugin
    assert highest(plugin_so, "GLIBCXX") <= (3, 4, 24)
    assert highest(plugin_so, "CXXABI") <= (1, 3, 11)
    major, minor = max(front[:2], plugin[:2])
    assert tag == f"manylinux_{major}_{minor}_x86_64", tag
    print(f"\nfront GLIBC_{'.'.join(map(str, front))}, plugin GLIBC_"
          f"{'.'.join(map(str, plugin))}: {tag}")


@pytest.mark.slow  # the wheels above, pip installing jax & co. and the plugin from the index
def test_installed_wheel_serves_natively_without_a_toolchain(
        installed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing from the checkout or this session may leak in: no JAXPORT_* setting (e.g.
    # JAXPORT_FRONT_BINARY, JAXPORT_PJRT_PLUGIN), no PYTHONPATH, cwd outside the tree (the
    # front would find build/pjrt under it), no go/gcc/cc on PATH.
    for var in [v for v in os.environ if v.startswith("JAXPORT_") or v == "PYTHONPATH"]:
        monkeypatch.delenv(var)
    monkeypatch.chdir(tmp_path)
    path = path_without_toolchain(installed / "bin")
    assert all(shutil.which(t, path=path) is None for t in TOOLCHAIN), path
    env = {**os.environ, "PATH": path}
    jaxport = installed / "bin" / "jaxport"

    # The one documented command: the plugin into the venv, where the front looks.
    done = run(jaxport, "pjrt", "install", "cpu", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    plugin = installed / "share" / "jaxport" / "pjrt" / "cpu" / "pjrt_c_api_cpu_plugin.so"
    assert f"installed the cpu plugin: {plugin}" in done.stdout, done.stdout
    again = run(jaxport, "pjrt", "install", "cpu", env=env)  # a no-op once there
    assert again.returncode == 0 and "is installed" in again.stdout, again.stdout + again.stderr

    repo = tmp_path / "repo"
    artifacts = {"example": repo / "example" / "1", "batched": repo / "batched" / "1"}
    for args in (["--input", "x:float32[4,16]", "--out", artifacts["example"]],
                 ["--input", "x:float32[B,16]", "--batch-sizes", "1,4,8", "--out",
                  artifacts["batched"]]):
        done = run(jaxport, "export", f"{EXAMPLES}:predict", "--params", f"{EXAMPLES}:init",
                   *args, "--quiet", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    shipped = run(installed / "bin/python", "-I", "-c",
                  "from jaxport.bridge import cli; print(cli.PACKAGED_FRONT)", env=env)
    front = Path(shipped.stdout.strip())
    assert front.is_relative_to(installed) and front.is_file(), shipped.stdout + shipped.stderr

    server = BridgeProcess(repo, "--workers", "1", "--batching-models", "batched:2000",
                           command=[str(jaxport), "serve"], env={"PATH": path},
                           workdir=tmp_path / "serve")
    with server:
        # `jaxport serve` exec'd the wheel's front: the process started is that binary.
        assert Path(os.readlink(f"/proc/{server.pid}/exe")) == front.resolve()
        done = run(installed / "bin/python", "-I", "-c", CALL_GOLDENS, server.address,
                   json.dumps({k: str(v) for k, v in artifacts.items()}), env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr + server.log_text()[-4000:]
        # Said once at start: which engine, which plugin (the one just installed).
        engine_lines = [r for r in server.log_records()
                        if r.get("logger") == "jaxport.front" and
                        str(r.get("msg", "")).startswith("native engine")]
    assert server.proc is not None and server.proc.returncode == 0, server.log_text()[-4000:]
    assert [r["msg"] for r in engine_lines] == ["native engine on"], engine_lines
    assert str(engine_lines[0]["plugin"]).startswith(f"{plugin} (cpu, PJRT API 0."), engine_lines
    report = json.loads(done.stdout)
    for module in ("client", "artifact"):
        assert Path(report[module]).is_relative_to(installed), report
    assert report["example"]["engine"] == "native" and report["example"]["cases"], report
    assert report["batched"]["engine"] == "native" and report["batched"]["cases"], report
    assert report["batched"]["max_batch_size"] == 8 and report["batched"]["batching"], report
    assert not report["example"]["batching"], report
