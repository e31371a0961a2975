"""clients/cpp's `jaxport-pjrt-run` (issue 26, docs/cpp.md): an artifact run through the PJRT C
API with no Python on its path.

Built as users build it (`make pjrt-plugin cpp`: the pinned CPU plugin out of its PyPI wheel,
the program with the system g++), then run on three artifacts exported once per session: the
demo's (`jaxport.exporter.demo`'s export), the same model with batch sizes 1 and 4, and a
min/max/clip model whose goldens hold NaN and infinities (the plugin's fast min/max would drop
the NaN: the program turns it off). Tampering shows the program refuses or fails, naming what.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import weights
from jaxport.exporter import api

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
from support.pjrt_artifacts import (  # noqa: E402
    BATCHED_GOLDEN,
    change_golden,
    copy_artifact,
    export_demo_and_batched,
    flip_weight_bit,
)

PLUGIN = REPO / "build" / "pjrt" / "pjrt_c_api_cpu_plugin.so"
BINARY = REPO / "build" / "cpp" / "jaxport-pjrt-run"
# One result line: case, output, dtype+shape, max abs err, tolerance, verdict.
LINE = re.compile(r"^  (\S+)\s+(\S+)\s+\S+\s+\S+\s+max abs err (\S+)\s+"
                  r"tolerance (\S+)\s+(ok|MISMATCH)$", re.M)


@pytest.fixture(scope="session")
def pjrt_run() -> Path:
    """The program and the plugin, built by the Makefile targets users run."""
    done = subprocess.run(["make", "-s", "-j2", "-C", str(REPO), "pjrt-plugin", "cpp"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert BINARY.is_file() and PLUGIN.is_file()
    return BINARY


def _special(params: dict[str, jax.Array], x: jax.Array) -> dict[str, jax.Array]:
    """Row min and max (reductions) and an elementwise clip: where NaN handling shows."""
    return {"lo": jnp.min(x, axis=1), "hi": jnp.max(x, axis=1),
            "clipped": jnp.minimum(jnp.maximum(x, params["floor"]), params["ceil"])}


SPECIAL_X = np.array([[1.0, np.nan, -2.0, 3.0],
                      [np.inf, 0.5, -np.inf, 2.0],
                      [-0.0, 0.0, np.nan, np.nan]], np.float32)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo artifact, a batched one (1, 4) and the special-values one, exported once."""
    root = tmp_path_factory.mktemp("cpp-artifacts")
    out = {**export_demo_and_batched(root), "special": root / "special" / "1"}
    api.export(_special, {"floor": np.float32(-1.0), "ceil": np.float32(2.5)},
               {"x": jax.ShapeDtypeStruct(SPECIAL_X.shape, np.float32)}, out["special"],
               goldens=1, golden_inputs={"special": [SPECIAL_X]}, quiet=True)
    return out


def _run(binary: Path, artifact: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), "--plugin", str(PLUGIN), str(artifact), *args],
                          capture_output=True, text=True, timeout=300)


def _expected_lines(artifact: Path) -> set[tuple[str, str]]:
    """(case, output) of every golden output of every program."""
    m = manifest_mod.load(artifact)
    return {(case.name, name) for case in m.goldens for name in case.outputs}


@pytest.mark.parametrize("which", ["demo", "batched", "special"])
def test_every_golden_passes(pjrt_run: Path, artifacts: dict[str, Path], which: str) -> None:
    artifact = artifacts[which]
    done = _run(pjrt_run, artifact)
    print(done.stdout)  # the max errors, shown with -s
    assert done.returncode == 0, done.stdout + done.stderr
    lines = LINE.findall(done.stdout)
    assert {(case, out) for case, out, *_ in lines} == _expected_lines(artifact)
    assert all(verdict == "ok" for *_, verdict in lines), done.stdout
    for _, _, err, rule, _ in lines:
        assert float(err) <= 1e-5 and rule == "1e-05+0.0001*|x|"
    m = manifest_mod.load(artifact)
    programs = ", ".join(f"{p.mlirbc_file} (batch size {p.batch_size})" for p in m.programs)
    assert [f"{p} (batch size {n})" for p, n in re.findall(
        r"^program (\S+) \(batch size (\d+)\)", done.stdout, re.M)] == programs.split(", ")
    assert re.search(rf"ok: {len(m.goldens)} case\(s\) over {len(m.programs)} program\(s\)",
                     done.stdout), done.stdout
    assert "StableHLO 0.9.0..1.20.0; artifact targets 1.18.0: ok" in done.stdout


def test_special_values_need_fast_min_max_off(pjrt_run: Path, artifacts: dict[str, Path]) -> None:
    """The goldens hold NaN and infinities; they pass above (fast min/max off through
    XLA_FLAGS). With the plugin's default fast min/max the NaN rows of min and max differ:
    what the default guards against."""
    artifact = artifacts["special"]
    case = next(c for c in manifest_mod.load(artifact).goldens if c.name == "special")
    lo = goldens_io.load_npy(artifact / case.outputs["lo"], np.float32)
    assert np.isnan(lo[0]) and np.isneginf(lo[1]) and np.isnan(lo[2])
    done = _run(pjrt_run, artifact, "--fast-min-max")
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {(c, o) for c, o, *_, verdict in LINE.findall(done.stdout) if verdict != "ok"}
    assert failed == {("special", "lo"), ("special", "hi")}, done.stdout
    assert "FAILED: 2 of 6 output(s) differ from the goldens: special hi, special lo" in \
        done.stdout


def test_wrong_golden_output_fails_naming_it(pjrt_run: Path, artifacts: dict[str, Path],
                                             tmp_path: Path) -> None:
    """A golden that disagrees with the program (its checksum updated, so it is read): exit 1,
    the case and output named with their error."""
    artifact = copy_artifact(artifacts["batched"], tmp_path)
    change_golden(artifact, BATCHED_GOLDEN, 0.01)
    done = _run(pjrt_run, artifact)
    assert done.returncode == 1, done.stdout + done.stderr
    bad = [(c, o, float(e)) for c, o, e, _, verdict in LINE.findall(done.stdout)
           if verdict == "MISMATCH"]
    assert [(c, o) for c, o, _ in bad] == [("b4_case1", "probs")], done.stdout
    assert bad[0][2] == pytest.approx(0.01, rel=1e-3)
    assert "FAILED: 1 of 8 output(s) differ from the goldens: b4_case1 probs" in done.stdout


def test_parameter_of_many_chunks(pjrt_run: Path, artifacts: dict[str, Path],
                                  tmp_path: Path) -> None:
    """A parameter stored as a 4 x 5 grid of [5, 7] chunks whose edge chunks are partly padding
    (the layout of a parameter above 16 MiB, or of a shard) is assembled into the same array:
    its sha256 and every golden still match."""
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    rel = "weights/params.hidden.w"
    arg = next(a for a in manifest_mod.load(artifact).programs[0].arguments
               if a.name == "params.hidden.w")
    value = weights.read_parameter(artifact, arg)
    shutil.rmtree(artifact / rel)
    weights.write_parameter(artifact, rel, value, shard=(5, 7))
    chunks = sorted(p for p in (artifact / rel).rglob("*") if p.is_file() and p.name != "zarr.json")
    assert len(chunks) == 20 and (artifact / rel / "c" / "3" / "4").is_file()
    doc = json.loads((artifact / "manifest.json").read_text())
    doc["files"] = [f for f in doc["files"] if not f["path"].startswith(rel + "/")] + [
        {"path": p.relative_to(artifact).as_posix(), "sizeBytes": str(p.stat().st_size),
         "sha256": manifest_mod.sha256_file(p)}
        for p in [artifact / rel / "zarr.json", *chunks]]
    (artifact / "manifest.json").write_text(json.dumps(doc))
    done = _run(pjrt_run, artifact)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 parameter(s) and 36 file(s) match their sha256" in done.stdout
    assert all(verdict == "ok" for *_, verdict in LINE.findall(done.stdout))


def test_tampered_golden_file_is_refused(pjrt_run: Path, artifacts: dict[str, Path],
                                         tmp_path: Path) -> None:
    """The same change without the manifest's consent: refused before anything runs."""
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    rel = "goldens/case0/outputs/logits.npy"
    data = bytearray((artifact / rel).read_bytes())
    data[-1] ^= 0x01
    (artifact / rel).write_bytes(bytes(data))
    done = _run(pjrt_run, artifact)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{rel}: sha256 mismatch" in done.stderr
    assert "program " not in done.stdout  # nothing compiled


def test_tampered_weight_chunk_is_refused(pjrt_run: Path, artifacts: dict[str, Path],
                                          tmp_path: Path) -> None:
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    flip_weight_bit(artifact)
    done = _run(pjrt_run, artifact)
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(r"parameter 'params\.hidden\.w' \(weights/params\.hidden\.w/\) sha256 "
                     r"mismatch: expected [0-9a-f]{64}, actual [0-9a-f]{64}", done.stderr), \
        done.stderr
    assert "program " not in done.stdout


def test_stablehlo_target_outside_the_plugin_window(pjrt_run: Path, artifacts: dict[str, Path],
                                                    tmp_path: Path) -> None:
    """One line naming the artifact's target and the plugin's window."""
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    doc = json.loads((artifact / "manifest.json").read_text())
    doc["versions"]["stablehloTarget"] = "1.21.0"
    (artifact / "manifest.json").write_text(json.dumps(doc))
    done = _run(pjrt_run, artifact)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("jaxport-pjrt-run: artifact StableHLO target 1.21.0 is outside "
                              "the plugin's window 0.9.0..1.20.0 ("), message
    assert "program " not in done.stdout
