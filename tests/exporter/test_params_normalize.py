"""Params of any framework: Flax FrozenDict (Linen), NNX modules and nnx.State (RNG state
dropped with a note), registered dataclasses; `--params-path`; flax `.msgpack` files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from exporter_helpers import MODELS_DIR, model_cli_args, model_module, run_cli
from flax import serialization
from flax.training import train_state
from jaxport.artifact import goldens, manifest
from jaxport.exporter import api, verify

X = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
NNX_NAMES = ["params.hidden.bias", "params.hidden.kernel", "params.out.bias",
             "params.out.kernel"]


def _param_names(m) -> list[str]:
    return [a.name for a in m.programs[0].arguments if a.role == 1]


def _golden_matches(out: Path, expected_fn) -> None:
    """The first golden's outputs equal `expected_fn(x)` computed eagerly in this process.

    rtol 1e-5 / atol 1e-6: f32 rounding differences between the jitted goldens and eager ops.
    """
    m = manifest.load(out)
    case = m.goldens[0]
    x = goldens.load_npy(out / case.inputs["x"], np.float32)
    want = expected_fn(x)
    want = want if isinstance(want, dict) else {m.outputs[0].name: want}
    for name, rel in case.outputs.items():
        np.testing.assert_allclose(goldens.load_npy(out / rel, np.float32),
                                   np.asarray(want[name]), rtol=1e-5, atol=1e-6)


def test_nnx_module_with_dropout_rngs(tmp_path: Path, capsys) -> None:
    mod = model_module("nnx_mlp")
    model = mod.init(jax.random.key(0))
    out = tmp_path / "nnx" / "1"
    m = api.export(mod.predict, model, X, out, goldens=1)
    err = capsys.readouterr().err
    assert "2 RNG state leaf(s) (drop.rngs.count, drop.rngs.key)" in err, err
    assert "not stored in the artifact" in err
    assert _param_names(m) == NNX_NAMES
    _golden_matches(out, model)
    # A consumer process without flax's types: the serialized program takes plain dicts.
    results = verify.run_checks(out, checks=["checksums", "jaxexport"])
    assert [r.status for r in results] == ["pass", "pass"], results


def test_nnx_state(tmp_path: Path) -> None:
    mod = model_module("nnx_mlp")
    state = mod.init_state(jax.random.key(0))
    out = tmp_path / "state"
    m = api.export(mod.predict_state, state, X, out, goldens=1, quiet=True)
    assert _param_names(m) == NNX_NAMES
    _golden_matches(out, lambda x: mod.predict_state(state, x))


def test_linen_frozendict(tmp_path: Path) -> None:
    mod = model_module("linen_mlp")
    variables = mod.init(jax.random.key(0))
    out = tmp_path / "linen"
    m = api.export(mod.predict, variables, X, out, goldens=1, quiet=True)
    assert _param_names(m) == ["params.params.hidden.bias", "params.params.hidden.kernel",
                               "params.params.out.bias", "params.params.out.kernel"]
    assert [o.name for o in m.outputs] == ["logits", "probs"]
    _golden_matches(out, lambda x: mod.predict(variables, x))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Dense:
    w: jax.Array
    b: jax.Array


def test_registered_dataclass(tmp_path: Path) -> None:
    params = [Dense(np.ones((3, 2), np.float32), np.arange(2, dtype=np.float32))]

    def fn(p: list[Dense], x):
        return x @ p[0].w + p[0].b

    m = api.export(fn, params, X, tmp_path / "dc", goldens=1, quiet=True)
    assert _param_names(m) == ["params.0.b", "params.0.w"]
    _golden_matches(tmp_path / "dc", lambda x: fn(params, x))


def test_plain_key_arrays_are_rng_state_as_in_a_module(tmp_path: Path, capsys) -> None:
    """A PRNG key in plain dicts (NNX state restored from Orbax) is dropped with the note a
    module's RNG state gets, and the function still receives it."""
    params = {"k": jax.random.key(0), "w": np.ones(3, np.float32)}

    def fn(p, x):
        assert jnp.issubdtype(p["k"].dtype, jax.dtypes.prng_key)
        return x * p["w"]

    m = api.export(fn, params, X, tmp_path / "k", goldens=1)
    assert "1 RNG state leaf(s) (k) are not weights" in capsys.readouterr().err
    assert _param_names(m) == ["params.w"]


def test_cli_nnx_module_params(tmp_path: Path) -> None:
    out = tmp_path / "nnx" / "1"
    args = [a for a in model_cli_args("nnx_mlp", out, "--goldens", "1") if a != "--quiet"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "RNG state leaf(s)" in proc.stderr
    assert _param_names(manifest.load(out)) == NNX_NAMES


def _train_state_checkpoint(root: Path) -> tuple[Path, dict]:
    mod = model_module("linen_mlp")
    variables = mod.init(jax.random.key(1))
    state = train_state.TrainState.create(apply_fn=mod.model.apply, params=variables,
                                          tx=optax.adam(1e-3))
    ckpt = root / "ckpt"
    with ocp.StandardCheckpointer() as saver:
        saver.save(ckpt, state)
    return ckpt, variables


def test_cli_params_path_picks_train_state_params(tmp_path: Path) -> None:
    ckpt, variables = _train_state_checkpoint(tmp_path)
    out = tmp_path / "ts" / "1"
    args = model_cli_args("linen_mlp", out, "--goldens", "1")
    args[args.index("linen_mlp:init")] = str(ckpt)
    proc = run_cli([*args, "--params-path", "params"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    mod = model_module("linen_mlp")
    _golden_matches(out, lambda x: mod.predict(variables, x))
    # A wrong part names what is there.
    args[args.index(str(out))] = str(tmp_path / "ts2")
    proc = run_cli([*args, "--params-path", "parms"], tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "--params-path 'parms': no 'parms' at the top level" in lines[0]
    assert "opt_state" in lines[0] and "params" in lines[0] and "step" in lines[0]


def test_cli_params_path_of_a_standard_train_state(tmp_path: Path) -> None:
    """Flax's usual TrainState holds variables["params"] (no "params" level): --params-path
    params with a function applying {"params": params}, as docs/guide-flax.md says."""
    mod = model_module("linen_mlp")
    variables = mod.init(jax.random.key(1))
    state = train_state.TrainState.create(apply_fn=mod.model.apply,
                                          params=variables["params"], tx=optax.sgd(0.1))
    with ocp.StandardCheckpointer() as saver:
        saver.save(tmp_path / "ckpt", state)
    out = tmp_path / "ts" / "1"
    args = model_cli_args("linen_mlp", out, "--goldens", "1")
    args[args.index("linen_mlp:init")] = str(tmp_path / "ckpt")
    args[args.index("linen_mlp:predict")] = "linen_mlp:predict_bare"
    proc = run_cli([*args, "--params-path", "params"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    _golden_matches(out, lambda x: mod.predict(variables, x))


def test_cli_msgpack_params(tmp_path: Path) -> None:
    mod = model_module("linen_mlp")
    variables = mod.init(jax.random.key(2))
    path = tmp_path / "flax_model.msgpack"
    path.write_bytes(serialization.to_bytes(variables["params"]))  # HF layout: no "params"
    out = tmp_path / "mp" / "1"
    args = model_cli_args("linen_mlp", out, "--goldens", "1")
    args[args.index("linen_mlp:init")] = str(path)
    # The bare params tree, as Hugging Face stores it, applied as {"params": tree}.
    args[args.index("linen_mlp:predict")] = "linen_mlp:predict_bare"
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    _golden_matches(out, lambda x: mod.predict(variables, x))


def test_cli_msgpack_without_flax_is_one_clear_line(tmp_path: Path) -> None:
    blocker = tmp_path / "noflax" / "flax"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named flax')\n")
    path = tmp_path / "m.msgpack"
    path.write_bytes(b"\x80")
    proc = run_cli(["export", "mlp:predict", "--params", str(path), "--input", "x:float32[2,3]",
                    "--out", str(tmp_path / "o")], tmp_path,
                   pythonpath=(tmp_path / "noflax", MODELS_DIR), fresh_process=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "reading .msgpack checkpoints needs flax (pip install flax)" in lines[0]
