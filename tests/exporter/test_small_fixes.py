"""The smaller rough edges of a first real export (issue 13): MODULE:a.b attribute paths,
width-less dtypes, the symbolic-dimension hint, nothing left behind by a failed export, the
all-params-dropped warning, --verbose and the user's file:line in trace errors."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporter_helpers import MODELS_DIR, model_cli_args, run_cli
from jaxport.artifact import manifest
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError


def _one_line(proc, code: int) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_attribute_path_function(tmp_path: Path) -> None:
    """`MODULE:model.apply`: a Linen model's bound apply, no wrapper function needed."""
    out = tmp_path / "o"
    args = model_cli_args("linen_mlp", out, "--goldens", "1")
    args[args.index("linen_mlp:predict")] = "linen_mlp:model.apply"
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    assert m.source_function == "linen_mlp:model.apply"
    assert [o.name for o in m.outputs] == ["logits", "probs"]


def test_attribute_path_errors_name_the_missing_part(tmp_path: Path) -> None:
    args = model_cli_args("linen_mlp", tmp_path / "o")
    args[args.index("linen_mlp:predict")] = "linen_mlp:model.aply"
    line = _one_line(run_cli(args, tmp_path), 1)
    assert "linen_mlp:model (a MLP) has no attribute 'aply'" in line, line


@pytest.mark.parametrize(("spec", "hint"), [("x:float[2,3]", "x:float32[2,3]"),
                                            ("x:int[2,3]", "x:int32[2,3]")])
def test_widthless_dtype_is_refused_with_a_hint(tmp_path: Path, spec: str, hint: str) -> None:
    proc = run_cli(["export", "mlp:predict", "--params", "mlp:init", "--input", spec,
                    "--out", str(tmp_path / "o")], tmp_path)
    line = _one_line(proc, 2)
    assert "has no width (numpy would read it as" in line and f"e.g. {hint}" in line, line


def test_symbolic_dimension_mentions_batch_sizes(tmp_path: Path) -> None:
    proc = run_cli(["export", "mlp:predict", "--params", "mlp:init", "--input", "x:float32[n,3]",
                    "--out", str(tmp_path / "o")], tmp_path)
    assert "--batch-sizes" in _one_line(proc, 1)
    with pytest.raises(ExportError, match="batch_sizes= / --batch-sizes"):
        api.export(lambda p, x: x, {}, {"x": jax.ShapeDtypeStruct(
            jax.export.symbolic_shape("n, 3"), jnp.float32)}, tmp_path / "p", quiet=True)


def test_failed_export_leaves_no_model_directory(tmp_path: Path, monkeypatch) -> None:
    """A failure after the staging directory exists removes `repo/<model>/` it created."""
    def boom(*args, **kwargs):
        raise ExportError("golden failed")

    from jaxport.exporter import goldens

    monkeypatch.setattr(goldens, "write_goldens", boom)
    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(ExportError, match="golden failed"):
        api.export(lambda p, x: x @ p["w"], {"w": np.ones((3, 2), np.float32)},
                   {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}, repo / "model" / "1",
                   quiet=True)
    assert list(repo.iterdir()) == []  # repo existed before: kept; model/ was ours: gone


def test_all_params_dropped_warns_even_when_quiet(tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = model_cli_args("raises", out)
    args[args.index("raises:predict")] = "raises:ignores_params"
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "warning: raises:ignores_params uses none of its 1 parameter(s)" in proc.stderr
    assert "no weights" in proc.stderr
    assert len(manifest.load(out).dropped_leaves) == 1


def test_trace_error_names_the_users_line_and_verbose_shows_traceback(tmp_path: Path) -> None:
    args = model_cli_args("raises", tmp_path / "o")
    args[args.index("raises:predict")] = "raises:mismatched"
    line = _one_line(run_cli(args, tmp_path), 1)
    assert f"(raised at {MODELS_DIR / 'raises.py'}:15)" in line, line
    proc = run_cli([*args, "--verbose"], tmp_path)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert 'raises.py", line 15, in mismatched' in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("jaxport export: error: ")


def test_api_trace_error_names_the_users_line(tmp_path: Path) -> None:
    def model(p, x):
        return x @ p["w"]  # (2, 3) @ (4, 5)

    line = model.__code__.co_firstlineno + 1
    with pytest.raises(ExportError) as info:
        api.export(model, {"w": np.ones((4, 5), np.float32)},
                   {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}, tmp_path / "o", quiet=True)
    assert f"test_small_fixes.py:{line})" in str(info.value), info.value




def test_export_refreshes_the_indices_that_list_it(tmp_path: Path) -> None:
    """A repository served by URL is listed through index.json: exporting a new version into
    it rewrites the model's and the repository's index (a stale one would hide the version),
    creates none where there was none, and leaves a file of that name that is not a jaxport
    index alone."""
    import json

    from jaxport.artifact import index

    def fn(params, x):
        return x @ params["w"]

    params = {"w": np.ones((3, 2), np.float32)}
    spec = {"x": jax.ShapeDtypeStruct((1, 3), np.float32)}
    repo = tmp_path / "repo"
    api.export(fn, params, spec, repo / "m" / "1", quiet=True, goldens=0)
    api.export(fn, params, spec, repo / "other" / "4", quiet=True, goldens=0)
    assert not (repo / "index.json").exists() and not (repo / "m" / "index.json").exists()
    index.write(repo)
    index.write(repo / "m")
    api.export(fn, params, spec, repo / "m" / "2", quiet=True, goldens=0)
    assert index.read(repo) == {"models": {"m": [1, 2], "other": [4]}}
    assert index.read(repo / "m") == {"versions": [1, 2]}
    assert not (repo / "other" / "index.json").exists()  # none was there: none is made

    foreign = tmp_path / "elsewhere"
    foreign.mkdir()
    (foreign / "index.json").write_text(json.dumps({"pages": ["a"]}))
    api.export(fn, params, spec, foreign / "m" / "1", quiet=True, goldens=0)
    assert json.loads((foreign / "index.json").read_text()) == {"pages": ["a"]}
