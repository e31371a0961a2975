"""`model.jaxexport` keeps the function's output tree: `jax.export.deserialize(...).call`
returns the dict or the single array the function returned (the manifest's flat result names
stay the C++ view, in the same order as the tree's leaves). Trees jax cannot serialize (a
registered dataclass) and programs with check results keep the flat tuple; consumers that
flatten with `jax.tree.leaves` (the bridge, `jaxport.artifact`, verify) read both."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxport.artifact
import numpy as np
from jax import export as jax_export
from jaxport.artifact import manifest
from jaxport.exporter import api

X = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
PARAMS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4) / 10}
x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def _deserialized(out: Path):
    m = manifest.load(out)
    return m, jax_export.deserialize(bytearray((out / m.programs[0].jaxexport_file).read_bytes()))


def test_dict_output_comes_back_as_the_dict(tmp_path: Path) -> None:
    def fn(p, x):
        h = x @ p["w"]
        return {"probs": jax.nn.softmax(h), "logits": h, "aux": {"norm": jnp.sum(h * h, -1)}}

    api.export(fn, PARAMS, X, tmp_path / "m", goldens=1, quiet=True)
    m, exp = _deserialized(tmp_path / "m")
    got = exp.call(PARAMS, x)
    want = fn(PARAMS, x)
    assert isinstance(got, dict) and set(got) == {"probs", "logits", "aux"}
    assert set(got["aux"]) == {"norm"}
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    # The manifest's flat names are the tree's leaves in order.
    assert [o.name for o in m.outputs] == ["aux.norm", "logits", "probs"]
    out = jaxport.artifact.open(tmp_path / "m").call(x=x)  # flattening readers: unchanged
    np.testing.assert_allclose(out["aux.norm"], np.asarray(want["aux"]["norm"]), rtol=1e-6)


def test_single_array_comes_back_as_an_array(tmp_path: Path) -> None:
    api.export(lambda p, x: x @ p["w"], PARAMS, X, tmp_path / "m", goldens=1, quiet=True)
    _, exp = _deserialized(tmp_path / "m")
    got = exp.call(PARAMS, x)
    assert isinstance(got, jax.Array) and got.shape == (2, 4)
    np.testing.assert_allclose(np.asarray(got), x @ PARAMS["w"], rtol=1e-6, atol=1e-6)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Out:
    a: jax.Array
    b: jax.Array


def test_unserializable_tree_and_checks_keep_the_flat_tuple(tmp_path: Path) -> None:
    api.export(lambda p, x: Out(x @ p["w"], x), PARAMS, X, tmp_path / "dc", goldens=1,
               quiet=True)
    m, exp = _deserialized(tmp_path / "dc")
    got = exp.call(PARAMS, x)
    assert isinstance(got, tuple) and len(got) == 2
    assert [o.name for o in m.outputs] == ["a", "b"]

    def checked(p, x):
        return {"y": jnp.log(x @ p["w"])}

    api.export(checked, PARAMS, X, tmp_path / "ck", goldens=1, quiet=True, checks=["nan"])
    m, exp = _deserialized(tmp_path / "ck")
    got = exp.call(PARAMS, x)
    assert isinstance(got, tuple) and len(got) == len(m.programs[0].results)
