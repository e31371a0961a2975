"""NNX state saved with Orbax (`nnx.split` + `StandardCheckpointer().save(state)`, or a
CheckpointManager): restored as plain dicts whose RNG leaves (a PRNG key array and the `count`
beside it) are handled as for a module passed directly: dropped with a note, not refused."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from exporter_helpers import model_module, run_cli
from flax import nnx
from jaxport.artifact import goldens, manifest
from jaxport.exporter import api, checkpoint
from jaxport.exporter.errors import ExportError

nnx_bn = model_module("nnx_bn")
X = {"x": jax.ShapeDtypeStruct((2, 6, 6, 3), np.float32)}
PARAM_NAMES = ["params.bn.bias.value", "params.bn.mean.value", "params.bn.scale.value",
               "params.bn.var.value", "params.conv.bias.value", "params.conv.kernel.value",
               "params.head.bias.value", "params.head.kernel.value"]


def _goldens_match(out: Path, state) -> None:
    m = manifest.load(out)
    case = m.goldens[0]
    x = goldens.load_npy(out / case.inputs["x"], np.float32)
    got = goldens.load_npy(out / case.outputs[m.outputs[0].name], np.float32)
    np.testing.assert_allclose(got, np.asarray(nnx_bn.predict_state(state, x)), rtol=1e-5,
                               atol=1e-6)


def test_cli_exports_a_standard_checkpointer_save_of_nnx_state(tmp_path: Path) -> None:
    state = nnx_bn.save_state(tmp_path / "ckpt")
    out = tmp_path / "m"
    proc = run_cli(["export", "nnx_bn:predict_state", "--params", str(tmp_path / "ckpt"),
                    "--input", "x:float32[2,6,6,3]", "--out", str(out), "--goldens", "1"],
                   tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 RNG state leaf(s) (drop.rngs.count.value, drop.rngs.key.value) are not " \
           "weights" in proc.stderr, proc.stderr
    m = manifest.load(out)
    assert [a.name for a in m.programs[0].arguments if a.role == 1] == PARAM_NAMES
    assert not m.dropped_leaves and not m.dropped_state
    _goldens_match(out, state)


def test_checkpoint_manager_save_of_nnx_state(tmp_path: Path) -> None:
    _, state = nnx.split(nnx_bn.init_eval(jax.random.key(0)))
    with ocp.CheckpointManager((tmp_path / "run").absolute()) as mngr:
        mngr.save(7, args=ocp.args.StandardSave(state))
        mngr.wait_until_finished()
    restored = checkpoint.restore(str(tmp_path / "run"))
    api.export(nnx_bn.predict_state, restored.tree, X, tmp_path / "m", goldens=1, quiet=True)
    _goldens_match(tmp_path / "m", state)


def test_restored_state_merged_in_train_mode_is_refused(tmp_path: Path) -> None:
    nnx_bn.save_state(tmp_path / "ckpt")
    train_graph = nnx.split(nnx_bn.init(jax.random.key(0)))[0]
    tree = checkpoint.restore(str(tmp_path / "ckpt")).tree

    def predict_train(state, x):
        return nnx.merge(train_graph, state)(x)

    with pytest.raises(ExportError, match=r"layer drop draws random numbers .*model\.eval\(\)"):
        api.export(predict_train, tree, X, tmp_path / "m", goldens=1, quiet=True)
    m = api.export(predict_train, tree, X, tmp_path / "m", goldens=1, quiet=True,
                   allow_train_mode=True)
    assert {(s.layer, s.kind) for s in m.dropped_state} == {("drop", "rng"),
                                                           ("bn", "running_statistics")}
