"""`export(..., batch_sizes=...)` / `jaxport export --batch-sizes`: one fixed-shape program per
batch size, one manifest, -1 batch dimension in Manifest.inputs/outputs, goldens per size."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jax_export
from jaxport.artifact import manifest as manifest_io
from jaxport.artifact import weights as weights_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.goldens import load_npy
from jaxport.exporter import export
from jaxport.exporter.errors import ExportError

SIZES = (1, 4, 8)


def model(params, x, t):
    """Row-wise model: each output row depends only on its input row."""
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"y": h * t[:, None], "s": jnp.sum(h, axis=1)}


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((6, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32)}


def _inputs(lead: int = 1) -> dict[str, jax.ShapeDtypeStruct]:
    return {"x": jax.ShapeDtypeStruct((lead, 6), np.float32),
            "t": jax.ShapeDtypeStruct((lead,), np.float32)}


@pytest.fixture(scope="module")
def batched(tmp_path_factory) -> tuple[Path, manifest_pb2.Manifest]:
    out = tmp_path_factory.mktemp("batched") / "m" / "1"
    m = export(model, _params(), _inputs(), out, batch_sizes=[8, 1, 4], quiet=True, goldens=2)
    return out, m


def test_one_program_per_size_sharing_weights(batched):
    out, m = batched
    assert [p.batch_size for p in m.programs] == list(SIZES)
    assert list(m.batching.batch_sizes) == list(SIZES)
    assert list(m.batching.batched_inputs) == ["x", "t"]
    assert sorted(m.batching.batched_outputs) == ["s", "y"]
    assert {s.name: list(s.shape) for s in m.inputs} == {"x": [-1, 6], "t": [-1]}
    assert {s.name: list(s.shape) for s in m.outputs} == {"y": [-1, 3], "s": [-1]}
    for p in m.programs:
        b = p.batch_size
        assert p.mlirbc_file == f"model.b{b}.mlirbc" and (out / p.mlirbc_file).is_file()
        assert (out / p.jaxexport_file).is_file()
        shapes = {a.name: list(a.shape) for a in p.arguments
                  if a.role == manifest_pb2.ARGUMENT_ROLE_INPUT}
        assert shapes == {"x": [b, 6], "t": [b]}, "each program stays fixed-shape"
        params = [a for a in p.arguments if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
        assert [a.tensorstore_spec_json for a in params] == [
            a.tensorstore_spec_json for a in m.programs[0].arguments
            if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER
        ], "weights are written once and shared"
    reread = manifest_io.load(out)
    manifest_io.verify_files(out, reread)
    assert reread == m


def test_goldens_per_size_match_each_program(batched):
    out, m = batched
    by_size = {p.batch_size: p for p in m.programs}
    seen = set()
    for case in m.goldens:
        b = case.batch_size
        seen.add(b)
        assert case.name.startswith(f"b{b}_")
        program = by_size[b]
        exp = jax_export.deserialize(bytearray((out / program.jaxexport_file).read_bytes()))
        values = weights_io.read_parameters(out, program)
        names = [a.name for a in program.arguments
                 if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
        params = {n.removeprefix("params."): v for n, v in zip(names, values, strict=True)}
        x = load_npy(out / case.inputs["x"], np.float32)
        t = load_npy(out / case.inputs["t"], np.float32)
        assert x.shape == (b, 6)
        got = exp.call(params, x, t)  # the function's own output dict (model.jaxexport keeps it)
        want = model(_params(), x, t)
        for name in ("y", "s"):
            golden = load_npy(out / case.outputs[name], np.float32)
            np.testing.assert_allclose(golden, want[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(np.asarray(got[name]), golden, rtol=1e-5, atol=1e-6)
    assert seen == set(SIZES)


def test_output_without_batch_dimension_is_refused(tmp_path):
    def pooled(params, x, t):
        return jnp.sum(x @ params["w"], axis=0) + t.sum()

    with pytest.raises(ExportError, match=r"output 'output' has shape \[3\] at batch size 1"):
        export(pooled, _params(), _inputs(), tmp_path / "a", batch_sizes=[1, 2], quiet=True)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ([], "batch sizes are empty"),
        ([0, 4], "batch size 0 is not a positive integer"),
        ([4, 4], "batch size listed twice"),
        ([1.5], "batch size 1.5 is not a positive integer"),
    ],
)
def test_bad_batch_sizes(tmp_path, sizes, message):
    with pytest.raises(ExportError, match=message):
        export(model, _params(), _inputs(), tmp_path / "b", batch_sizes=sizes, quiet=True)


def test_scalar_input_is_refused(tmp_path):
    with pytest.raises(ExportError, match="input 't' is a scalar"):
        export(model, _params(), {"x": _inputs()["x"],
                                  "t": jax.ShapeDtypeStruct((), np.float32)},
               tmp_path / "c", batch_sizes=[1, 2], quiet=True)


_CLI_MODULE = '''
import jax
import jax.numpy as jnp


def init(key):
    return {"w": jax.random.normal(key, (6, 3))}


def predict(params, x):
    return jnp.tanh(x @ params["w"])
'''


def _jaxport(tmp_path: Path, *args: str):
    import subprocess
    import sys

    (tmp_path / "bmod.py").write_text(_CLI_MODULE)
    exe = Path(sys.executable).parent / "jaxport"
    return subprocess.run([str(exe), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)


def test_cli_batch_sizes(tmp_path):
    out = tmp_path / "art"
    proc = _jaxport(tmp_path, "export", "bmod:predict", "--params", "bmod:init",
                    "--input", "x:float32[B,6]", "--batch-sizes", "1,4", "--out", str(out),
                    "--quiet", "--goldens", "1")
    assert proc.returncode == 0, proc.stderr
    m = manifest_io.load(out)
    assert [p.batch_size for p in m.programs] == [1, 4]
    assert [list(s.shape) for s in m.inputs] == [[-1, 6]]
    assert [list(s.shape) for s in m.outputs] == [[-1, 3]]
    assert sorted(c.batch_size for c in m.goldens) == [1, 4]


def test_cli_numeric_batch_dimension_is_warned_about(tmp_path):
    """`x:float32[8,6]` with --batch-sizes: the 8 is replaced by each size; said in one line."""
    out = tmp_path / "art"
    proc = _jaxport(tmp_path, "export", "bmod:predict", "--params", "bmod:init",
                    "--input", "x:float32[8,6]", "--batch-sizes", "4,1", "--out", str(out),
                    "--quiet", "--goldens", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "jaxport: warning: --input x:float32[8,6]: with --batch-sizes dimension 0 is the batch "
        "dimension, so its 8 is replaced by each batch size (1,4); write it B (x:float32[B,6]) "
        "to say so"]
    assert [p.batch_size for p in manifest_io.load(out).programs] == [1, 4]


def test_cli_bad_batch_sizes_is_one_line(tmp_path):
    proc = _jaxport(tmp_path, "export", "bmod:predict", "--params", "bmod:init",
                    "--input", "x:float32[B,6]", "--batch-sizes", "1,x", "--out",
                    str(tmp_path / "art"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "jaxport export: error: --batch-sizes '1,x': expected comma-separated positive "
        "integers, e.g. 1,8,32"
    ]


def test_cli_verify_covers_every_program(tmp_path):
    out = tmp_path / "art"
    proc = _jaxport(tmp_path, "export", "bmod:predict", "--params", "bmod:init",
                    "--input", "x:float32[B,6]", "--batch-sizes", "1,4", "--out", str(out),
                    "--quiet", "--goldens", "1")
    assert proc.returncode == 0, proc.stderr
    proc = _jaxport(tmp_path, "verify", str(out), "--checks", "checksums,jaxexport,pjrt")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jaxexport: pass: 2 golden case(s) over 2 programs (batch sizes 1,4)" in proc.stdout
    assert "pjrt: pass: 2 golden case(s) over 2 programs (batch sizes 1,4)" in proc.stdout
