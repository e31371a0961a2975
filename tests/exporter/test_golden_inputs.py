"""`--golden-inputs MODULE:FUNCTION` / `golden_inputs=`: golden cases with the caller's own
inputs, next to the sampled ones."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from exporter_helpers import input_specs, model_cli_args, model_module, run_cli
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError


def test_cli_golden_inputs(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = run_cli(model_cli_args("nested", out, "--goldens", "1",
                                  "--golden-inputs", "nested:real_inputs"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    assert [g.name for g in m.goldens] == ["case0", "real_a", "real_b"]
    mod = model_module("nested")
    params = mod.init(jax.random.key(0))
    for case, given in zip(m.goldens[1:], mod.real_inputs().values(), strict=True):
        ins = {n: goldens_io.load_npy(out / p, np.float32 if n != "ids" else np.int32)
               for n, p in case.inputs.items()}
        assert ins["ids"].dtype == np.int32
        values = given.values() if isinstance(given, dict) else given
        for got, want in zip((ins["x"], ins["scale"], ins["ids"]), values, strict=True):
            np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype))
        want_out = jax.jit(mod.predict)(params, ins["x"], ins["scale"], ins["ids"])
        # Same jitted function on the same inputs: equal up to f32 rounding (rtol 1e-6).
        np.testing.assert_allclose(goldens_io.load_npy(out / case.outputs["head"], np.float32),
                                   np.asarray(want_out["head"]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("cases", "needle"), [
    ({"bad": {"x": np.zeros((5, 4), np.float32), "scale": np.float32(1),
              "ids": np.zeros(3, np.int32)}}, "fits no program"),
    ({"case0": [np.zeros((3, 4)), np.float32(1), np.zeros(3, np.int32)]}, "exists already"),
    ({"../up": [np.zeros((3, 4)), np.float32(1), np.zeros(3, np.int32)]}, "names a directory"),
    ({"f": [np.zeros((3, 4)), np.float32(1), np.zeros(3, np.float32)]}, "'ids' is float32"),
    ({"few": [np.zeros((3, 4))]}, "a sequence of 3 arrays"),
])
def test_golden_inputs_errors(tmp_path: Path, cases: dict, needle: str) -> None:
    mod = model_module("nested")
    with pytest.raises(ExportError, match=None) as info:
        api.export(mod.predict, mod.init(jax.random.key(0)), input_specs(mod), tmp_path / "o",
                   quiet=True, goldens=1, golden_inputs=cases)
    assert needle in str(info.value), info.value
    assert not (tmp_path / "o").exists()


def test_sample_integer_range_is_the_documented_one() -> None:
    """Every integer dtype samples [0, 10) (valid indices/token ids for any table of >= 10
    rows), as docs/artifact-format.md says; floats are N(0, 1), booleans both values."""
    from exporter_helpers import REPO
    from jaxport.exporter.goldens import sample_inputs

    doc = (REPO / "docs" / "artifact-format.md").read_text()
    assert "integers of every integer dtype in [0, 10)" in doc
    ints = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
    specs = {d: ((4096,), np.dtype(d)) for d in [*ints, "float32", "bool"]}
    got = sample_inputs(specs, seed=3)
    for d in ints:
        assert got[d].dtype == np.dtype(d)
        assert set(np.unique(got[d]).tolist()) == set(range(10)), d
    assert -5 < got["float32"].min() < -2 and 2 < got["float32"].max() < 5
    assert set(np.unique(got["bool"]).tolist()) == {False, True}
