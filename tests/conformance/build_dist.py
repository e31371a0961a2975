#!/usr/bin/env python3
"""`make conformance-dist`: the jaxport-conformance wheel and sdist into a directory.

    .venv/bin/python tests/conformance/build_dist.py dist/conformance

Stages, in a temporary directory: the package (tests/conformance/jaxport_conformance), the cases
and their data (tests/conformance/cases -> jaxport_conformance/data/cases), the feature table
(features.json -> data/features.json, beside the cases as every runner expects), the model kit
(tests/conformance/kit -> jaxport_conformance/kit) and the generated gRPC stubs of
clients/python (-> jaxport_conformance/_gen, their absolute `jaxport.protocol.gen.inference`
imports made package-relative), plus a pyproject.toml; then builds with setuptools' PEP 517
backend (no network). The wheel needs grpcio, protobuf and numpy only: no JAX, no jaxport.
tests/conformance/test_conformance_dist.py installs it into a fresh venv.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GEN = REPO / "clients" / "python" / "jaxport" / "protocol" / "gen" / "inference"
GEN_FILES = ("grpc_service_pb2.py", "grpc_service_pb2_grpc.py", "model_config_pb2.py")
GEN_IMPORT = "from jaxport.protocol.gen.inference import "

sys.path.insert(0, str(HERE))
from jaxport_conformance import __version__  # noqa: E402

PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=69", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "jaxport-conformance"
version = "{__version__}"
description = "Open Inference Protocol (KServe v2 / Triton) conformance suite for inference servers"
readme = "README.md"
requires-python = ">=3.10"
license = {{text = "Apache-2.0"}}
dependencies = [
  "numpy>=1.26",
  # Floors set by the generated stubs the wheel carries (grpcio-tools 1.85.1).
  "grpcio>=1.85.1",
  "protobuf>=7.35.1,<8",
]

[project.scripts]
jaxport-conformance = "jaxport_conformance.cli:main"

[tool.setuptools.packages.find]
include = ["jaxport_conformance*"]
namespaces = true

[tool.setuptools.package-data]
"*" = ["*.json", "*.npy", "*.md", "*.pbtxt"]
"""


def ignore(_: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}


def stage(root: Path) -> None:
    """Lay the sdist's tree out under `root`."""
    package = root / "jaxport_conformance"
    shutil.copytree(HERE / "jaxport_conformance", package, ignore=ignore)
    shutil.copytree(HERE / "cases", package / "data" / "cases", ignore=ignore)
    shutil.copy2(HERE / "features.json", package / "data" / "features.json")
    if (HERE / "kit").is_dir():
        shutil.copytree(HERE / "kit", package / "kit", ignore=ignore)
    gen = package / "_gen"
    gen.mkdir()
    # The package's own descriptor pool (POOL) comes with it: the stubs register there, not in
    # protobuf's default pool, so the runner imports beside any other copy of inference.*.
    (gen / "__init__.py").write_text((GEN / "__init__.py").read_text(encoding="utf-8"),
                                     encoding="utf-8")
    for name in GEN_FILES:
        text = (GEN / name).read_text(encoding="utf-8")
        if GEN_IMPORT not in text and name != "model_config_pb2.py":
            raise SystemExit(f"build_dist: {GEN / name} no longer imports {GEN_IMPORT!r}")
        (gen / name).write_text(text.replace(GEN_IMPORT, "from jaxport_conformance._gen import "),
                                encoding="utf-8")
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    shutil.copy2(REPO / "docs" / "conformance-suite.md", root / "README.md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output directory (emptied first)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="jaxport-conformance-dist-") as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        stage(root)
        for hook in ("build_wheel", "build_sdist"):  # one process each, from a clean tree
            code = f"import sys; from setuptools import build_meta as b; b.{hook}(sys.argv[1])"
            done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=root, text=True,
                                  capture_output=True, env={**os.environ, "PYTHONPATH": ""})
            if done.returncode != 0:
                print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
                return 1
    for path in sorted(out.iterdir()):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
