"""`jaxport.artifact.open` as a Python consumer uses it: in a fresh `python -I` process that cannot
import the model's source, on artifacts exported here and on the committed back-compat artifact.

Each test runs `consumer.py` below in such a process and compares what it prints with what the
exporting side knows: goldens (computed by JAX when exporting), the original params pytree, and
JAX's own `err.get()` text for a tripped check.

Tolerance for outputs: the consumer runs the deserialized `Exported` with XLA:CPU on the machine
that computed the goldens with the jitted function, so the only freedom is XLA's choice of
fusion between the two compilations; rtol 1e-5 / atol 1e-6 (f32) is far below any real error
(a wrong parameter or a swapped input moves outputs by O(1)). Integer outputs must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

TESTS = Path(__file__).resolve().parents[1]
MODELS = TESTS / "models"
BACKCOMPAT = sorted(p for p in (TESTS / "backcompat").iterdir() if (p / "manifest.json").is_file())
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))

CONSUMER = textwrap.dedent(
    """
    import json, sys
    import jaxport.artifact
    jax_at_import = "jax" in sys.modules
    import numpy as np

    art = jaxport.artifact.open(sys.argv[1])
    report = {"jax_at_import": jax_at_import, "name": art.name, "cases": [],
              "source_importable": False}
    try:
        __import__(art.manifest.source_function.split(":")[0])
        report["source_importable"] = True
    except ImportError:
        pass
    for g in art.goldens():
        row = {"name": g.name, "expected_check": g.expected_check}
        try:
            outputs = art.call(**g.inputs)
        except jaxport.artifact.CheckFailedError as exc:
            row.update(raised=exc.message, kind=exc.kind, code=str(exc.code),
                       expected_error=g.expected_error)
        else:
            row["compared"] = sorted(g.outputs)
            for name, want in g.outputs.items():
                got = outputs[name]
                assert got.dtype == want.dtype and got.shape == want.shape, (name, got, want)
                if want.dtype.kind in "iub":
                    assert np.array_equal(got, want), name
                else:
                    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                               rtol=1e-5, atol=1e-6, err_msg=name)
        report["cases"].append(row)
    import jax
    tree = art.parameter_tree()
    report["tree"] = [[jax.tree_util.keystr(p), list(np.shape(v)), str(np.asarray(v).dtype),
                       np.asarray(v).tobytes().hex()]
                      for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]]
    report["treedef"] = str(jax.tree.structure(tree))
    report["parameters"] = sorted(art.parameters())
    print(json.dumps(report))
    """
)


def _consume(art: Path, tmp_path: Path) -> dict:
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", str(script), str(art)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["jax_at_import"] is False, "importing jaxport.artifact imported jax"
    assert report["source_importable"] is False, "the consumer could import the model's source"
    return report


def _export(name: str, out: Path, fn: str = "predict", **kwargs) -> Path:
    from jaxport.exporter import export

    mod = __import__(name)
    inputs = {k: jax.ShapeDtypeStruct(shape, np.dtype(dt)) for k, (dt, shape) in
              (mod.BATCHED_INPUTS if "batch_sizes" in kwargs else mod.INPUTS).items()}
    export(getattr(mod, fn), mod.init(jax.random.key(0)), inputs, out, quiet=True,
           source_function=f"{name}:{fn}", **kwargs)
    return out


def _tree_rows(tree) -> list:
    return [[jax.tree_util.keystr(p), list(np.shape(v)), str(np.asarray(v).dtype),
             np.asarray(v).tobytes().hex()]
            for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import checked

    root = tmp_path_factory.mktemp("public_api")
    return {
        "nested": _export("nested", root / "nested" / "1", goldens=3),
        "unused": _export("unused", root / "unused" / "1", goldens=2),
        "checked": _export("checked", root / "checked" / "1", goldens=1,
                           checks=["user", "index", "nan", "div"],
                           check_goldens=checked.check_goldens()),
        "checked_batched": _export("checked", root / "checked_b" / "1", fn="predict_batched",
                                   goldens=1, batch_sizes=[1, 4],
                                   checks=["user", "index", "nan", "div"],
                                   check_goldens=checked.check_goldens_batched()),
    }


def test_call_by_input_names_equals_the_goldens(exported, tmp_path: Path) -> None:
    report = _consume(exported["nested"], tmp_path)
    assert len(report["cases"]) == 3
    for case in report["cases"]:
        assert case["compared"] == ["aux.argmax", "aux.norm", "head"], case


def test_parameters_rebuild_the_original_pytree(exported, tmp_path: Path) -> None:
    import nested

    report = _consume(exported["nested"], tmp_path)
    original = nested.init(jax.random.key(0))
    assert report["treedef"] == str(jax.tree.structure(original))
    assert report["tree"] == _tree_rows(original)
    assert report["parameters"] == sorted(
        "params." + ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        for path, _ in jax.tree_util.tree_flatten_with_path(original)[0]
    )


def test_a_parameter_jax_dropped_comes_back_as_zeros_in_the_tree(exported,
                                                                  tmp_path: Path) -> None:
    import unused

    report = _consume(exported["unused"], tmp_path)
    original = unused.init(jax.random.key(0))
    rows = {r[0]: r for r in report["tree"]}
    assert set(rows) == {"['a_unused']", "['b']", "['w']"}
    assert rows["['w']"] == _tree_rows({"w": original["w"]})[0]
    assert rows["['a_unused']"][3] == np.zeros((5, 5), np.float32).tobytes().hex()
    assert "params.a_unused" not in report["parameters"]


@pytest.mark.parametrize("which", ["checked", "checked_batched"])
def test_a_tripped_check_raises_with_jaxs_text(exported, which: str, tmp_path: Path) -> None:
    report = _consume(exported[which], tmp_path)
    tripped = [c for c in report["cases"] if c["expected_check"]]
    assert {c["expected_check"] for c in tripped} == {"user", "index", "nan", "div"}
    for case in tripped:
        assert case.get("raised") == case["expected_error"] and case["raised"], case
        assert case["kind"] == case["expected_check"]
        assert case["code"] == ("INVALID_ARGUMENT" if case["kind"] in ("user", "index")
                                else "FAILED_PRECONDITION")
    passing = [c for c in report["cases"] if not c["expected_check"]]
    assert passing and all(c["compared"] for c in passing)


@pytest.mark.parametrize("art", BACKCOMPAT, ids=lambda p: p.name)
def test_the_committed_backcompat_artifact_through_the_public_api(art: Path,
                                                                  tmp_path: Path) -> None:
    report = _consume(art, tmp_path)
    assert report["cases"] and all(c["compared"] for c in report["cases"])
    module_name = json.loads((art / "manifest.json").read_text())["sourceFunction"].split(":")[0]
    mod = __import__(module_name)
    assert report["tree"] == _tree_rows(mod.init(jax.random.key(0)))


def test_call_names_unknown_and_missing_inputs(exported) -> None:
    import jaxport.artifact

    art = jaxport.artifact.open(exported["nested"])
    with pytest.raises(jaxport.artifact.ArtifactError, match=r"unknown: \['y'\].*missing: "
                       r"\['scale', 'ids'\]"):
        art.call(x=np.zeros((3, 4), np.float32), y=1)
    with pytest.raises(jaxport.artifact.ArtifactError, match=r"input 'x': dtype float64"):
        art.call(x=np.zeros((3, 4)), scale=np.float32(1), ids=np.zeros(3, np.int32))


def test_batched_call_runs_any_rows_up_to_the_largest_size(exported) -> None:
    """The server's batch-size rule (docs/artifact-format.md, Batching): 1..4 rows run on the
    smallest program holding them (2 and 3 rows on the 4-row one, padded with copies of the
    last row), outputs cut back to the rows given, each row what JAX computes for it; 5 rows
    are refused naming the sizes, as the server refuses them."""
    import checked
    import jaxport.artifact
    from jax.experimental import checkify

    art = jaxport.artifact.open(exported["checked_batched"])
    assert art.batch_sizes == (1, 4)
    params = checked.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    for rows in (1, 2, 3, 4):
        x = rng.uniform(0.5, 2.0, (rows, 4)).astype(np.float32)
        idx = rng.integers(0, 8, (rows, 3)).astype(np.int32)
        scale = rng.uniform(1.0, 2.0, rows).astype(np.float32)
        out = art.call(x=x, idx=idx, scale=scale)
        err, want = jax.jit(checkify.checkify(checked.predict_batched))(params, x, idx, scale)
        assert err.get() is None
        assert {k: v.shape for k, v in out.items()} == {"y": (rows,), "picked": (rows, 3)}
        np.testing.assert_array_equal(out["picked"], np.asarray(want["picked"]))
        np.testing.assert_allclose(out["y"], np.asarray(want["y"]), rtol=1e-5, atol=1e-6)
    with pytest.raises(jaxport.artifact.ArtifactError, match=r"^batch size 5 exceeds "
                       r"max_batch_size 4 of model 'checked_b' \(exported batch sizes \[1, 4\]\); "
                       r"split the request$"):
        art.call(x=np.ones((5, 4), np.float32), idx=np.zeros((5, 3), np.int32),
                 scale=np.ones(5, np.float32))
    with pytest.raises(jaxport.artifact.ArtifactError, match=r"^model 'checked_b': batched inputs "
                       r"\['x', 'idx', 'scale'\] disagree on the batch size: \[2, 3\]$"):
        art.call(x=np.ones((3, 4), np.float32), idx=np.zeros((2, 3), np.int32),
                 scale=np.ones(3, np.float32))


def test_padding_rows_trip_no_check_of_their_own(exported) -> None:
    """Copies of the last real row, never zeros: 3 valid rows on the 4-row program (a zero
    `scale` row would trip the division check) pass; a bad real row still trips its check."""
    import jaxport.artifact

    art = jaxport.artifact.open(exported["checked_batched"])
    x, idx = np.ones((3, 4), np.float32), np.zeros((3, 3), np.int32)
    out = art.call(x=x, idx=idx, scale=np.full(3, 2.0, np.float32))
    assert out["y"].shape == (3,)
    with pytest.raises(jaxport.artifact.CheckFailedError) as info:
        art.call(x=x, idx=idx, scale=np.array([2.0, 0.0, 2.0], np.float32))
    assert info.value.kind == "div"


def test_open_refuses_a_tampered_weight_naming_it(exported, tmp_path: Path) -> None:
    import shutil

    import jaxport.artifact

    copy = tmp_path / "copy"
    shutil.copytree(exported["nested"], copy)
    chunk = next(p for p in sorted((copy / "weights").rglob("*")) if p.is_file()
                 and p.name != "zarr.json")
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 1
    chunk.write_bytes(bytes(data))
    with pytest.raises(jaxport.artifact.ChecksumError, match=r"sha256 mismatch"):
        jaxport.artifact.open(copy)
    # Without checksums the structure still opens (a tool inspecting a damaged artifact).
    assert jaxport.artifact.open(copy, verify_checksums=False).name == "nested"
