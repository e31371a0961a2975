"""Models left in training mode are caught at export (jaxport.exporter.train_mode): NNX
without `model.eval()`, Linen with `train=True` / `mutable=['batch_stats']`. Refused in one line
naming the layer and the eval-mode fix; `--allow-train-mode` exports them, warned and recorded
in the manifest's `dropped_state`."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from flax import linen as nn
from jaxport.artifact import manifest
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError

nnx_bn = model_module("nnx_bn")
linen_bn = model_module("linen_bn")
X = {"x": jax.ShapeDtypeStruct((2, 6, 6, 3), jnp.float32)}
LX = {"x": jax.ShapeDtypeStruct((2, 8, 8, 3), jnp.float32)}


def _export(fn, params, out: Path, inputs=X, **kw):
    return api.export(fn, params, inputs, out, goldens=1, quiet=True, **kw)


def test_nnx_train_mode_refused_naming_the_dropout_layer(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as e:
        _export(nnx_bn.predict, nnx_bn.init(jax.random.key(0)), tmp_path / "m")
    msg = str(e.value)
    assert "\n" not in msg
    assert "layer drop draws random numbers" in msg, msg
    assert "model.eval()" in msg and "--allow-train-mode" in msg, msg
    assert "1 more layer(s)" in msg, msg  # the BatchNorm
    assert not (tmp_path / "m").exists()


def test_nnx_batchnorm_alone_in_train_mode_refused(tmp_path: Path) -> None:
    model = nnx_bn.init_eval(jax.random.key(0))
    model.bn.use_running_average = False
    with pytest.raises(ExportError, match=r"BatchNorm layer bn runs in training mode: .*"
                                          r"running statistics are not read.*model\.eval\(\)"):
        _export(nnx_bn.predict, model, tmp_path / "m")


def test_nnx_train_mode_allowed_is_warned_and_recorded(tmp_path: Path, capsys) -> None:
    out = tmp_path / "m"
    api.export(nnx_bn.predict, nnx_bn.init(jax.random.key(0)), X, out, goldens=1,
               allow_train_mode=True)
    err = capsys.readouterr().err
    assert "layer drop draws random numbers" in err and "exported anyway" in err, err
    m = manifest.load(out)
    state = {s.layer: s for s in m.dropped_state}
    assert set(state) == {"drop", "bn"}
    assert state["drop"].kind == "rng"
    assert list(state["drop"].leaves) == ["drop.rngs.count", "drop.rngs.key"]
    assert state["bn"].kind == "running_statistics"
    assert list(state["bn"].leaves) == ["params.bn.mean", "params.bn.var"]
    assert "normalises with the batch's statistics" in state["bn"].reason
    assert {d.name for d in m.dropped_leaves} == {"params.bn.mean", "params.bn.var"}


def test_nnx_eval_mode_exports_with_nothing_recorded(tmp_path: Path) -> None:
    m = _export(nnx_bn.predict, nnx_bn.init_eval(jax.random.key(0)), tmp_path / "m")
    assert not m.dropped_state and not m.dropped_leaves


def _linen_train(variables, x):
    logits, _ = linen_bn.model.apply(variables, x, train=True, mutable=["batch_stats"],
                                     rngs={"dropout": jax.random.key(1)})
    return logits


class BNNet(nn.Module):
    """Dense + BatchNorm, no dropout."""

    @nn.compact
    def __call__(self, x, train: bool):
        return nn.BatchNorm(use_running_average=not train, name="bn")(nn.Dense(4)(x))


BN_VARS = BNNet().init(jax.random.key(0), jnp.ones((2, 3)), False)
BX = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}


def _bn_updates_dropped(variables, x):
    return BNNet().apply(variables, x, True, mutable=["batch_stats"])[0]


def _bn_returns_updates(variables, x):
    return BNNet().apply(variables, x, True, mutable=["batch_stats"])


def test_linen_train_mode_refused_naming_the_module(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as e:
        _export(_linen_train, linen_bn.init(jax.random.key(0)), tmp_path / "m", LX)
    msg = str(e.value)
    assert "\n" not in msg
    assert "layer Net/drop draws random numbers" in msg, msg
    assert "deterministic=True / train=False" in msg, msg


def test_linen_returning_updated_batch_stats_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"returns updated BatchNorm statistics of layer bn "
                                          r"\(output output_1\.batch_stats\.bn\.mean: .*"
                                          r"use_running_average=True / train=False"):
        _export(_bn_returns_updates, BN_VARS, tmp_path / "m", BX)


def test_linen_batchnorm_on_batch_statistics_refused_then_allowed(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"BatchNorm layer bn runs in training mode.*"
                                          r"use_running_average=True / train=False"):
        _export(_bn_updates_dropped, BN_VARS, tmp_path / "m", BX)
    m = _export(_bn_updates_dropped, BN_VARS, tmp_path / "m", BX, allow_train_mode=True)
    [state] = m.dropped_state
    assert (state.layer, state.kind) == ("bn", "running_statistics")
    assert list(state.leaves) == ["params.batch_stats.bn.mean", "params.batch_stats.bn.var"]
    assert list(manifest.load(tmp_path / "m").dropped_state) == [state]


def test_cli_refuses_then_allows_train_mode(tmp_path: Path) -> None:
    out = tmp_path / "m"
    refused = run_cli(model_cli_args("nnx_bn", out), tmp_path)
    assert refused.returncode != 0
    line = refused.stderr.strip()
    assert "\n" not in line and "layer drop draws random numbers" in line, line
    allowed = run_cli(model_cli_args("nnx_bn", out, "--allow-train-mode"), tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert {s.layer for s in manifest.load(out).dropped_state} == {"drop", "bn"}


def test_sampling_from_a_key_the_caller_passes_is_not_train_mode(tmp_path: Path) -> None:
    """A key among the inputs is sampling on purpose; the same draw from a key made inside the
    function is fixed at export and refused, naming the user's file:line."""
    inputs = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32),
              "key": jax.ShapeDtypeStruct((2,), jnp.uint32)}

    def sample(p, x, key):
        return x + jax.random.normal(key, x.shape)

    _export(sample, {}, tmp_path / "ok", inputs)

    def fixed(p, x, key):
        return x + jax.random.normal(jax.random.PRNGKey(0), x.shape)

    with pytest.raises(ExportError, match=r"layer at test_train_mode\.py:\d+ \(\S*fixed\) draws "
                                          r"random numbers"):
        _export(fixed, {}, tmp_path / "no", inputs)
