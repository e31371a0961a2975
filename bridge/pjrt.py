"""`jaxport pjrt install cpu|cuda`: the PJRT plugin the front's native engine loads, fetched
from the package index, pinned by version and sha256, into the directory where the front looks
for it (docs/native-engine.md, Plugins and pinning).

    jaxport pjrt install cpu [--dir DIR] [--find-links DIR]
    jaxport pjrt install cuda [--dir DIR] [--find-links DIR]

Where it goes (the one rule; bridge/front/engine/plugin.go searches the same places):
`<prefix>/share/jaxport/pjrt/<plugin>/`, where `<prefix>` is the installation prefix of this
jaxport: the venv (sys.prefix), or the user base (~/.local) for `pip install --user`, or
/usr/local in an image. `--dir DIR` puts the plugin in DIR instead (`make pjrt-plugin`:
build/pjrt; the Python-free image's build stage); the front then needs
`--pjrt-plugin DIR/<file>` unless DIR is one it searches.

- cpu: XLA's CPU plugin `pjrt_c_api_cpu_plugin.so`, extracted from the wheel
  lammps-jax-pjrt-cpu==0.11.2 (`pip download --no-deps --require-hashes`: the wheel declares
  jax<=0.11.2, so it is never installed beside jax 0.12); the .so is checked against its own
  pinned sha256 too.
- cuda: the official plugin of jax 0.12.0.1 (jax-cuda12-pjrt) and the NVIDIA runtime wheels it
  loads, every one pinned (`pip install --no-deps --require-hashes --target DIR`: the plugin's
  RPATH, `$ORIGIN/../../nvidia/<lib>/lib`, finds them laid out as in a site-packages).

pip does the fetching (so PIP_INDEX_URL, proxies and certificates work as for any install) and
the hash checks; a plugin whose wheels cannot be fetched, or do not match the pins, is one
line naming what and how to get it otherwise (`--find-links DIR`: wheels from DIR, no index).
Stdlib only: `python bridge/pjrt.py install cpu --dir DIR` runs from a checkout too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import re
import shutil
import site
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: distribution, version, file name, sha256 of the file."""

    name: str
    version: str
    filename: str
    sha256: str

    def requirement(self) -> str:
        """A pip requirements line with the hash pip checks (--require-hashes)."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Plugin:
    """A plugin choice of `--pjrt-plugin` and what installs it."""

    name: str
    #: The .so, relative to the plugin's directory, and its sha256.
    library: str
    library_sha256: str
    #: The highest glibc symbol version the .so needs (objdump -T; tests/front/
    #: test_platform_wheel.py checks it): the platform wheel's manylinux tag covers it.
    glibc: tuple[int, int]
    wheels: tuple[Wheel, ...]
    #: cpu: the one member extracted from the (single) wheel; None: `pip install --target`.
    extract: str | None = None


CPU = Plugin(
    name="cpu",
    library="pjrt_c_api_cpu_plugin.so",
    library_sha256="ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2",
    glibc=(2, 27),
    wheels=(Wheel("lammps-jax-pjrt-cpu", "0.11.2",
                  "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
                  "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1"),),
    extract="lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
)


def _nvidia(name: str, version: str, tag: str, sha256: str) -> Wheel:
    return Wheel(name, version, f"{name.replace('-', '_')}-{version}-py3-none-{tag}.whl", sha256)


_M2014 = "manylinux2014_x86_64.manylinux_2_17_x86_64"
_M2010 = "manylinux2010_x86_64.manylinux_2_12_x86_64"
_M227 = "manylinux_2_27_x86_64"

#: jax-cuda12-pjrt 0.12.0.1 and the NVIDIA wheels of jax-cuda12-plugin[with-cuda]==0.12.0.1
#: (its Requires-Dist; the Python half, jax-cuda12-plugin, is jax's and not needed by the
#: front), at the versions pip resolved on 2026-12-02, plus nvidia-cuda-cccl-cu12 (required by
#: nvidia-nvshmem-cu12). nvidia-cuda-nvcc-cu12 carries ptxas and libdevice, which XLA's GPU
#: compiler runs/reads.
CUDA = Plugin(
    name="cuda",
    library="jax_plugins/xla_cuda12/xla_cuda_plugin.so",
    library_sha256="921aaa9c635255fb7b7a660d11c8f702c78a70e7f7d005d4f377c2dc5f0fede2",
    glibc=(2, 27),
    wheels=(
        Wheel("jax-cuda12-pjrt", "0.12.0.1",
              "jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl",
              "5ec28e06198d094031c37590b4ea753ae8cde4879ab4b60baf40f0dffb673286"),
        _nvidia("nvidia-cublas-cu12", "12.9.3.13", _M227,
                "d7d51055f161b317c7105ddaae90e71eda059026074ffef93cf7cde2886bfe72"),
        _nvidia("nvidia-cuda-cccl-cu12", "12.9.27", _M2014,
                "37869e17ce2e1ecec6eddf1927cca0f8c34e64fd848d40453df559091e2d7117"),
        _nvidia("nvidia-cuda-cupti-cu12", "12.9.79", "manylinux_2_25_x86_64",
                "096bcf334f13e1984ba36685ad4c1d6347db214de03dbb6eebb237b41d9d934f"),
        _nvidia("nvidia-cuda-nvcc-cu12", "12.9.86", _M2010,
                "5d6a0d32fdc7ea39917c20065614ae93add6f577d840233237ff08e9a38f58f0"),
        _nvidia("nvidia-cuda-nvrtc-cu12", "12.9.86", _M2010,
                "210cf05005a447e29214e9ce50851e83fc5f4358df8b453155d5e1918094dcb4"),
        _nvidia("nvidia-cuda-runtime-cu12", "12.9.79", _M2014,
                "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3"),
        _nvidia("nvidia-cudnn-cu12", "9.28.0.42", _M227,
                "9ff58b7f36dacd0a93e89f8f2957b52466889217963701daa15e577317cfa375"),
        _nvidia("nvidia-cufft-cu12", "11.4.1.4", _M2014,
                "c67884f2a7d276b4b80eb56a79322a95df592ae5e765cf1243693365ccab4e28"),
        _nvidia("nvidia-cusolver-cu12", "11.7.5.82", _M227,
                "15da72d1340d29b5b3cf3fd100e3cd53421dde36002eda6ed93811af63c40d88"),
        _nvidia("nvidia-cusparse-cu12", "12.5.10.65", _M2014,
                "73060ce019ac064a057267c585bf1fd5a353734151f87472ff02b2c5c9984e78"),
        _nvidia("nvidia-nccl-cu12", "2.32.3", _M227,
                "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c"),
        _nvidia("nvidia-nvjitlink-cu12", "12.9.86", _M2010,
                "e3f1171dbdc83c5932a45f0f4c99180a70de9bd2718c1ab77d14104f6d7147f9"),
        _nvidia("nvidia-nvshmem-cu12", "3.8.0", _M2014,
                "b2e5760d6158aefe7bb74348d5128bb1b46a7dd1fd4b7b1e6fe55b4b07888f70"),
    ),
)

PLUGINS = {p.name: p for p in (CPU, CUDA)}
#: What an installed plugin directory records (the pins it was installed from).
RECORD = "jaxport-pjrt.json"


class PluginInstallError(RuntimeError):
    """One line for the user: what failed and what to do."""


def install_prefix() -> Path:
    """The installation prefix of this jaxport: the user base for a `pip install --user`
    (its package under the user site-packages), else sys.prefix (a venv, /usr/local)."""
    here = Path(__file__).resolve()
    user_site = Path(site.getusersitepackages()).resolve()
    if here.is_relative_to(user_site):
        return Path(site.getuserbase())
    return Path(sys.prefix)


def default_dir(plugin: Plugin) -> Path:
    """`<prefix>/share/jaxport/pjrt/<plugin>`: where the front looks (engine/plugin.go)."""
    return install_prefix() / "share" / "jaxport" / "pjrt" / plugin.name


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def record_of(plugin: Plugin) -> dict[str, object]:
    return {"plugin": plugin.name, "library": plugin.library,
            "library_sha256": plugin.library_sha256,
            "wheels": [{"name": w.name, "version": w.version, "sha256": w.sha256}
                       for w in plugin.wheels]}


def installed(plugin: Plugin, directory: Path) -> bool:
    """Whether `directory` holds this plugin from these pins, its .so unchanged."""
    try:
        record = json.loads((directory / RECORD).read_text())
    except (OSError, ValueError):
        return False
    library = directory / plugin.library
    return record == record_of(plugin) and library.is_file() and \
        sha256_of(library) == plugin.library_sha256


def check_platform(plugin: Plugin) -> None:
    system, machine = platform.system(), platform.machine()
    if (system, machine) != ("Linux", "x86_64"):
        raise PluginInstallError(
            f"no pinned {plugin.name} PJRT plugin for {system} {machine} (the pinned wheels "
            "are Linux x86_64); name a plugin .so with jaxport serve --pjrt-plugin PATH")
    libc, version = platform.libc_ver()
    if libc == "glibc" and version:
        have = tuple(int(p) for p in version.split(".")[:2])
        if have < plugin.glibc:
            need = ".".join(map(str, plugin.glibc))
            raise PluginInstallError(
                f"the {plugin.name} PJRT plugin needs glibc >= {need}; this system has "
                f"glibc {version}")


def _pip(args: Sequence[str], plugin: Plugin, find_links: Path | None,
         work: Path) -> None:
    """`python -m pip ARGS -r <pins>` with pip's hash checking; a failure is one line."""
    requirements = work / "requirements.txt"
    requirements.write_text("".join(w.requirement() + "\n" for w in plugin.wheels))
    source = ["--no-index", "--find-links", str(find_links)] if find_links else []
    cmd = [sys.executable, "-m", "pip", *args, "--no-deps", "--only-binary=:all:",
           "--require-hashes", "--disable-pip-version-check", "--no-input", "-q", *source,
           "-r", str(requirements)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode == 0:
        return
    text = proc.stdout + proc.stderr
    pins = ", ".join(f"{w.name}=={w.version}" for w in plugin.wheels)
    if "DO NOT MATCH THE HASHES" in text:
        expected = re.findall(r"Expected sha256 ([0-9a-f]{64})", text)
        got = re.findall(r"Got +([0-9a-f]{64})", text)
        by_hash = {w.sha256: w for w in plugin.wheels}
        wrong = "; ".join(f"{by_hash[e].filename} has sha256 {g}, pinned {e}"
                          for e, g in zip(expected, got, strict=False) if e in by_hash)
        raise PluginInstallError(
            f"refused the {plugin.name} PJRT plugin: "
            f"{wrong or _pip_error(text, 'Expected sha256')}")
    if find_links is not None:
        raise PluginInstallError(
            f"cannot install the {plugin.name} PJRT plugin from {find_links}: "
            f"{_pip_error(text)}; it needs the pinned wheels there: "
            f"{', '.join(w.filename for w in plugin.wheels)}")
    raise PluginInstallError(
        f"cannot fetch the {plugin.name} PJRT plugin ({pins}) from the package index: "
        f"{_pip_error(text)}; without access to the index, download those wheels where it "
        "is reachable (pip download --no-deps ...) and run `jaxport pjrt install "
        f"{plugin.name} --find-links DIR`")


def _pip_error(text: str, prefer: str = "ERROR:") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        if line.startswith(prefer) or prefer in line:
            return line
    return lines[-1] if lines else "pip failed without a message"


def install(plugin: Plugin, directory: Path | None = None, find_links: Path | None = None,
            log=print) -> Path:
    """Install `plugin` into `directory` (default_dir when None); the .so's path. Nothing
    is left in `directory` unless every pin matched."""
    check_platform(plugin)
    directory = (directory or default_dir(plugin)).absolute()
    library = directory / plugin.library
    if installed(plugin, directory):
        log(f"jaxport pjrt: the {plugin.name} plugin is installed: {library} "
            f"(sha256 {plugin.library_sha256[:12]}... as pinned)")
        return library
    if plugin.extract is None and directory.is_dir() and any(directory.iterdir()) \
            and not (directory / RECORD).is_file():
        raise PluginInstallError(
            f"{directory} is not empty and holds no {RECORD} (not a plugin directory of "
            "jaxport pjrt, which replaces it whole); choose another --dir")
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".jaxport-pjrt-{plugin.name}-",
                                     dir=directory.parent))
    except OSError as exc:
        raise PluginInstallError(
            f"cannot write {directory}: {exc.strerror or exc}; choose a directory with --dir "
            "DIR and name the plugin with jaxport serve --pjrt-plugin DIR/"
            f"{plugin.library}") from None
    try:
        pins = ", ".join(f"{w.name}=={w.version}" for w in plugin.wheels)
        log(f"jaxport pjrt: fetching {pins} (pinned by sha256) into {directory}")
        staged = work / "plugin"
        if plugin.extract is not None:
            _pip(["download", "-d", str(work / "wheels")], plugin, find_links, work)
            (wheel,) = plugin.wheels
            staged.mkdir()
            with zipfile.ZipFile(work / "wheels" / wheel.filename) as z, \
                    z.open(plugin.extract) as src, (staged / plugin.library).open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        else:
            _pip(["install", "--target", str(staged), "--no-compile"], plugin, find_links, work)
        got = sha256_of(staged / plugin.library)
        if got != plugin.library_sha256:
            raise PluginInstallError(
                f"refused the {plugin.name} PJRT plugin: {plugin.library} has sha256 {got}, "
                f"pinned {plugin.library_sha256}")
        (staged / RECORD).write_text(json.dumps(record_of(plugin), indent=1) + "\n")
        if plugin.extract is not None:  # one file: beside whatever else DIR holds
            directory.mkdir(exist_ok=True)
            (directory / RECORD).unlink(missing_ok=True)
            (staged / plugin.library).replace(library)
            (staged / RECORD).replace(directory / RECORD)
        else:  # a tree: replaces an older install of ours whole, never someone else's files
            if directory.exists():
                directory.rename(work / "old")
            staged.rename(directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"jaxport pjrt: installed the {plugin.name} plugin: {library}")
    return library


def pjrt_main(argv: Sequence[str]) -> int:
    """`jaxport pjrt ...`; the exit status (2: usage, 1: the install failed)."""
    parser = argparse.ArgumentParser(
        prog="jaxport pjrt",
        description="Install the PJRT plugin the front's native engine loads (pinned by "
                    "version and sha256) where jaxport serve --pjrt-plugin cpu|cuda finds it.")
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="fetch and install a pinned plugin")
    inst.add_argument("plugin", choices=sorted(PLUGINS),
                      help="cpu: XLA's CPU plugin (lammps-jax-pjrt-cpu==0.11.2, 193 MB); "
                           "cuda: jax-cuda12-pjrt==0.12.0.1 with the NVIDIA runtime wheels "
                           "(about 3 GB)")
    inst.add_argument("--dir", type=Path, default=None,
                      help="install into DIR instead of <prefix>/share/jaxport/pjrt/<plugin> "
                           "(the front then needs --pjrt-plugin DIR/<file>)")
    inst.add_argument("--find-links", type=Path, default=None, metavar="DIR",
                      help="take the pinned wheels from DIR, not from the package index")
    args = parser.parse_args(argv)
    try:
        install(PLUGINS[args.plugin], args.dir, args.find_links)
    except PluginInstallError as exc:
        print(f"jaxport pjrt: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(pjrt_main(sys.argv[1:]))
