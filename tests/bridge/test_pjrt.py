"""`jaxport pjrt install cpu|cuda` (bridge/pjrt.py): every refusal is one line naming what and
what to do, exit 1 (2 for usage), and leaves nothing installed; the default directory is the
one the front searches (<prefix>/share/jaxport/pjrt/<plugin>, engine/plugin.go); the pinned
.so's glibc floor is what the wheel's tag relies on.

The fast tests fetch nothing (pip runs with --no-index on a local directory). The CUDA install
(slow) fetches the pinned jax-cuda12-pjrt and NVIDIA wheels (about 3 GB) from the package
index, checks every sha256 and that the front finds and loads the plugin; no GPU here, so the
plugin's client cannot be created, and the front says so in its one start line.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jaxport.bridge import pjrt

REPO = Path(__file__).resolve().parents[2]


def jaxport_pjrt(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jaxport.cli", "pjrt", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_default_dir_is_under_the_venv() -> None:
    # This interpreter is the checkout's venv: jaxport is installed editable into it.
    assert pjrt.default_dir(pjrt.CPU) == Path(sys.prefix) / "share/jaxport/pjrt/cpu"
    assert pjrt.default_dir(pjrt.CUDA) == Path(sys.prefix) / "share/jaxport/pjrt/cuda"


def test_wheels_not_found_in_find_links(tmp_path: Path) -> None:
    empty = tmp_path / "wheels"
    empty.mkdir()
    done = jaxport_pjrt("install", "cpu", "--dir", tmp_path / "cpu", "--find-links", empty)
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith(f"jaxport pjrt: error: cannot install the cpu PJRT plugin from {empty}: "
                           "ERROR: Could not find a version that satisfies the requirement "
                           "lammps-jax-pjrt-cpu==0.11.2"), line
    assert line.endswith("it needs the pinned wheels there: "
                         "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl"), line
    assert not (tmp_path / "cpu").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["wheels"]  # no staging left behind


def test_wheel_with_another_hash_is_refused(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheel,) = pjrt.CPU.wheels
    (wheels / wheel.filename).write_bytes(b"not the pinned wheel")
    done = jaxport_pjrt("install", "cpu", "--dir", tmp_path / "cpu", "--find-links", wheels)
    assert done.returncode == 1
    line = one_error_line(done)
    m = re.fullmatch(r"jaxport pjrt: error: refused the cpu PJRT plugin: (\S+) has sha256 "
                     r"([0-9a-f]{64}), pinned ([0-9a-f]{64})", line)
    assert m, line
    got = hashlib.sha256(b"not the pinned wheel").hexdigest()
    assert m.groups() == (wheel.filename, got, wheel.sha256)
    assert not (tmp_path / "cpu").exists()


def test_cuda_refuses_a_directory_it_does_not_own(tmp_path: Path) -> None:
    """The CUDA plugin is a tree `install` replaces whole: never a directory of someone
    else's files (checked before anything is fetched)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    done = jaxport_pjrt("install", "cuda", "--dir", mine)
    assert done.returncode == 1
    assert one_error_line(done) == (
        f"jaxport pjrt: error: {mine} is not empty and holds no jaxport-pjrt.json (not a plugin "
        "directory of jaxport pjrt, which replaces it whole); choose another --dir")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_unknown_plugin_is_usage() -> None:
    done = jaxport_pjrt("install", "gpu")
    assert done.returncode == 2
    assert "argument plugin: invalid choice: 'gpu' (choose from 'cpu', 'cuda')" in done.stderr


def test_unwritable_directory(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    done = jaxport_pjrt("install", "cpu", "--dir", blocked / "cpu")
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith(f"jaxport pjrt: error: cannot write {blocked / 'cpu'}: "), line
    assert line.endswith("choose a directory with --dir DIR and name the plugin with jaxport "
                         "serve --pjrt-plugin DIR/pjrt_c_api_cpu_plugin.so"), line


def test_other_platforms_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pjrt.platform, "machine", lambda: "aarch64")
    with pytest.raises(pjrt.PluginInstallError) as err:
        pjrt.check_platform(pjrt.CPU)
    assert str(err.value) == ("no pinned cpu PJRT plugin for Linux aarch64 (the pinned wheels "
                              "are Linux x86_64); name a plugin .so with jaxport serve "
                              "--pjrt-plugin PATH")
    monkeypatch.undo()
    monkeypatch.setattr(pjrt.platform, "libc_ver", lambda: ("glibc", "2.26"))
    with pytest.raises(pjrt.PluginInstallError) as err:
        pjrt.check_platform(pjrt.CPU)
    assert str(err.value) == "the cpu PJRT plugin needs glibc >= 2.27; this system has glibc 2.26"


def test_checkout_plugin_matches_its_pins() -> None:
    """`make pjrt-plugin` (make setup) installed build/pjrt with this module: its record and the
    .so's sha256 are the pins, and the .so's glibc floor is the one recorded (objdump -T)."""
    directory = REPO / "build" / "pjrt"
    assert pjrt.installed(pjrt.CPU, directory)
    assert json.loads((directory / pjrt.RECORD).read_text()) == pjrt.record_of(pjrt.CPU)
    out = subprocess.run(["objdump", "-T", directory / pjrt.CPU.library], capture_output=True,
                         text=True, check=True).stdout
    versions = {tuple(int(p) for p in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    assert max(versions)[:2] == pjrt.CPU.glibc


@pytest.mark.slow  # fetches ~3 GB of pinned wheels (pip's cache keeps them for the next run)
def test_cuda_install_checksums_hold_and_the_front_loads_it(tmp_path: Path) -> None:
    """Installed where a front in PREFIX/bin looks (PREFIX/share/jaxport/pjrt/cuda), the way
    `jaxport pjrt install cuda` does for an image's /usr/local; `--pjrt-plugin cuda` finds it,
    loads every NVIDIA library the plugin's RPATH misses, then the plugin (GetPjrtApi), and
    without a GPU fails to create its client: one start line saying so."""
    from support import binaries
    from support.bridge import BridgeProcess

    prefix = tmp_path / "prefix"
    directory = prefix / "share" / "jaxport" / "pjrt" / "cuda"
    done = jaxport_pjrt("install", "cuda", "--dir", directory)
    assert done.returncode == 0, done.stdout + done.stderr
    plugin = directory / pjrt.CUDA.library
    assert f"installed the cuda plugin: {plugin}" in done.stdout
    assert pjrt.installed(pjrt.CUDA, directory)  # the record and the .so's pinned sha256
    for w in pjrt.CUDA.wheels:  # what pip installed is what was pinned, nothing else
        assert (directory / f"{w.name.replace('-', '_')}-{w.version}.dist-info").is_dir(), w
    assert len(list(directory.glob("*.dist-info"))) == len(pjrt.CUDA.wheels)
    # Every NVIDIA library the front preloads (engine/plugin.go cudaPreload) is installed, and
    # the plugin's glibc floor is the recorded one.
    go_src = (REPO / "bridge/front/engine/plugin.go").read_text()
    preload = re.findall(r'^\t"([a-z_]+/lib/lib[A-Za-z_]+\.so\.\d+)",$', go_src, re.M)
    assert len(preload) == 11, preload
    for lib in preload:
        assert (directory / "nvidia" / lib).is_file(), lib
    out = subprocess.run(["objdump", "-T", plugin], capture_output=True, text=True,
                         check=True).stdout
    versions = {tuple(int(p) for p in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    assert max(versions)[:2] == pjrt.CUDA.glibc
    (prefix / "bin").mkdir()
    front = Path(shutil.copy2(binaries.path("front"), prefix / "bin" / "jaxport-front"))
    repo = tmp_path / "repo"
    repo.mkdir()
    with BridgeProcess(repo, "--workers", "1", "--pjrt-plugin", "cuda", "--front-binary",
                       str(front), workdir=tmp_path / "serve") as server:
        records = [r for r in server.log_records() if r.get("logger") == "jaxport.front"
                   and str(r.get("msg", "")).startswith(("native engine", "CUDA plugin"))]
        log = server.log_text()
    assert [r["msg"] for r in records] == [
        "native engine off: every model is served by the workers"], records
    assert records[0]["reason"] == (f"PJRT plugin {plugin}: client: PJRT error (code=9): No "
                                    "visible GPU devices."), records
    assert "Can't find nvidia/" not in log  # gopjrt's layout check is off for this install
