"""Building and starting the native front in tests (no fixtures here: see conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FRONT_SRC = Path(__file__).resolve().parents[2] / "bridge" / "front"
WORKER_CMD = f"{sys.executable} -m jaxport.bridge.worker"


def go_or_fail() -> str:
    """The `go` binary; pytest.fail with one line when Go is missing."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go toolchain not found (`go` on PATH): the native front tests need "
                    "Go >= 1.26 to build bridge/front", pytrace=False)
    return go


def build_front(out_dir: Path) -> Path:
    """`go build` the front into `out_dir`; pytest.fail with one line when Go is missing."""
    go = go_or_fail()
    binary = out_dir / "jaxport-front"
    proc = subprocess.run([go, "build", "-o", str(binary), "."], cwd=FRONT_SRC,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"go build of bridge/front failed:\n{proc.stderr}", pytrace=False)
    return binary


def front_command(binary: Path, *args: str) -> list[str]:
    """The front's command line for BridgeProcess (which appends the serve flags)."""
    return [str(binary), "--worker-cmd", WORKER_CMD, *args]
