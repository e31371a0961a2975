"""The artifacts the Python-free consumers are tested on (tests/cpp/test_pjrt_run.py, the C++
program; tests/exporter/test_verify_pjrt_c_api.py, verify's native-engine check): the demo's
export and the same model with batch sizes 1 and 4, and a golden changed with the manifest's
consent, a copy, a flipped weight bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest as manifest_mod
from jaxport.exporter import demo
from jaxport.exporter.cli import export_main

#: The batched artifact's golden a test changes: batch size 4's second case, output probs.
BATCHED_GOLDEN = "goldens/b4_case1/outputs/probs.npy"


def export_demo_and_batched(root: Path) -> dict[str, Path]:
    """{"demo": the demo's own export (jaxport.exporter.demo's, without its verify and
    listing), "batched": the same model at batch sizes 1 and 4}, under root."""
    model = [f"{demo.SOURCE}:predict", "--params", f"{demo.SOURCE}:init", "--name", "example",
             "--quiet"]
    out = {"demo": root / "example" / "1", "batched": root / "batched" / "1"}
    assert export_main([*model, "--input", "x:float32[4,16]", "--out", str(out["demo"])]) == 0
    assert export_main([*model, "--input", "x:float32[1,16]", "--batch-sizes", "1,4",
                        "--out", str(out["batched"])]) == 0
    return out


def change_golden(artifact: Path, rel: str, delta: float) -> None:
    """Add delta to element [2, 1] of the golden at rel and update its sha256 and size in the
    manifest: a golden that disagrees with the program, which consumers still read."""
    value = np.load(artifact / rel)
    value[2, 1] += delta
    goldens_io.save_npy(artifact / rel, value)
    doc = json.loads((artifact / "manifest.json").read_text())
    entry = next(f for f in doc["files"] if f["path"] == rel)
    entry["sha256"] = manifest_mod.sha256_file(artifact / rel)
    entry["sizeBytes"] = str((artifact / rel).stat().st_size)
    (artifact / "manifest.json").write_text(json.dumps(doc))


def copy_artifact(artifact: Path, tmp_path: Path) -> Path:
    """A copy under tmp_path keeping the <model>/<version> layout, to damage."""
    dest = tmp_path / artifact.parent.name / artifact.name
    shutil.copytree(artifact, dest)
    return dest


def flip_weight_bit(artifact: Path, param: str = "params.hidden.w") -> None:
    """Flip one bit of the parameter's first chunk behind the manifest's back."""
    chunk = artifact / "weights" / param / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0x40
    chunk.write_bytes(bytes(data))
