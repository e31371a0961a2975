"""Outputs are named by their keys/fields and can't be silently mislabelled (CLI and API)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport.artifact import goldens, manifest
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError

X = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}


def _scored():
    mod = model_module("scored")
    return mod.predict, mod.init(jax.random.key(0))


def _check_labels(out: Path, names: dict[str, str]) -> None:
    """Each golden output, recomputed in process, is the array its manifest name claims.

    Exact equality would be too strict between the exported-goldens jit and this eager call;
    rtol 1e-5 / atol 1e-6 is f32 rounding, far below the gap between logits, probs and score.
    """
    fn, params = _scored()
    m = manifest.load(out)
    case = m.goldens[0]
    x = goldens.load_npy(out / case.inputs["x"], np.float32)
    expected = fn(params, x)
    got = {n: goldens.load_npy(out / rel, np.float32) for n, rel in case.outputs.items()}
    assert set(got) == set(names.values())
    for key, name in names.items():
        np.testing.assert_allclose(got[name], np.asarray(expected[key]), rtol=1e-5, atol=1e-6)


def test_dict_outputs_are_named_by_key_by_default(tmp_path: Path) -> None:
    fn, params = _scored()
    m = api.export(fn, params, X, tmp_path / "m", goldens=1, quiet=True)
    assert [o.name for o in m.outputs] == ["logits", "probs", "score"]
    _check_labels(tmp_path / "m", {"logits": "logits", "probs": "probs", "score": "score"})


def test_permuted_key_names_are_refused_naming_both_orders(tmp_path: Path) -> None:
    fn, params = _scored()
    with pytest.raises(ExportError) as info:
        api.export(fn, params, X, tmp_path / "m", output_names=["score", "probs", "logits"],
                   quiet=True)
    msg = str(info.value)
    assert "score, probs, logits" in msg and "logits, probs, score" in msg, msg
    assert "KEY=NAME" in msg
    assert not (tmp_path / "m").exists()


def test_same_order_key_names_are_accepted(tmp_path: Path) -> None:
    fn, params = _scored()
    m = api.export(fn, params, X, tmp_path / "m", goldens=0, quiet=True,
                   output_names=["logits", "probs", "score"])
    assert [o.name for o in m.outputs] == ["logits", "probs", "score"]


def test_api_rename_mapping(tmp_path: Path) -> None:
    fn, params = _scored()
    m = api.export(fn, params, X, tmp_path / "m", goldens=1, quiet=True,
                   output_names={"score": "confidence", "logits": "raw"})
    assert [o.name for o in m.outputs] == ["raw", "probs", "confidence"]
    _check_labels(tmp_path / "m", {"logits": "raw", "probs": "probs", "score": "confidence"})


def test_api_rename_of_unknown_key(tmp_path: Path) -> None:
    fn, params = _scored()
    with pytest.raises(ExportError, match=r"no output 'scores'.*logits, probs, score"):
        api.export(fn, params, X, tmp_path / "m", quiet=True, output_names={"scores": "s"})


class Pair(NamedTuple):
    total: jax.Array
    argmax: jax.Array


def test_namedtuple_outputs_are_named_by_field(tmp_path: Path) -> None:
    def fn(p, x):
        y = x @ p["w"]
        return Pair(total=y.sum(-1), argmax=y.argmax(-1))

    params = {"w": np.ones((3, 4), np.float32)}
    m = api.export(fn, params, X, tmp_path / "m", goldens=0, quiet=True)
    assert [o.name for o in m.outputs] == ["total", "argmax"]  # field order, not sorted
    with pytest.raises(ExportError, match=r"argmax, total.*total, argmax"):
        api.export(fn, params, X, tmp_path / "n", quiet=True, output_names=["argmax", "total"])


def test_cli_permuted_output_names_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "scored" / "1"
    proc = run_cli(model_cli_args("scored", out, "--output", "score", "--output", "probs",
                                  "--output", "logits"), tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxport export: error: "), proc.stderr
    assert "score, probs, logits" in lines[0] and "logits, probs, score" in lines[0]
    assert not (tmp_path / "scored").exists()


def test_cli_key_equals_name_renames(tmp_path: Path) -> None:
    out = tmp_path / "scored" / "1"
    proc = run_cli(model_cli_args("scored", out, "--output", "score=confidence",
                                  "--goldens", "1"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [o.name for o in manifest.load(out).outputs] == ["logits", "probs", "confidence"]
    _check_labels(out, {"logits": "logits", "probs": "probs", "score": "confidence"})


def test_cli_mixed_output_forms_are_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(model_cli_args("scored", tmp_path / "o", "--output", "score=s",
                                  "--output", "p"), tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "mix of KEY=NAME and plain names" in proc.stderr
