"""`--vjp-order N`: a differentiable artifact. A fresh `python -I` process (no model source)
loads it with `jaxport.artifact.open(...).exported()` and takes `jax.grad` of it with respect
to an input and to the params; the gradients equal `jax.grad` of the original function. A
vjp-order-0 artifact refuses differentiation with jax's own message."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport import artifact
from jaxport.artifact import manifest
from jaxport.exporter import api, verify
from jaxport.exporter.errors import ExportError

# Run by `python -I`: jaxport.artifact + jax only; the model module is not importable.
_CONSUMER = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import jaxport.artifact

    art = jaxport.artifact.open(sys.argv[1])
    exp = art.exported()
    params = art.parameter_tree()
    x = np.load(sys.argv[2])

    def loss(p, x):
        return jnp.sum(jax.tree.leaves(exp.call(p, x))[0] ** 2)

    try:
        g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, x)
    except ValueError as exc:
        print(json.dumps({"error": str(exc), "has_vjp": exp.has_vjp()}))
        sys.exit(0)
    flat = {"x": np.asarray(g_x)}
    flat.update({f"params.{k}": np.asarray(v) for k, v in g_params.items()})
    np.savez(sys.argv[3], **flat)
    print(json.dumps({"saved": sorted(flat), "has_vjp": exp.has_vjp()}))
""")


def _consume(art: Path, x: np.ndarray, tmp: Path) -> tuple[dict, Path]:
    np.save(tmp / "x.npy", x)
    out = tmp / "grads.npz"
    proc = subprocess.run([sys.executable, "-I", "-c", _CONSUMER, str(art), str(tmp / "x.npy"),
                           str(out)], capture_output=True, text=True, timeout=600, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def test_grad_of_loaded_vjp_order_1_artifact_equals_grad_of_the_original(tmp_path: Path) -> None:
    art = tmp_path / "mlp" / "1"
    proc = run_cli(model_cli_args("mlp", art, "--vjp-order", "1", "--goldens", "1"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert manifest.load(art).vjp_order == 1
    assert json.loads((art / "manifest.json").read_text())["vjpOrder"] == 1

    mod = model_module("mlp")
    params = mod.init(jax.random.key(0))
    x = np.asarray(jax.random.normal(jax.random.key(5), (4, 16)), np.float32)
    report, grads_file = _consume(art, x, tmp_path)
    assert report["has_vjp"] is True, report

    def loss(p, x):
        return jnp.sum(mod.predict(p, x) ** 2)

    want_params, want_x = jax.grad(loss, argnums=(0, 1))(params, x)
    got = dict(np.load(grads_file))
    assert sorted(got) == ["params.b1", "params.b2", "params.w1", "params.w2", "x"]
    # Same float32 ops on the same CPU backend, but the loaded gradient is jax's separately
    # exported VJP program, compiled on its own: XLA may fuse and order the reductions
    # differently, so the results can differ by a few float32 ulps, not bit for bit.
    # rtol 1e-5 is ~80 ulps; atol 1e-6 covers elements that cancel to ~0.
    np.testing.assert_allclose(got["x"], np.asarray(want_x), rtol=1e-5, atol=1e-6)
    for k, v in want_params.items():
        np.testing.assert_allclose(got[f"params.{k}"], np.asarray(v), rtol=1e-5, atol=1e-6,
                                   err_msg=k)
    assert float(np.abs(got["x"]).max()) > 0.1  # a gradient with something in it


def test_gradient_golden_is_written_and_verified(tmp_path: Path) -> None:
    """A vjp-order artifact's first case carries output cotangents and the gradients of the
    original function; verify's jaxexport check reproduces them from the loaded program, and a
    wrong stored gradient fails it naming the argument."""
    art = tmp_path / "mlp" / "1"
    mod = model_module("mlp")
    params = mod.init(jax.random.key(0))
    m = api.export(mod.predict, params, {"x": jax.ShapeDtypeStruct((4, 16), np.float32)}, art,
                   quiet=True, goldens=2, vjp_order=1, source_function="mlp:predict")
    first, second = m.goldens
    assert sorted(first.output_cotangents) == ["output"] and not second.output_cotangents
    assert sorted(first.gradients) == ["params.b1", "params.b2", "params.w1", "params.w2", "x"]
    golden = artifact.open(art).goldens()[0]
    _, vjp_fn = jax.vjp(mod.predict, params, golden.inputs["x"])
    want_params, want_x = vjp_fn(golden.output_cotangents["output"])
    np.testing.assert_allclose(golden.gradients["x"], want_x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(golden.gradients["params.w1"], want_params["w1"], rtol=1e-6,
                               atol=1e-6)
    (result,) = verify.run_checks(art, checks=("jaxexport",))
    assert result.status == "pass", result.detail
    rows = {c.output: c for c in result.comparisons}
    assert {f"grad {n}" for n in first.gradients} <= set(rows)
    assert all(rows[f"grad {n}"].passed for n in first.gradients)

    wrong = art / first.gradients["params.w1"]
    np.save(wrong, np.load(wrong) + 0.5)
    (failed,) = verify.run_checks(art, checks=("jaxexport",))
    assert failed.status == "fail"
    assert [c.output for c in failed.comparisons if not c.passed] == ["grad params.w1"]


def test_vjp_order_0_artifact_refuses_differentiation_with_jax_message(artifacts,
                                                                       tmp_path: Path) -> None:
    art = artifacts("mlp")  # the default export: vjp_order 0
    assert manifest.load(art).vjp_order == 0
    assert json.loads((art / "manifest.json").read_text())["vjpOrder"] == 0
    report, _ = _consume(art, np.ones((4, 16), np.float32), tmp_path)
    assert report == {"error": "No VJP is available", "has_vjp": False}


@pytest.mark.parametrize("order", [-1, 1.5, True])
def test_bad_vjp_order_is_refused_naming_the_flag(order, tmp_path: Path) -> None:
    mod = model_module("mlp")
    with pytest.raises(ExportError, match=r"vjp_order \(--vjp-order\) must be an integer >= 0, "
                                          rf"got {order!r}"):
        api.export(mod.predict, mod.init(jax.random.key(0)),
                   {"x": jax.ShapeDtypeStruct((4, 16), np.float32)}, tmp_path / "o",
                   vjp_order=order, quiet=True)
    assert not (tmp_path / "o").exists()


def test_cli_negative_vjp_order_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(model_cli_args("mlp", tmp_path / "o", "--vjp-order", "-2"), tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "jaxport export: error: --vjp-order must be >= 0, got -2"
