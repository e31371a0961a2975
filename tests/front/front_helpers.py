"""Building and starting the native front in tests (no fixtures here: see conftest.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from support.bridge import FRONT_SRC, FrontBuildError
from support.bridge import build_front as support_build_front

__all__ = ["FRONT_SRC", "WORKER_CMD", "build_front", "front_command", "go_or_fail"]
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
    go_or_fail()
    try:
        return support_build_front(out_dir)
    except FrontBuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def front_command(binary: Path, *args: str) -> list[str]:
    """The front's command line for BridgeProcess (which appends the serve flags)."""
    return [str(binary), "--worker-cmd", WORKER_CMD, *args]
