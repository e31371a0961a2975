"""The real `jaxport export` command: success paths, Orbax checkpoints, and every user error
(exit code, exactly one stderr line, naming the offending thing, nothing left on disk)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from exporter_helpers import MODELS_DIR, model_cli_args, model_module, run_cli
from jaxport.artifact import goldens, manifest, weights


def _one_error_line(proc, code: int, *needles: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("jaxport export: error: "), line
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in line, line
    return line


def test_cli_export_with_output_names(tmp_path: Path) -> None:
    out = tmp_path / "conv" / "3"
    proc = run_cli(model_cli_args("convnet", out, "--output", "scores", "--output", "p",
                                  "--goldens", "3"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # --quiet
    m = manifest.load(out)
    assert [o.name for o in m.outputs] == ["scores", "p"]
    assert [r.name for r in m.programs[0].results] == ["scores", "p"]
    assert len(m.goldens) == 3 and m.name == "conv" and m.source_function == "convnet:predict"
    assert {p.name for p in out.parent.iterdir()} == {"3"}  # no staging directory left behind


def test_cli_progress_goes_to_stderr_unless_quiet(tmp_path: Path) -> None:
    args = [a for a in model_cli_args("mlp", tmp_path / "m", "--goldens", "0") if a != "--quiet"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "jaxport: writing 4 parameter(s)" in proc.stderr
    assert "exported mlp:predict" in proc.stdout


@pytest.mark.parametrize("saver", ["standard", "pytree"])
def test_cli_export_from_orbax_checkpoint(tmp_path: Path, saver: str) -> None:
    """Trained weights arrive as an Orbax checkpoint, restored as the pytree it was saved as."""
    mod = model_module("nested")
    params = jax.tree.map(lambda a: a * 1.5, mod.init(jax.random.key(3)))  # not init(key(0))
    ckpt = tmp_path / "ckpt"
    if saver == "standard":
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(ckpt, params)
        checkpointer.wait_until_finished()
    else:
        ocp.PyTreeCheckpointer().save(ckpt, params)
    out = tmp_path / "art"
    args = model_cli_args("nested", out)
    args[args.index("--params") + 1] = str(ckpt)
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    got = weights.read_parameters(out, m.programs[0])
    want = [np.asarray(leaf) for leaf in jax.tree.leaves(params)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    case = m.goldens[0]
    ins = {n: goldens.load_npy(out / p, np.float32 if n != "ids" else np.int32)
           for n, p in case.inputs.items()}
    expected = jax.jit(mod.predict)(params, ins["x"], ins["scale"], ins["ids"])
    np.testing.assert_array_equal(goldens.load_npy(out / case.outputs["head"], np.float32),
                                  np.asarray(expected["head"]))


def test_cli_orbax_checkpoint_that_does_not_match(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(ckpt, {"layer": {"kernel": jnp.ones((16, 32))}})
    checkpointer.wait_until_finished()
    args = model_cli_args("mlp", tmp_path / "out")
    args[args.index("--params") + 1] = str(ckpt)
    proc = run_cli(args, tmp_path)
    _one_error_line(proc, 1, "KeyError", "'w1'", "params")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("function", "params", "needles"),
    [
        ("broken:not_jittable", "broken:init", ["broken:not_jittable", "not jit-able"]),
        ("broken:with_callback", "broken:init", ["broken:with_callback", "callback"]),
        ("broken:with_custom_call", "broken:init",
         ["jaxport_test_unregistered_target", "custom call"]),
        ("broken:baked", "broken:init", ["tensor<128x128xf32>", "params"]),
        ("mlp:predict", "broken:init_wrong", ["mlp:predict", "'w1'", "kernel"]),
        ("nosuchmodule:predict", "broken:init", ["nosuchmodule", "PYTHONPATH"]),
        ("broken:nosuchfn", "broken:init", ["nosuchfn"]),
        ("broken:predict", "/no/such/ckpt", ["/no/such/ckpt"]),
    ],
)
def test_cli_export_errors(tmp_path: Path, function: str, params: str, needles: list[str]) -> None:
    out = tmp_path / "out"
    proc = run_cli(["export", function, "--params", params, "--input", "x:float32[4,16]",
                    "--out", str(out)], tmp_path)
    _one_error_line(proc, 1, *needles)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a staging dir


@pytest.mark.parametrize(
    ("input_flag", "code", "needles"),
    [
        ("x:complex64[4,16]", 2, ["complex64", "supported", "bfloat16"]),
        ("x:float32[b,16]", 1, ["symbolic dimension 'b'", "fixed shapes"]),
        ("x:float32(4,16)", 2, ["x:float32(4,16)", "NAME:DTYPE"]),
    ],
)
def test_cli_input_flag_errors(tmp_path: Path, input_flag: str, code: int,
                               needles: list[str]) -> None:
    proc = run_cli(["export", "broken:predict", "--params", "broken:init", "--input", input_flag,
                    "--out", str(tmp_path / "out")], tmp_path)
    _one_error_line(proc, code, *needles)
    assert not (tmp_path / "out").exists()


def test_cli_missing_required_flag_is_usage_error(tmp_path: Path) -> None:
    proc = run_cli(["export", "broken:predict", "--input", "x:float32[4,16]", "--out", "o"],
                   tmp_path)
    _one_error_line(proc, 2, "--params")


def test_cli_existing_output_dir_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "m" / "1"
    out.mkdir(parents=True)
    (out / "keep.txt").write_text("old")
    proc = run_cli(model_cli_args("mlp", out), tmp_path)
    _one_error_line(proc, 1, str(out), "--force")
    assert (out / "keep.txt").read_text() == "old"
    proc = run_cli(model_cli_args("mlp", out, "--force"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "keep.txt").exists()
    manifest.verify_files(out, manifest.load(out))
    assert sorted(p.name for p in out.parent.iterdir()) == ["1"]


def test_cli_missing_flatbuffers(tmp_path: Path) -> None:
    """flatbuffers is not a jax dependency; shadow it with a package that fails to import."""
    shadow = tmp_path / "shadow" / "flatbuffers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named flatbuffers')\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli(["export", "broken:predict", "--params", "broken:init", "--input",
                    "x:float32[4,16]", "--out", str(work / "out")], work,
                   pythonpath=(shadow.parent, MODELS_DIR), fresh_process=True)
    _one_error_line(proc, 1, "flatbuffers", "pip install flatbuffers")
    assert list(work.iterdir()) == []
