"""The Python export API: manifest order, dropped leaves, dtypes, weights and goldens on disk."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporter_helpers import model_module
from jax import export
from jaxport.artifact import goldens, manifest, weights
from jaxport.artifact.errors import SchemaVersionError
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api
from jaxport.exporter import module as module_mod
from jaxport.exporter.errors import ExportError
from jaxport.exporter.progress import Progress

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
    _m, prog = _program(art)
    params = model_module("mlp").init(jax.random.key(0))
    arrays = weights.read_parameters(art, prog)
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


def test_nested_pytree_order_equals_jax_flatten_order(artifacts) -> None:
    art = artifacts("nested")
    m, prog = _program(art)
    mod = model_module("nested")
    params = mod.init(jax.random.key(0))
    xs = [jax.ShapeDtypeStruct(s, d) for d, s in mod.INPUTS.values()]
    flat = jax.tree_util.tree_flatten_with_path((params, *xs))[0]
    assert [a.leaf_index for a in prog.arguments] == list(range(len(flat)))
    n_params = len(jax.tree.leaves(params))
    assert [a.key_path for a in prog.arguments[:n_params]] == [
        jax.tree_util.keystr(p[1:]) for p, _ in flat[:n_params]]
    assert prog.arguments[0].key_path == "['a_head'][0]['w']"
    assert "params.encoder.layers.1.norm.g" in [a.name for a in prog.arguments]
    assert [a.name for a in prog.arguments[n_params:]] == ["x", "scale", "ids"]
    assert [list(a.shape) for a in prog.arguments[n_params:]] == [[3, 4], [], [3]]
    # several outputs, named from the output pytree in its flatten order
    assert [r.name for r in prog.results] == ["aux.argmax", "aux.norm", "head"]
    assert [o.name for o in m.outputs] == ["aux.argmax", "aux.norm", "head"]
    assert prog.results[0].dtype.datatype == "INT32"


def test_all_dtypes_manifest_and_weights_round_trip(artifacts) -> None:
    art = artifacts("alldtypes")
    _m, prog = _program(art)
    params = model_module("alldtypes").init(jax.random.key(0))
    expected = {
        "bf16": ("bfloat16", "bf16", "BF16", 2), "f16": ("float16", "f16", "FP16", 2),
        "f32": ("float32", "f32", "FP32", 4), "f64": ("float64", "f64", "FP64", 8),
        "flag": ("bool", "i1", "BOOL", 1), "i32": ("int32", "i32", "INT32", 4),
        "i64": ("int64", "i64", "INT64", 8), "i8": ("int8", "i8", "INT8", 1),
        "u8": ("uint8", "ui8", "UINT8", 1),
    }
    for arg in prog.arguments:
        key = arg.name.removeprefix("params.")
        d = arg.dtype
        assert (d.numpy, d.mlir, d.datatype, d.itemsize) == expected[key], arg.name
        assert arg.byte_size == 6 * d.itemsize
    got = dict(zip([a.name for a in prog.arguments if a.role == PARAM],
                   weights.read_parameters(art, prog), strict=True))
    for key, want in params.items():
        arr = got[f"params.{key}"]
        assert arr.dtype == np.asarray(want).dtype
        assert arr.tobytes() == np.asarray(want).tobytes()  # bit-exact, incl. bf16 and bool
    assert {r.name: r.dtype.numpy for r in prog.results}["i64"] == "int64"
    # x64 was enabled only inside export(): the test process keeps its own setting
    assert jax.config.jax_enable_x64 is False


def test_large_parameter_is_chunked_and_round_trips(tmp_path) -> None:
    # 16.4 MiB: one full 16 MiB chunk (4096 rows) and a partial edge chunk
    big = np.arange(4200 * 1024, dtype=np.float32).reshape(4200, 1024)
    m = api.export(lambda p, x: x @ p["big"][:, :8], {"big": big},
                   {"x": jax.ShapeDtypeStruct((2, 4200), np.float32)}, tmp_path / "big",
                   quiet=True, goldens=1)
    arg = m.programs[0].arguments[0]
    chunks = sorted((tmp_path / "big" / "weights" / "params.big" / "c").rglob("*"))
    assert len([c for c in chunks if c.is_file()]) == 2
    meta = json.loads((tmp_path / "big" / "weights" / "params.big" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [4096, 1024]
    np.testing.assert_array_equal(weights.read_parameter(tmp_path / "big", arg), big)
    assert weights.chunk_shape((4200, 1024), 4) == [4096, 1024]
    assert weights.chunk_shape((1200, 1024), 4, target=4 << 20) == [1024, 1024]
    assert weights.chunk_shape((3, 5), 4) == [3, 5]
    assert weights.chunk_shape((), 4) == []
    assert weights.chunk_shape((0, 7), 1) == [1, 7]


def test_progress_display_and_quiet() -> None:
    stream = io.StringIO()
    p = Progress(stream=stream)
    p.start_bytes("writing 1 parameter(s)", 100 << 20)
    for _ in range(100):
        p.advance(1 << 20)
    p.finish_bytes()
    lines = stream.getvalue().splitlines()
    assert 2 <= len(lines) <= 12 and lines[-1].startswith("jaxport: writing 1 parameter(s): 100.0")
    quiet = io.StringIO()
    q = Progress(quiet=True, stream=quiet)
    q.start_bytes("x", 100 << 20)
    q.advance(100 << 20)
    q.finish_bytes()
    q.step("hello")
    assert quiet.getvalue() == ""


def _mlp_args():
    mod = model_module("mlp")
    return mod.predict, mod.init(jax.random.key(0)), {"x": jax.ShapeDtypeStruct((4, 16),
                                                                              np.float32)}


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda f, p, i: (f, p, {"x": jax.ShapeDtypeStruct(export.symbolic_shape("b, 16"),
                                                           np.float32)}),
         ["'x'", "symbolic dimension 'b'"]),
        (lambda f, p, i: (f, {**p, "c": np.ones(2, np.complex64)}, i),
         ["['c']", "complex64"]),
        (lambda f, p, i: (f, {**p, "lr": 0.1}, i), ["['lr']", "float", "not an array"]),
        (lambda f, p, i: (f, p, {"x": jax.ShapeDtypeStruct((4, 16), np.complex64)}),
         ["'x'", "complex64"]),
        (lambda f, p, i: (lambda q, x: {"a": f(q, x), "b": x.astype(np.complex64)}, p, i),
         ["'b'", "complex64"]),
    ],
)
def test_api_errors_name_the_culprit(tmp_path, mutate, needles) -> None:
    fn, params, inputs = mutate(*_mlp_args())
    with pytest.raises(ExportError) as info:
        api.export(fn, params, inputs, tmp_path / "out", quiet=True)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    assert list(tmp_path.iterdir()) == []


def test_output_names_must_match_outputs(tmp_path) -> None:
    fn, params, inputs = _mlp_args()
    with pytest.raises(ExportError, match=r"2 output names given \(a, b\).*1 arrays \(output\)"):
        api.export(fn, params, inputs, tmp_path / "o", output_names=["a", "b"], quiet=True)


def test_unknown_platform(tmp_path) -> None:
    fn, params, inputs = _mlp_args()
    with pytest.raises(ExportError, match=r"unknown platform 'gpu'.*cuda"):
        api.export(fn, params, inputs, tmp_path / "o", platforms=("cpu", "gpu"), quiet=True)


def test_crash_mid_export_leaves_nothing_and_keeps_old_artifact(tmp_path, monkeypatch) -> None:
    fn, params, inputs = _mlp_args()
    out = tmp_path / "m" / "1"
    api.export(fn, params, inputs, out, quiet=True, goldens=1)
    before = (out / "manifest.json").read_bytes()

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(goldens, "write_arrays", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        api.export(fn, params, inputs, out, quiet=True, force=True)
    with pytest.raises(RuntimeError, match="disk full"):
        api.export(fn, params, inputs, tmp_path / "m" / "2", quiet=True)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["1"]  # no partial dirs
    assert (out / "manifest.json").read_bytes() == before
    manifest.verify_files(out, manifest.load(out))


def test_inspect_module_rejects_dynamic_dims_and_reports_custom_calls() -> None:
    x = jax.ShapeDtypeStruct(export.symbolic_shape("b, 4"), np.float32)
    poly = export.export(jax.jit(lambda v: v * 2))(x).mlir_module()
    with pytest.raises(ExportError, match=r"dynamic \('\?'\) dimension"):
        module_mod.inspect_module(poly, what="f")
    lapack = export.export(jax.jit(jnp.linalg.cholesky))(
        jax.ShapeDtypeStruct((4, 4), np.float32)).mlir_module()
    info = module_mod.inspect_module(lapack, what="chol")
    assert any("potrf" in t for t in info.custom_call_targets), info.custom_call_targets
    assert info.main_argument_types == ["tensor<4x4xf32>"]


def test_manifest_json_prints_zero_values_and_rejects_other_versions() -> None:
    msg = manifest_pb2.Manifest(schema_version=manifest.SCHEMA_VERSION)
    prog = msg.programs.add(mlirbc_file="model.mlirbc", jaxexport_file="model.jaxexport")
    prog.arguments.add(index=0, role=INPUT, name="x", shape=[2],
                       dtype=manifest.dtype_message(np.float32), byte_size=8)
    text = manifest.to_json(msg)
    assert '"index": 0' in text and '"leafIndex": 0' in text
    assert manifest.parse(text) == msg
    raw = json.loads(text)
    for bad in (0, manifest.MAX_SUPPORTED_SCHEMA_VERSION + 1):
        raw["schemaVersion"] = bad
        with pytest.raises(SchemaVersionError) as info:
            manifest.parse(json.dumps(raw))
        assert (f"{manifest.MIN_SUPPORTED_SCHEMA_VERSION}..{manifest.MAX_SUPPORTED_SCHEMA_VERSION}"
                in str(info.value))
