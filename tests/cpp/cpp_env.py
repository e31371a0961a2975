"""Paths and helpers of the C++ tests (tests/cpp/conftest.py holds the fixtures over them)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "build" / "pjrt" / "pjrt_c_api_cpu_plugin.so"
BUILD = REPO / "build" / "cpp"
BINARY = BUILD / "jaxport-pjrt-run"
MODELS = REPO / "tests" / "models"
HERE = Path(__file__).resolve().parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def shared_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A directory every xdist worker of this run sees (the run's own basetemp without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def once(root: Path, name: str, make: Callable[[Path], None]) -> Path:
    """root/name made by make(dir) exactly once per run, whichever worker gets there first."""
    out = root / name
    with locked(root / f"{name}.lock"):
        if not (out / ".done").exists():
            out.mkdir(parents=True, exist_ok=True)
            make(out)
            (out / ".done").touch()
    return out


def make(*targets: str) -> None:
    """The Makefile targets users run, file-locked per set of targets (one `make cpp` at a
    time across xdist workers; `make cpp-asan` builds another directory beside it)."""
    with locked(REPO / "build" / f".make-{'-'.join(targets)}.lock"):
        done = subprocess.run(
            ["make", "-s", "-C", str(REPO), *targets], capture_output=True, text=True, timeout=1800
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]


def _export(*args: str) -> None:
    from jaxport.exporter.cli import export_main

    assert export_main([*args, "--quiet"]) == 0, args


def export_all(out: Path) -> None:
    from support.pjrt_artifacts import export_demo_and_batched

    for path in (str(MODELS), str(HERE)):
        if path not in sys.path:
            sys.path.insert(0, path)
    found = export_demo_and_batched(out / "tmp")
    os.replace(found["demo"], out / "demo")
    os.replace(found["batched"], out / "batched")
    shutil.rmtree(out / "tmp")
    _export(
        "special_values:predict",
        "--params",
        "special_values:init",
        "--input",
        "x:float32[3,4]",
        "--golden-inputs",
        "special_values:golden_inputs",
        "--goldens",
        "1",
        "--out",
        str(out / "special"),
    )
    _export(
        "seq:predict",
        "--params",
        "seq:init",
        "--input",
        "tokens:int32[B,T]",
        "--input",
        "mask:bool[B,T]",
        "--dim",
        "B=1..4",
        "--dim",
        "T=8..64:8",
        "--buckets",
        "B=1,2,4",
        "--buckets",
        "T=16,64",
        "--pad",
        "T=mask",
        "--out",
        str(out / "bucketed"),
    )
    checked = ["--params", "checked:init", "--checks", "user,index,nan,div"]
    _export(
        "checked:predict",
        *checked,
        "--input",
        "x:float32[4]",
        "--input",
        "idx:int32[3]",
        "--input",
        "scale:float32[]",
        "--check-goldens",
        "checked:check_goldens",
        "--out",
        str(out / "checked"),
    )
    _export(
        "checked:predict_batched",
        *checked,
        "--input",
        "x:float32[B,4]",
        "--input",
        "idx:int32[B,3]",
        "--input",
        "scale:float32[B]",
        "--batch-sizes",
        "1,4",
        "--check-goldens",
        "checked:check_goldens_batched",
        "--out",
        str(out / "checked_batched"),
    )


def golden_env(artifacts: Path) -> dict[str, str]:
    return {
        **os.environ,
        "JAXPORT_TEST_PLUGIN": str(PLUGIN),
        "JAXPORT_TEST_ARTIFACTS": str(artifacts),
    }
