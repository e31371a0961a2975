#!/usr/bin/env python3
"""`make wheel`: the platform wheel of `jaxport` that carries the native front, so a machine
with Python alone (no Go) can `pip install` it and `jaxport serve` on the front.

    python bridge/front/build_wheel.py OUT_DIR     # prints the wheel's path

The way `ruff` and `buf-bin` ship their binaries: one wheel per OS and architecture, tagged
`py3-none-<platform>` (any Python 3, no ABI: the Python code is pure, the binary is not) and
`Root-Is-Purelib: false`. Steps, all in a copy of the tree (the checkout stays clean):

1. copy pyproject.toml, the readme and every `package-dir` of `[tool.setuptools]` into a temp
   dir;
2. `go build` bridge/front with CGO_ENABLED=0 (a static binary: no libc, so one build runs on
   every glibc or musl Linux; the native engine needs cgo, so in this build engine/nocgo.go
   refuses every model and the wheel's front serves them all on the Python workers, where
   `make front` builds with cgo) and -trimpath (no build paths inside) into the copy's
   `bridge/bin/jaxport-front`, package data of `jaxport.bridge` (pyproject.toml), where
   `jaxport.bridge.cli.front_binary` finds it once installed;
3. setuptools' PEP 517 backend (this Python's, no network) with a bdist_wheel that writes that
   tag; the platform is Go's target (`go env GOOS GOARCH`), so `GOARCH=arm64` cross-builds
   the Linux aarch64 wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FRONT_SRC = REPO / "bridge" / "front"
#: Where the binary sits inside the `jaxport.bridge` package (bridge/cli.py looks there).
BINARY = Path("bin") / "jaxport-front"

#: Go's (GOOS, GOARCH) -> the wheel's platform tag: manylinux2014, the oldest tag pip still
#: takes for these architectures (the binary needs no libc at all). Linux only: the front uses
#: memfd, MAP_POPULATE and Pdeathsig (it does not build for darwin).
PLATFORMS = {
    ("linux", "amd64"): "manylinux_2_17_x86_64.manylinux2014_x86_64",
    ("linux", "arm64"): "manylinux_2_17_aarch64.manylinux2014_aarch64",
}

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


def platform_tag() -> str:
    """The wheel's platform tag for Go's target (GOOS/GOARCH from the environment, else this
    machine)."""
    out = subprocess.run([go(), "env", "GOOS", "GOARCH"], capture_output=True, text=True,
                         check=True).stdout.split()
    target = (out[0], out[1])
    if target not in PLATFORMS:
        raise WheelBuildError(f"no wheel platform tag for GOOS/GOARCH {'/'.join(target)}; "
                              f"known: {', '.join('/'.join(t) for t in PLATFORMS)}")
    return PLATFORMS[target]


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


def build_front(binary: Path) -> None:
    """A static, path-free front at `binary`."""
    binary.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([go(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary),
                           "./cmd/jaxport-front"],
                          cwd=FRONT_SRC, capture_output=True, text=True,
                          env={**os.environ, "CGO_ENABLED": "0"})
    if proc.returncode != 0:
        raise WheelBuildError(f"go build of bridge/front failed:\n{proc.stderr}")


def build(out_dir: Path) -> Path:
    """Build the wheel into `out_dir` (created); its path."""
    platform = platform_tag()  # before anything is built: an unknown target fails at once
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jaxport-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        copy_sources(src)
        build_front(src / "bridge" / BINARY)
        (src / "setup.py").write_text(SETUP_PY.format(platform=platform))
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
             "print(b.build_wheel(sys.argv[1]))", str(out_dir)],
            cwd=src, capture_output=True, text=True)
        if proc.returncode != 0:
            raise WheelBuildError(f"setuptools failed to build the wheel:\n{proc.stdout}"
                                  f"{proc.stderr}")
        return out_dir / proc.stdout.strip().splitlines()[-1]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_wheel.py OUT_DIR", file=sys.stderr)
        return 2
    try:
        print(build(Path(argv[0])))
    except WheelBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
