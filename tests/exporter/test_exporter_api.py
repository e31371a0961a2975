"""The Python export API: manifest order, dropped leaves, dtypes, weights and goldens on disk."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
from conftest import model_module
from jaxport.exporter import goldens, manifest, weights
from jaxport.protocol.gen.jaxport.v1 import manifest_pb2

PARAM = manifest_pb2.ARGUMENT_ROLE_PARAMETER
INPUT = manifest_pb2.ARGUMENT_ROLE_INPUT


def _program(art: Path) -> tuple[manifest_pb2.Manifest, manifest_pb2.Program]:
    m = manifest.load(art)
    return m, m.programs[0]


def test_mlp_manifest_describes_main_in_flatten_order(artifacts) -> None:
    art = artifacts("mlp")
    m, prog = _program(art)
    params = model_module("mlp").init(jax.random.key(0))
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    params_args = [a for a in prog.arguments if a.role == PARAM]
    assert [a.key_path for a in params_args] == [jax.tree_util.keystr(p) for p, _ in flat]
    assert [a.name for a in prog.arguments] == [
        "params.b1", "params.b2", "params.w1", "params.w2", "x"]
    assert [a.index for a in prog.arguments] == list(range(5))
    assert prog.arguments[-1].role == INPUT and list(prog.arguments[-1].shape) == [4, 16]
    assert [r.name for r in prog.results] == ["output"] and list(prog.results[0].shape) == [4, 10]
    assert m.schema_version == manifest.SCHEMA_VERSION and list(m.platforms) == ["cpu"]
    assert not m.dropped_leaves
    assert (art / "model.mlirbc").read_bytes()[:4] == b"ML\xefR"
    manifest.verify_files(art, m)


def test_read_parameters_returns_main_order_and_matches_sha(artifacts) -> None:
    art = artifacts("mlp")
    m, prog = _program(art)
    params = model_module("mlp").init(jax.random.key(0))
    arrays = weights.read_parameters(art, m, prog)
    expected = [np.asarray(leaf) for leaf in jax.tree.leaves(params)]
    assert len(arrays) == len(expected)
    for got, want, arg in zip(arrays, expected, [a for a in prog.arguments if a.role == PARAM],
                              strict=True):
        np.testing.assert_array_equal(got, want)
        assert weights.array_sha256(got) == arg.sha256
        spec = json.loads(arg.tensorstore_spec_json)
        assert spec["driver"] == "zarr3" and not Path(spec["kvstore"]["path"]).is_absolute()


def test_goldens_are_jax_outputs(artifacts) -> None:
    art = artifacts("mlp")
    m, _ = _program(art)
    mod = model_module("mlp")
    params = mod.init(jax.random.key(0))
    assert len(m.goldens) == 2
    for case in m.goldens:
        x = goldens.load_npy(art / case.inputs["x"], np.float32)
        want = np.asarray(jax.jit(mod.predict)(params, x))
        np.testing.assert_array_equal(goldens.load_npy(art / case.outputs["output"], np.float32),
                                      want)
