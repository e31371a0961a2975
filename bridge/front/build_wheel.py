#!/usr/bin/env python3
"""`make wheel`: the platform wheel of `jaxport` carrying the native front built WITH cgo (its
native engine), so a machine with Python alone `pip install`s it, runs `jaxport pjrt install
cpu` once, and `jaxport serve` executes models through the PJRT plugin with no Go, gcc or cc.

    python bridge/front/build_wheel.py OUT_DIR [--zig-venv DIR]   # prints the wheel's path
    python bridge/front/build_wheel.py --front-only PATH [--zig-venv DIR]   # the front alone
                                                     # (the Python-free image's build stage)

The way `ruff` and `buf-bin` ship their binaries: one wheel per OS and architecture, tagged
`py3-none-<platform>` (any Python 3, no ABI: the Python code is pure, the binary is not) and
`Root-Is-Purelib: false`. Steps, all in a copy of the tree (the checkout stays clean):

1. zig as the C compiler (the pinned `ziglang` wheel in a venv of its own, `--zig-venv`,
   created when absent): a wrapper `python -m ziglang cc -target x86_64-linux-gnu.2.17` is CC,
   so cgo compiles and links against glibc 2.17's symbol versions whatever glibc the build
   machine has;
2. `CGO_ENABLED=1 go build -trimpath -ldflags=-s -w` of FRONT_PACKAGE (the front's main
   package, the one variable that moves when the front's main does) into the copy's
   `bridge/bin/jaxport-front`, package data of `jaxport.bridge` (pyproject.toml), where
   `jaxport.bridge.cli` finds it once installed;
3. the tag: `manylinux_2_<N>_x86_64`, N the highest glibc symbol version the front needs (read
   from its ELF version-needs section here; tests check it with objdump -T) or that the pinned
   CPU plugin the user installs next needs (bridge/pjrt.py CPU.glibc: 2.27), whichever is higher:
   auditwheel cannot see a plugin loaded with dlopen, and a wheel whose engine cannot load its
   plugin on the machine pip put it on is not what the tag promises;
4. setuptools' PEP 517 backend (this Python's, no network) with a bdist_wheel that writes that
   tag.

Linux x86_64 only: the pinned CPU plugin exists for nothing else (the front uses memfd,
MAP_POPULATE and Pdeathsig, so it does not build for darwin either).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRONT_SRC = REPO / "bridge" / "front"
#: The front's main package, relative to bridge/front: the one place it is named for the wheel
#: and both images (bridge/deploy/kserve/Containerfile*).
FRONT_PACKAGE = "./cmd/jaxport-front"
#: Where the binary sits inside the `jaxport.bridge` package (bridge/cli.py looks there).
BINARY = Path("bin") / "jaxport-front"

#: Go's target -> zig's target (glibc 2.17: manylinux2014's floor) and the wheel's platform.
GOARCH = "amd64"
ZIG_TARGET = "x86_64-linux-gnu.2.17"
MACHINE = "x86_64"
#: The C compiler, pinned: a pip wheel of zig (pip checks the hash).
ZIGLANG = ("ziglang==0.17.0 --hash=sha256:"
           "97079827064a7492cce5541ceb438ae8003ce1e54e399676da2d62fb7a5dc08b")
#: Where `make wheel` keeps that venv (the Containerfiles pass their own).
ZIG_VENV = REPO / "build" / "zig"

#: The copy's setup.py: the setuptools configuration stays in pyproject.toml; here only the
#: wheel's tag, and a distribution that says it is not pure (so the wheel's root, the package
#: itself, is platlib: it holds a binary).
SETUP_PY = '''\
from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel


class PlatformDistribution(Distribution):
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", {platform!r}


setup(distclass=PlatformDistribution, cmdclass={{"bdist_wheel": PlatformWheel}})
'''

IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


class WheelBuildError(RuntimeError):
    """A step failed; the message says which and carries the tool's output."""


def go() -> str:
    found = shutil.which("go")
    if found is None:
        raise WheelBuildError("building the jaxport wheel compiles the native front and needs "
                              "Go >= 1.26 (go on PATH)")
    return found


def cpu_plugin_glibc() -> tuple[int, int]:
    """The pinned CPU plugin's glibc floor (bridge/pjrt.py, stdlib only, loaded by path)."""
    spec = importlib.util.spec_from_file_location("_jaxport_pjrt", REPO / "bridge" / "pjrt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.CPU.glibc


def glibc_needed(path: Path) -> tuple[int, ...]:
    """The highest GLIBC_x.y[.z] version an ELF64 little-endian file needs: the vna_name strings of
    its SHT_GNU_verneed section (what `objdump -T` prints in parentheses for undefined
    symbols, and `objdump -p` under 'Version References')."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise WheelBuildError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    versions: set[tuple[int, ...]] = set()
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != 0x6FFFFFFE:  # SHT_GNU_verneed
            continue
        strtab = sections[link][4]
        entry = offset
        for _ in range(info):  # sh_info: the number of Verneed entries
            _version, count, _file, aux, nxt = struct.unpack_from("<HHIII", data, entry)
            at = entry + aux
            for _ in range(count):
                _hash, _flags2, _other, name, anext = struct.unpack_from("<IHHII", data, at)
                end = data.index(b"\0", strtab + name)
                m = re.fullmatch(rb"GLIBC_(\d+(?:\.\d+)+)", data[strtab + name:end])
                if m:
                    versions.add(tuple(int(p) for p in m[1].split(b".")))
                at += anext
            entry += nxt
    if not versions:
        raise WheelBuildError(f"{path}: needs no GLIBC symbol version (not a cgo build?)")
    return max(versions)


def platform_tag(front: tuple[int, ...], plugin: tuple[int, ...]) -> str:
    """`manylinux_2_N_x86_64` for the higher of the two glibc floors (plus manylinux2014's
    alias when N is 17)."""
    major, minor = max(front[:2], plugin[:2])
    tag = f"manylinux_{major}_{minor}_{MACHINE}"
    return f"{tag}.manylinux2014_{MACHINE}" if (major, minor) == (2, 17) else tag


def zig_python(venv: Path) -> Path:
    """The Python of a venv holding the pinned ziglang (created, or completed, when it lacks
    it)."""
    python = venv / "bin" / "python"
    check = [str(python), "-m", "ziglang", "version"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    steps = [[sys.executable, "-m", "venv", str(venv)]]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write(ZIGLANG + "\n")
    steps.append([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "--require-hashes", "--only-binary=:all:", "-r", req.name])
    try:
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True)
            if proc.returncode != 0:
                raise WheelBuildError(f"installing zig (the C compiler of the front's cgo build, "
                                      f"{ZIGLANG.split()[0]}) into {venv} failed:\n"
                                      f"{proc.stdout}{proc.stderr}")
    finally:
        os.unlink(req.name)
    return python


def copy_sources(dest: Path) -> None:
    """What setuptools reads: pyproject.toml, its readme, every package directory."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    readme = project["project"].get("readme")
    if isinstance(readme, str):
        shutil.copy2(REPO / readme, dest / readme)
    for rel in sorted(set(project["tool"]["setuptools"]["package-dir"].values())):
        target = dest / rel
        if not target.exists():  # a package directory inside one copied already is skipped
            shutil.copytree(REPO / rel, target, ignore=IGNORE)


def build_front(binary: Path, zig: Path, work: Path) -> None:
    """The cgo front at `binary`, compiled by zig for glibc 2.17, path-free (-trimpath)."""
    cc = work / "zig-cc"
    cc.write_text(f'#!/bin/sh\nexec "{zig}" -m ziglang cc -target {ZIG_TARGET} "$@"\n')
    cc.chmod(0o755)
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "1", "CC": str(cc), "GOOS": "linux", "GOARCH": GOARCH}
    env.pop("CXX", None)
    proc = subprocess.run([go(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary),
                           FRONT_PACKAGE], cwd=FRONT_SRC, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise WheelBuildError(f"go build of bridge/front ({FRONT_PACKAGE}, cgo, CC=zig "
                              f"{ZIG_TARGET}) failed:\n{proc.stderr}")


def build(out_dir: Path, zig_venv: Path = ZIG_VENV, log=print) -> Path:
    """Build the wheel into `out_dir` (created); its path."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    zig = zig_python(zig_venv.absolute())
    with tempfile.TemporaryDirectory(prefix="jaxport-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        copy_sources(src)
        front = src / "bridge" / BINARY
        build_front(front, zig, Path(tmp))
        front_glibc, plugin_glibc = glibc_needed(front), cpu_plugin_glibc()
        platform = platform_tag(front_glibc, plugin_glibc)
        log(f"front: GLIBC_{'.'.join(map(str, front_glibc))} at most; CPU plugin: glibc "
            f"{'.'.join(map(str, plugin_glibc))}; tag {platform}")
        (src / "setup.py").write_text(SETUP_PY.format(platform=platform))
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
             "print(b.build_wheel(sys.argv[1]))", str(out_dir)],
            cwd=src, capture_output=True, text=True)
        if proc.returncode != 0:
            raise WheelBuildError(f"setuptools failed to build the wheel:\n{proc.stdout}"
                                  f"{proc.stderr}")
        return out_dir / proc.stdout.strip().splitlines()[-1]


def build_front_only(binary: Path, zig_venv: Path = ZIG_VENV) -> Path:
    """The front alone at `binary`, built as the wheel's is (steps 1-2)."""
    zig = zig_python(zig_venv.absolute())
    with tempfile.TemporaryDirectory(prefix="jaxport-front-") as tmp:
        build_front(binary.absolute(), zig, Path(tmp))
    return binary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build_wheel.py", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, nargs="?")
    parser.add_argument("--front-only", type=Path, metavar="PATH",
                        help="build only the front, to PATH (no wheel)")
    parser.add_argument("--zig-venv", type=Path, default=ZIG_VENV,
                        help=f"venv with the pinned ziglang (created when absent; default "
                             f"{ZIG_VENV.relative_to(REPO)})")
    args = parser.parse_args(argv)
    if (args.out_dir is None) == (args.front_only is None):
        parser.error("give OUT_DIR (the wheel) or --front-only PATH (the front alone)")
    try:
        if args.front_only is not None:
            print(build_front_only(args.front_only, args.zig_venv))
        else:
            print(build(args.out_dir, args.zig_venv, log=lambda m: print(m, file=sys.stderr)))
    except WheelBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
