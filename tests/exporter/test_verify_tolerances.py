"""Tolerances that mean something for bf16: a consumer's result is judged against a float32
evaluation of the same program; rounding differences pass, a swapped weight fails; --atol and
--rtol override a run (docs/artifact-format.md "Tolerances")."""

from __future__ import annotations

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from exporter_helpers import export_model, model_module, run_cli
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest
from jaxport.exporter import verify

BF16 = ml_dtypes.bfloat16
OLD_ATOL = OLD_RTOL = 1.6e-2  # the bf16 bound before the f32-reference rule


def _bf(a) -> np.ndarray:
    return np.asarray(a, np.float32).astype(BF16)


def _evaluations(params: dict, x: np.ndarray, swap: bool = False) -> dict[str, np.ndarray]:
    """The model three ways: float32, each op rounded to bf16, rounded once at the end."""
    w = np.asarray(params["w"], np.float32)
    v = np.asarray(params["v"], np.float32)
    if swap:
        w, v = v[::-1], w  # a genuinely wrong model: weights swapped and reversed
    x32 = np.asarray(x, np.float32)
    h32 = x32 @ w + x32 @ v
    f32 = h32 * 1.5 - h32 * 1.4375
    h = _bf(_bf(x32 @ w).astype(np.float32) + _bf(x32 @ v).astype(np.float32))
    hf = h.astype(np.float32)
    per_op = _bf(_bf(hf * 1.5).astype(np.float32) - _bf(hf * 1.4375).astype(np.float32))
    return {"f32": f32, "per_op": per_op, "once": _bf(f32)}


def _case():
    mod = model_module("bf16_mlp")
    params = mod.init(jax.random.key(0))
    x = np.asarray(jax.random.normal(jax.random.key(1), (4, 16)), np.float32).astype(BF16)
    jax_bf16 = np.asarray(jax.jit(mod.predict)(params, jnp.asarray(x)))
    return params, x, jax_bf16


def _passes(actual, expected, reference=None) -> bool:
    comps: dict[str, verify.Comparison] = {}
    verify.compare("y", actual, expected, comps, reference)
    return comps["y"].passed


def test_rounding_differences_pass_a_swapped_weight_fails() -> None:
    params, x, jax_bf16 = _case()
    ev = _evaluations(params, x)
    ref = ev["f32"]
    candidates = [ev["per_op"], ev["once"]]  # how IREE or XLA may round intermediates
    # At least one legitimate evaluation is beyond the old fixed bound of JAX's bf16 result:
    old_ok = [bool(np.all(np.abs(c.astype(np.float32) - jax_bf16.astype(np.float32))
                          <= OLD_ATOL + OLD_RTOL * np.abs(jax_bf16.astype(np.float32))))
              for c in candidates]
    assert not all(old_ok), "the case must exceed the old bound to test anything"
    for c in candidates:
        assert _passes(c, jax_bf16, ref), "within bf16 rounding of f32: must pass"
    # ... and so is JAX's own result, scored against either evaluation:
    assert _passes(jax_bf16, candidates[0], ref) and _passes(jax_bf16, candidates[1], ref)
    wrong = _evaluations(params, x, swap=True)
    for c in (wrong["per_op"], wrong["once"]):
        assert not _passes(c, jax_bf16, ref), "a swapped weight must fail"
        # A wrong golden does not widen the bound for a right result either.
        assert not _passes(ev["once"], c, ref)


def test_ulp() -> None:
    # bf16 keeps 8 significand bits: ulp(1) = 2^-7, ulp(3) = 2^-6; f16 ulp(1) = 2^-10.
    # Exact powers of two: equality is exact.
    np.testing.assert_array_equal(verify.ulp(np.array([1.0, 3.0, 0.0]), "bfloat16"),
                                  [2.0 ** -7, 2.0 ** -6, 2.0 ** -133])
    assert float(verify.ulp(np.array(1.0), "float16")) == 2.0 ** -10


@pytest.fixture(scope="module")
def bf16_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bf16") / "bf16_tanh" / "1"
    export_model("bf16_tanh", out, goldens=2)
    return out


def test_verify_bf16_model_uses_the_f32_reference(bf16_artifact: Path) -> None:
    results = verify.run_checks(bf16_artifact, checks=["jaxexport", "pjrt", "iree"])
    for r in results:
        assert r.status == "pass", verify.format_table(results)
        assert all("of f32" in c.tolerance for c in r.comparisons), verify.format_table(results)


def _tampered(bf16_artifact: Path, tmp_path: Path) -> Path:
    """The artifact with golden outputs of the swapped-weight model (the program is right,
    the goldens now say something genuinely different)."""
    art = tmp_path / "bf16_tanh" / "1"
    shutil.copytree(bf16_artifact, art)
    m = manifest.load(art)
    mod = model_module("bf16_tanh")
    params = mod.init(jax.random.key(0))
    swapped = {"w": params["w"].T, "v": params["v"]}  # a transposed (swapped) weight
    for case in m.goldens:
        x = goldens_io.load_npy(art / case.inputs["x"], BF16)
        goldens_io.save_npy(art / case.outputs["output"],
                            np.asarray(jax.jit(mod.predict)(swapped, jnp.asarray(x))))
    return art


def test_wrong_bf16_result_fails_and_atol_overrides(bf16_artifact: Path, tmp_path: Path) -> None:
    art = _tampered(bf16_artifact, tmp_path)
    proc = run_cli(["verify", str(art), "--checks", "pjrt"], tmp_path)
    assert proc.returncode == 1 and "FAIL" in proc.stdout, proc.stdout + proc.stderr
    proc = run_cli(["verify", str(art), "--checks", "pjrt", "--atol", "1000", "--rtol", "0"],
                   tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1000+0*|x|" in proc.stdout
    proc = run_cli(["verify", str(art), "--checks", "pjrt", "--atol", "-1"], tmp_path)
    assert proc.returncode == 1 and "--atol must be a finite number >= 0" in proc.stderr


@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16])
def test_special_values_pass_only_the_same_value(dtype) -> None:
    """An infinity or NaN in a golden is matched exactly (`rtol*|inf|` admits nothing): a finite
    value or the other infinity against +inf fails, the same specials pass with error 0."""
    expected = np.array([np.inf, -np.inf, np.nan, 1.0], dtype)
    same: dict[str, verify.Comparison] = {}
    verify.compare("y", expected.copy(), expected, same)
    assert same["y"].passed and same["y"].max_abs == 0.0
    for wrong in ([1.0, -np.inf, np.nan, 1.0], [-np.inf, -np.inf, np.nan, 1.0],
                  [np.inf, -np.inf, 0.0, 1.0], [np.inf, -np.inf, np.nan, np.inf]):
        into: dict[str, verify.Comparison] = {}
        verify.compare("y", np.array(wrong, dtype), expected, into)
        assert not into["y"].passed, wrong
        assert into["y"].max_abs == np.inf, wrong
