"""A `jaxport export` killed with SIGKILL while writing large weights leaves nothing that looks
like a valid artifact: the output directory does not exist (or, when replacing, still holds the
previous complete artifact), and `jaxport verify` refuses the leftover partial directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
JAXPORT = str(Path(sys.executable).parent / "jaxport")
EXPORT_ARGS = ["rel_big:forward", "--params", "rel_big:init", "--input", "x:float32[2,4096]",
               "--goldens", "1", "--quiet"]


def _weights_being_written(parent: Path, name: str) -> Path | None:
    for partial in parent.glob(f".{name}.partial-*"):
        weights = partial / "weights"
        # A chunk file (`weights/<param>/c/...`) exists: array data is on disk, more to come.
        if weights.is_dir() and any(p.is_file() and "c" in p.relative_to(weights).parts
                                    for p in weights.rglob("*")):
            return partial
    return None


def _export_and_kill(out: Path, *extra: str) -> tuple[Path, float]:
    """Start the export, SIGKILL it (by PID) once weights are being written."""
    proc = subprocess.Popen([JAXPORT, "export", *EXPORT_ARGS, "--out", str(out), *extra],
                            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    try:
        while True:
            partial = _weights_being_written(out.parent, out.name)
            if partial is not None:
                break
            if proc.poll() is not None:
                pytest.fail(f"export ended before it was killed: {proc.stdout.read()!r}")
            if time.monotonic() - t0 > 120:
                pytest.fail("export never started writing weights")
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return partial, time.monotonic() - t0


def _verify(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([JAXPORT, "verify", str(path), *extra], capture_output=True,
                          text=True, timeout=300)


def _size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def test_killed_export_leaves_no_artifact(tmp_path: Path) -> None:
    out = tmp_path / "big"
    partial, after = _export_and_kill(out)
    written = _size_mib(partial / "weights")
    assert not out.exists(), "a killed export left its output directory"
    v = _verify(partial)
    print(f"\nexporter crash: SIGKILL after {after:.2f} s with {written:.0f} of "
          f"{4 * 64} MiB of weights in {partial.name}; {out.name} absent; "
          f"verify(partial) -> exit {v.returncode}: {v.stderr.strip()}")
    assert v.returncode != 0
    assert v.stderr.strip().startswith("jaxport verify: error:")
    assert len(v.stderr.strip().splitlines()) == 1, v.stderr
    v = _verify(out)
    assert v.returncode != 0 and "jaxport verify: error:" in v.stderr


def test_killed_replacement_keeps_the_previous_artifact(tmp_path: Path, artifacts) -> None:
    out = tmp_path / "small"
    shutil.copytree(artifacts["fuzzy"], out)  # a complete artifact the export will replace
    before = (out / "manifest.json").read_text()
    partial, after = _export_and_kill(out, "--force")
    assert (out / "manifest.json").read_text() == before
    v = _verify(out, "--checks", "checksums")
    print(f"\nexporter crash: --force export killed after {after:.2f} s "
          f"({_size_mib(partial / 'weights'):.0f} MiB of weights written); the previous "
          f"artifact is intact, verify -> exit {v.returncode}")
    assert v.returncode == 0, v.stderr
