"""`jaxport infer` (the Python client CLI) against the live bridge: golden inputs from .npy
files in, outputs equal to the goldens out; server errors as one line with exit status 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from bridge_helpers import golden_cases
from jaxport.artifact import manifest as manifest_io

JAXPORT = [str(Path(sys.executable).parent / "jaxport"), "infer"]


def run_infer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JAXPORT, *args], capture_output=True, text=True, timeout=120)


def test_infer_json_equals_goldens(bridge, repository: Path):
    for model in ("mlp", "mixed"):
        artifact = repository / model / "1"
        manifest = manifest_io.load(artifact)
        case = manifest.goldens[0]
        inputs = [a for name, path in case.inputs.items()
                  for a in ("--input", f"{name}=@{artifact / path}")]
        proc = run_infer("--url", bridge.address, "--model", model, "--json", "--id", "cli",
                         *inputs)
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert (result["model_name"], result["model_version"], result["id"]) == (
            model, "1", "cli")
        _, _, expected = next(c for c in golden_cases(artifact) if c[0] == case.name)
        got = {o["name"]: o for o in result["outputs"]}
        assert list(got) == list(expected)
        for name, want in expected.items():
            assert got[name]["shape"] == list(want.shape)
            data = np.asarray(got[name]["data"]).reshape(want.shape)
            if want.dtype == ml_dtypes.bfloat16:  # JSON carries the exact bf16 values
                np.testing.assert_array_equal(data.astype(np.float32), want.astype(np.float32))
            elif want.dtype.kind == "f":
                np.testing.assert_allclose(data, want, rtol=1e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(data.astype(want.dtype), want)


def test_infer_errors_are_one_line(bridge, tmp_path: Path):
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 8), np.float32))
    proc = run_infer("--url", bridge.address, "--model", "mlp", "--input", f"x=@{x}")
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("jaxport infer: error: INVALID_ARGUMENT: ")
    assert "input 'x'" in line and "[2, 8]" in line
    proc = run_infer("--url", bridge.address, "--model", "ghost", "--input", f"x=@{x}")
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith(
        "jaxport infer: error: NOT_FOUND: unknown model 'ghost' (known models: ")
