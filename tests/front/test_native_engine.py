"""The native engine (bridge/front/engine: PJRT C API through gopjrt, no Python) against real
artifacts: every golden case of the demo model, a batched model (one program per batch size), a
checkify model (its check outputs bit for bit), a model whose goldens hold NaN and -inf
(min/max over them: XLA's fast min/max must be off) and the bucket programs of a sequence model
with symbolic dimensions reproduce through `bridge/front/cmd/jaxport-native-goldens`; a
tampered weight chunk, a StableHLO target outside the plugin's window, XLA_FLAGS turning fast
min/max on and a polymorphic program without buckets are each refused in one line.

Needs Go with cgo (gcc) and XLA's CPU plugin in build/pjrt/ (`make pjrt-plugin`); without
either the test fails with one line saying which (never skipped). docs/native-engine.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from front_helpers import PLUGIN

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"


def nan_extremes(params, x):
    """min over everything and max per row: a NaN or -inf in x must reach the outputs."""
    return {"lo": x.min() * params["g"], "hi": jnp.max(x, axis=1) + params["g"]}


NAN_CASE = np.array([[0.5, np.nan, 2.0], [1.0, -np.inf, 3.0]], np.float32)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory, batched_repo: Path) -> dict[str, Path]:
    """demo (the bundled example), rows (batch sizes 1, 4, 8), checked (every check kind, a
    passing and a tripping golden each), nan (goldens with NaN and -inf), seqb (tests/models/
    seq.py with B, T symbolic, buckets T=16,32 at B=2) and seq (the same, no buckets)."""
    import sys

    from jaxport.exporter import export
    from jaxport.exporter.cli import export_main
    from jaxport.exporter.demo import SOURCE

    if str(MODELS) not in sys.path:
        sys.path.insert(0, str(MODELS))
    import checked
    import seq

    out = tmp_path_factory.mktemp("native-artifacts")
    rc = export_main([f"{SOURCE}:predict", "--params", f"{SOURCE}:init", "--input",
                      "x:float32[4,16]", "--out", str(out / "demo"), "--quiet"])
    assert rc == 0
    inputs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in checked.INPUTS.items()}
    export(checked.predict, checked.init(jax.random.key(0)), inputs, out / "checked",
           checks=("user", "index", "nan", "div"), check_goldens=checked.check_goldens(),
           quiet=True)
    export(nan_extremes, {"g": np.float32(1.5)},
           {"x": jax.ShapeDtypeStruct(NAN_CASE.shape, np.float32)}, out / "nan",
           golden_inputs={"nan": (NAN_CASE,)}, quiet=True)
    seq_inputs = {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)}
    seq_dims = {"B": "1..64", "T": "8..2048:8"}
    export(seq.predict, seq.init(jax.random.key(0)), seq_inputs, out / "seqb", dims=seq_dims,
           buckets={"T": [16, 32]}, batch_sizes=[2], padding={"T": "mask"}, goldens=1,
           quiet=True)
    export(seq.predict, seq.init(jax.random.key(0)), seq_inputs, out / "seq", dims=seq_dims,
           goldens=0, quiet=True)
    return {"demo": out / "demo", "rows": batched_repo / "rows" / "1",
            "checked": out / "checked", "nan": out / "nan", "seqb": out / "seqb",
            "seq": out / "seq"}


def run(binary: Path, *dirs: Path, flags: tuple[str, ...] = (),
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args = [str(binary), "--pjrt-plugin", str(PLUGIN), *flags]
    return subprocess.run([*args, *map(str, dirs)], capture_output=True, text=True,
                          timeout=600, env=env)


def test_every_golden_reproduces(goldens_binary: Path, artifacts: dict[str, Path]) -> None:
    native = {k: v for k, v in artifacts.items() if k != "seq"}
    proc = run(goldens_binary, *native.values(), flags=("--parallel", "4", "--time", "1000"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    rows = [r for r in lines if "result" in r]
    assert [r for r in rows if not r["ok"]] == []
    # Cases of the polymorphic program at sizes no bucket has are jax's alone, and said so.
    assert {r["case"] for r in lines if "not_native" in r} == {
        "dims_min", "dims_B_mid", "dims_B_max", "dims_T_mid", "dims_T_max"}
    assert {r["program"] for r in rows if r["model"] == "seqb"} == {
        "model.B2.T16.mlirbc", "model.B2.T32.mlirbc"}
    for name, d in native.items():
        manifest = json.loads((d / "manifest.json").read_text())
        model = d.name if name != "rows" else "1"
        seen = {(r["case"], r["result"]) for r in rows if r["model"] == model}
        for case in manifest["goldens"]:
            if case["name"].startswith("dims_"):
                continue
            want = set(case["outputs"]) | set(case.get("checkOutputs", {}))
            assert want and {(case["name"], o) for o in want} <= seen, (name, case["name"])
    # The batched model ran each batch size's program.
    assert {r["program"] for r in rows if r["model"] == "1"} == {
        "model.b1.mlirbc", "model.b4.mlirbc", "model.b8.mlirbc"}
    # Check outputs are compared exactly, the tripping cases included.
    checks = [r for r in rows if r["model"] == "checked" and r["kind"] == "check"]
    assert {r["case"] for r in checks} >= {"check_nan", "check_div", "check_index", "check_user"}
    assert {r["tolerance"] for r in checks} == {"exact"}
    # The NaN case really holds NaN and -inf in its goldens, and they matched.
    golden = artifacts["nan"] / "goldens" / "nan" / "outputs"
    assert np.isnan(np.load(golden / "lo.npy"))
    assert np.isnan(np.load(golden / "hi.npy")[0]) and np.load(golden / "hi.npy")[1] == 3.0 + 1.5
    assert {r["result"] for r in rows if r["model"] == "nan" and r["case"] == "nan"} == {"lo", "hi"}
    # Four goroutines at once get the sequential run's bytes, every case 20 times each.
    parallel = {r["model"]: r for r in lines if "parallel" in r}
    assert set(parallel) == {"demo", "1", "checked", "nan", "seqb"}
    for model, r in parallel.items():
        cases = len({x["case"] for x in rows if x["model"] == model})
        assert (r["executes"], r["mismatches"], r["failures"]) == (4 * 20 * cases, 0, 0), r
    timing = {r["model"]: r["execute_us"] for r in lines if "execute_us" in r}
    assert set(timing) == {"demo", "1", "checked", "nan", "seqb"}
    print(f"execute time per call (us): {timing}")


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused run (exit 2, nothing compared)."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_tampered_weight_chunk_is_refused(goldens_binary: Path, artifacts: dict[str, Path],
                                          tmp_path: Path) -> None:
    d = shutil.copytree(artifacts["demo"], tmp_path / "tampered")
    chunk = d / "weights" / "params.hidden.w" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    want = hashlib.sha256(data).hexdigest()
    data[5] ^= 0x01
    chunk.write_bytes(bytes(data))
    line = refusal(run(goldens_binary, d))
    # the artifact store's words (bridge/front/artifact): the chunk file, what the manifest
    # records for it, what it holds
    assert line == (f"{chunk}: sha256 mismatch: expected {want}, "
                    f"actual {hashlib.sha256(data).hexdigest()}"), line


def test_stablehlo_target_outside_the_plugin_window_is_refused(
        goldens_binary: Path, artifacts: dict[str, Path], tmp_path: Path) -> None:
    d = shutil.copytree(artifacts["demo"], tmp_path / "future")
    path = d / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["versions"]["stablehloTarget"] = "1.99.0"
    path.write_text(json.dumps(manifest))
    line = refusal(run(goldens_binary, d))
    assert line == ("native engine: model future: StableHLO target 1.99.0 is outside the window "
                    f"0.9.0..1.20.0 of the PJRT plugin {PLUGIN}"), line


def test_fast_min_max_in_xla_flags_is_refused(goldens_binary: Path,
                                              artifacts: dict[str, Path]) -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_enable_fast_min_max=true"}
    line = refusal(run(goldens_binary, artifacts["nan"], env=env))
    assert line.startswith("XLA_FLAGS sets --xla_cpu_enable_fast_min_max=true: the native "
                           "engine needs --xla_cpu_enable_fast_min_max=false"), line


def test_polymorphic_program_without_buckets_is_refused(goldens_binary: Path,
                                                       artifacts: dict[str, Path]) -> None:
    line = refusal(run(goldens_binary, artifacts["seq"]))
    assert line == ("native engine: model seq: shape-polymorphic program only (no --buckets): "
                    "only model.jaxexport runs it, under jax"), line
