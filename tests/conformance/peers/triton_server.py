#!/usr/bin/env python3
"""A real Triton Inference Server (2.51, CPU) for `make conformance-peers` and
tests/conformance/test_triton.py, from PyPI alone: the `nvidia-pytriton==0.7.0` wheel bundles
the `tritonserver` binary, the python backend and a backend stub per Python version.

    .venv/bin/python tests/conformance/peers/triton_server.py install build/peers/triton

`install` makes a venv of this interpreter's Python, installs the wheel with --no-deps (its own
Python API pins numpy<2 and a tritonclient we do not use; the server binary needs none of it)
and numpy beside it (for the kit's model.py), and copies the stub of this Python version into
the bundled `backends/python/` (the python backend looks for it there); a `.installed` marker
makes it idempotent. `command` is the server's command line serving a model repository on
127.0.0.1 (HTTP and gRPC; metrics off; no GPU).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WHEEL = "nvidia-pytriton==0.7.0"
VERSION = "2.51.0"  # the tritonserver the wheel bundles (its startup table says so)
INSTALL_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Triton:
    """An installed Triton: the venv and the wheel's server directory."""

    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        (found,) = self.venv.glob("lib/python3.*/site-packages")
        return found

    @property
    def root(self) -> Path:
        return self.site_packages / "pytriton" / "tritonserver"

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.root / "backends"

    def command(self, repository: Path, grpc_port: int, http_port: int) -> list[str]:
        """tritonserver serving `repository` on 127.0.0.1 (a bad model fails the start:
        Triton's default --exit-on-error)."""
        return [str(self.binary), "--model-repository", str(repository),
                "--backend-directory", str(self.backends),
                "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
                "--http-address", "127.0.0.1", "--http-port", str(http_port),
                "--allow-metrics", "false", "--allow-gpu-metrics", "false",
                "--log-verbose", "0"]


def install(venv: Path, python: str = sys.executable) -> Triton:
    """Install Triton into `venv` unless its marker says it is there (see the module doc)."""
    venv = Path(venv).resolve()
    triton = Triton(venv)
    marker = venv / ".installed"
    if marker.exists() and triton.binary.exists():
        return triton
    if venv.exists():
        shutil.rmtree(venv)

    def run(*cmd: str) -> None:
        subprocess.run(cmd, check=True, timeout=INSTALL_TIMEOUT_S)

    run(python, "-m", "venv", str(venv))
    pip = [str(triton.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(*pip, "--no-deps", WHEEL)
    run(*pip, "numpy")
    version = subprocess.run([str(triton.python), "-c",
                              "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    stub = triton.root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise RuntimeError(f"{WHEEL} has no python backend stub for Python {version} "
                           f"(have: {sorted(p.name for p in stub.parent.parent.iterdir())})")
    shutil.copy2(stub, triton.backends / "python" / stub.name)
    marker.write_text(f"{WHEEL} python {version}\n", encoding="utf-8")
    return triton


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("install", help="install Triton into a venv").add_argument("venv", type=Path)
    args = parser.parse_args(argv)
    triton = install(args.venv)
    print(f"triton: {triton.binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
