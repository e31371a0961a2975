"""`jaxport-pjrt-run` (clients/cpp/tools, docs/cpp.md): an artifact run through the PJRT C API
with no Python on its path, a thin user of the C++ library.

Built as users build it (`make pjrt-plugin cpp`), then run on the artifacts tests/cpp/conftest.py
exports once per run: every golden of the demo's export, the batched one (batch sizes 1, 4), the
NaN/infinity one (the plugin's fast min/max would drop the NaN: the library's compile options
turn it off), the bucketed one and the checked ones; the caller's own inputs (`--input`,
`--output-dir`) against JAX; tampering refused or failed, naming what.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpp_env import PLUGIN
from jaxport.artifact import checks as checks_io
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import weights
from support.pjrt_artifacts import BATCHED_GOLDEN, change_golden, copy_artifact, flip_weight_bit

# One result line: case, output, dtype+shape, max abs err, tolerance, verdict.
LINE = re.compile(
    r"^  (\S+)\s+(\S+)\s+\S+\s+\S+\s+max abs err (\S+)\s+"
    r"tolerance (\S+)\s+(ok|MISMATCH)$",
    re.M,
)
FLOAT32_RULE = "1e-05+0.0001*|x|"


@pytest.fixture(scope="module")
def pjrt_run(cpp_build: Path) -> Path:
    return cpp_build / "jaxport-pjrt-run"


@pytest.fixture(scope="module")
def artifacts(cpp_artifacts: Path) -> dict[str, Path]:
    return {p.name: p for p in cpp_artifacts.iterdir() if p.is_dir()}


def _run(binary: Path, artifact: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), "--plugin", str(PLUGIN), str(artifact), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


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
        assert float(err) <= 1e-5 and rule == FLOAT32_RULE
    m = manifest_mod.load(artifact)
    programs = ", ".join(f"{p.mlirbc_file} (batch size {p.batch_size})" for p in m.programs)
    assert [
        f"{p} (batch size {n})"
        for p, n in re.findall(r"^program (\S+) \(batch size (\d+)\)", done.stdout, re.M)
    ] == programs.split(", ")
    assert re.search(
        rf"ok: {len(m.goldens)} case\(s\) over {len(m.programs)} program\(s\)", done.stdout
    ), done.stdout
    assert "StableHLO 0.9.0..1.20.0; artifact targets 1.18.0: ok" in done.stdout


def test_special_values_need_fast_min_max_off(pjrt_run: Path, artifacts: dict[str, Path]) -> None:
    """The goldens hold NaN and infinities; they pass above (fast min/max off in every
    program's compile options). With the plugin's default fast min/max the NaN rows of min and
    max differ: what the override guards against."""
    artifact = artifacts["special"]
    case = next(c for c in manifest_mod.load(artifact).goldens if c.name == "special")
    lo = goldens_io.load_npy(artifact / case.outputs["lo"], np.float32)
    assert np.isnan(lo[0]) and np.isneginf(lo[1]) and np.isnan(lo[2])
    done = _run(pjrt_run, artifact, "--fast-min-max")
    assert done.returncode == 1, done.stdout + done.stderr
    failed = {(c, o) for c, o, *_, verdict in LINE.findall(done.stdout) if verdict != "ok"}
    assert failed == {("special", "lo"), ("special", "hi")}, done.stdout
    assert "FAILED: 2 of 6 output(s) differ from the goldens: special hi, special lo" in done.stdout


def test_wrong_golden_output_fails_naming_it(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """A golden that disagrees with the program (its checksum updated, so it is read): exit 1,
    the case and output named with their error."""
    artifact = copy_artifact(artifacts["batched"], tmp_path)
    change_golden(artifact, BATCHED_GOLDEN, 0.01)
    done = _run(pjrt_run, artifact)
    assert done.returncode == 1, done.stdout + done.stderr
    bad = [
        (c, o, float(e))
        for c, o, e, _, verdict in LINE.findall(done.stdout)
        if verdict == "MISMATCH"
    ]
    assert [(c, o) for c, o, _ in bad] == [("b4_case1", "probs")], done.stdout
    assert bad[0][2] == pytest.approx(0.01, rel=1e-3)
    assert "FAILED: 1 of 8 output(s) differ from the goldens: b4_case1 probs" in done.stdout


def test_parameter_of_many_chunks(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """A parameter stored as a 4 x 5 grid of [5, 7] chunks whose edge chunks are partly padding
    (the layout of a parameter above 16 MiB, or of a shard) is assembled into the same array:
    its sha256 and every golden still match."""
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    rel = "weights/params.hidden.w"
    arg = next(
        a for a in manifest_mod.load(artifact).programs[0].arguments if a.name == "params.hidden.w"
    )
    value = weights.read_parameter(artifact, arg)
    shutil.rmtree(artifact / rel)
    weights.write_parameter(artifact, rel, value, shard=(5, 7))
    chunks = sorted(p for p in (artifact / rel).rglob("*") if p.is_file() and p.name != "zarr.json")
    assert len(chunks) == 20 and (artifact / rel / "c" / "3" / "4").is_file()
    doc = json.loads((artifact / "manifest.json").read_text())
    doc["files"] = [f for f in doc["files"] if not f["path"].startswith(rel + "/")] + [
        {
            "path": p.relative_to(artifact).as_posix(),
            "sizeBytes": str(p.stat().st_size),
            "sha256": manifest_mod.sha256_file(p),
        }
        for p in [artifact / rel / "zarr.json", *chunks]
    ]
    (artifact / "manifest.json").write_text(json.dumps(doc))
    done = _run(pjrt_run, artifact)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 parameter(s) and 36 file(s) match their sha256" in done.stdout
    assert all(verdict == "ok" for *_, verdict in LINE.findall(done.stdout))


def test_tampered_golden_file_is_refused(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
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


def test_tampered_weight_chunk_is_refused(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    flip_weight_bit(artifact)
    done = _run(pjrt_run, artifact)
    assert done.returncode == 2, done.stdout + done.stderr
    assert re.search(
        r"parameter 'params\.hidden\.w' \(weights/params\.hidden\.w/\) sha256 "
        r"mismatch: expected [0-9a-f]{64}, actual [0-9a-f]{64}",
        done.stderr,
    ), done.stderr
    assert "program " not in done.stdout


def test_stablehlo_target_outside_the_plugin_window(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """One line naming the artifact's target and the plugin's window."""
    artifact = copy_artifact(artifacts["demo"], tmp_path)
    doc = json.loads((artifact / "manifest.json").read_text())
    doc["versions"]["stablehloTarget"] = "1.21.0"
    (artifact / "manifest.json").write_text(json.dumps(doc))
    done = _run(pjrt_run, artifact)
    assert done.returncode == 2, done.stdout + done.stderr
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith(
        "jaxport-pjrt-run: artifact StableHLO target 1.21.0 is outside "
        "the plugin's window 0.9.0..1.20.0 ("
    ), message
    assert "program " not in done.stdout


def test_bucketed_goldens(pjrt_run: Path, artifacts: dict[str, Path]) -> None:
    """Every bucket program's cases, and the polymorphic program's cases padded to a bucket; the
    polymorphic program itself is skipped, said so."""
    done = _run(pjrt_run, artifacts["bucketed"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "program model.mlirbc: shape-polymorphic (only jax runs it); skipped" in done.stdout
    m = manifest_mod.load(artifacts["bucketed"])
    # 2 cases per bucket and dims_T_max (B=1, T=64) at one; the other dims_* cases (T=8 at
    # B=1, 2, 4; T=32) padded to the bucket that holds them.
    assert "padded to a bucket: 4 golden case(s)" in done.stdout
    assert re.search(rf"ok: {len(m.goldens)} case\(s\) over 6 program\(s\)", done.stdout), (
        done.stdout
    )
    padded = {c for c, *_ in LINE.findall(done.stdout.split("padded to a bucket")[1])}
    assert padded == {"dims_min", "dims_B_mid", "dims_B_max", "dims_T_mid"}


@pytest.mark.parametrize("which", ["checked", "checked_batched"])
def test_checked_goldens(pjrt_run: Path, artifacts: dict[str, Path], which: str) -> None:
    """A checked artifact's check outputs match bit for bit and each tripped check fails as JAX
    words it, with the server's status."""
    artifact = artifacts[which]
    done = _run(pjrt_run, artifact)
    assert done.returncode == 0, done.stdout + done.stderr
    m = manifest_mod.load(artifact)
    for case in m.goldens:
        if not case.expected_check:
            continue
        status = checks_io.STATUS[case.expected_check].name
        line = (
            f"  {case.name:<16} {'(check failure)':<24} {case.expected_check} {status}: "
            f"{case.expected_error} ok"
        )
        assert line in done.stdout.splitlines(), (line, done.stdout)
    assert all(rule in (FLOAT32_RULE, "bit-exact") for *_, rule, _ in LINE.findall(done.stdout))
    assert any(rule == "bit-exact" for *_, rule, _ in LINE.findall(done.stdout))


def test_own_inputs_written_as_npy_match_jax(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """`--input x=FILE.npy --output-dir DIR`: 3 rows (no exported batch size: padded to 4 and
    cut back) through the batched artifact; every output .npy equals JAX's own run of the
    artifact (jaxport.artifact: jax.export's program) within float32's tolerance."""
    import jaxport.artifact

    x = np.random.default_rng(7).normal(size=(3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    done = _run(
        pjrt_run,
        artifacts["batched"],
        "--input",
        f"x={tmp_path / 'x.npy'}",
        "--output-dir",
        str(out),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    want = jaxport.artifact.open(artifacts["batched"]).call(x=x[:1])  # batch size 1 ...
    want4 = jaxport.artifact.open(artifacts["batched"]).call(x=np.concatenate([x, x[:1]]))
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.npy" for n in want)
    for name in want:
        got = np.load(out / f"{name}.npy")
        assert got.shape == (3, *want[name].shape[1:]) and got.dtype == want[name].dtype
        np.testing.assert_allclose(got, want4[name][:3], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[:1], want[name], rtol=1e-4, atol=1e-5)
        assert f"{out / name}.npy: float32 [3, " in done.stdout


def test_own_inputs_that_trip_a_check_or_do_not_fit(
    pjrt_run: Path, artifacts: dict[str, Path], tmp_path: Path
) -> None:
    """A tripped check: exit 1 and JAX's message with the server's status. An input the model
    does not have, or of the wrong dtype: exit 2, one line naming it."""
    inputs = {
        "x": np.array([1.0, 2.0, 0.5, 4.0], np.float32),
        "idx": np.array([1, 100, 3], np.int32),
        "scale": np.float32(2.0),
    }
    flags = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        flags += ["--input", f"{name}={tmp_path / name}.npy"]
    done = _run(pjrt_run, artifacts["checked"], *flags, "--output-dir", str(tmp_path / "out"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.rstrip("\n").splitlines()[-1] == (
        "jaxport-pjrt-run: check failed: index (INVALID_ARGUMENT): out-of-bounds indexing for "
        "array of shape (8,): index 100 is out of bounds for axis 0 with size 8. "
    )
    assert not (tmp_path / "out").exists()
    np.save(tmp_path / "wrong.npy", np.zeros((3,), np.float64))
    done = _run(
        pjrt_run,
        artifacts["checked"],
        *flags[:4],
        "--input",
        f"scale={tmp_path}/wrong.npy",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "jaxport-pjrt-run: input 'scale': expected datatype FP32, got FP64"
    )
    done = _run(
        pjrt_run,
        artifacts["checked"],
        *flags,
        "--input",
        f"y={tmp_path}/wrong.npy",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "jaxport-pjrt-run: unexpected input 'y': model 'checked' has inputs 'x' (FP32 [4]), "
        "'idx' (INT32 [3]), 'scale' (FP32 [])"
    )
    done = _run(pjrt_run, artifacts["checked"], *flags)
    assert done.returncode == 2 and "--input and --output-dir go together" in done.stderr
