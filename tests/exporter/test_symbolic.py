"""Symbolic dimensions at export (issue 16): `jaxport export --input tokens:int32[B,T]
--input mask:bool[B,T] --dim B=1..64 --dim 'T=8..2048:8' --buckets T=128,512 --batch-sizes 2`
writes ONE shape-polymorphic `model.jaxexport` plus fixed-shape bucket programs sharing the
weights; `jaxport verify` runs the goldens at several sizes on the polymorphic program (jax.export)
and PJRT + IREE on the bucket programs; `jaxport.artifact.open(dir).call` runs any admissible
size and refuses the others naming the rule. One CLI export per session serves every test.

Tolerance against the original function: float32, rtol 1e-5 / atol 1e-6 (the deserialized
polymorphic program and the jitted function are two XLA:CPU compilations of the same ops; a
wrong weight or mask moves the outputs by O(0.1)).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jaxport.artifact
import numpy as np
import pytest
from exporter_helpers import model_module, run_cli
from jaxport.artifact import manifest as manifest_io
from jaxport.artifact.errors import ArtifactError
from jaxport.exporter import api, verify
from jaxport.exporter.errors import ExportError

seq = model_module("seq")
RTOL, ATOL = 1e-5, 1e-6
BASE = ["export", "seq:predict", "--params", "seq:init", "--quiet"]
FLAGS = ["--input", "tokens:int32[B,T]", "--input", "mask:bool[B,T]", "--dim", "B=1..64",
         "--dim", "T=8..2048:8"]


@pytest.fixture(scope="session")
def seq_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("symbolic")
    out = root / "seq" / "1"
    proc = run_cli([*BASE, *FLAGS, "--buckets", "T=128,512", "--batch-sizes", "2",
                    "--pad", "T=mask", "--out", str(out)], root)
    assert proc.returncode == 0, proc.stderr
    return out


def test_one_polymorphic_program_and_bucket_programs_sharing_the_weights(
        seq_artifact: Path) -> None:
    m = manifest_io.load(seq_artifact)
    assert m.schema_version == 2
    assert [(p.dim, p.mask_input) for p in m.padding] == [("T", "mask")]
    assert [(d.name, d.min, d.max, d.multiple_of, d.expression) for d in m.dimensions] == [
        ("B", 1, 64, 1, "B"), ("T", 8, 2048, 8, "8*T_8")]
    assert {i.name: (list(i.shape), list(i.dim_names)) for i in m.inputs} == {
        "tokens": ([-1, -1], ["B", "T"]), "mask": ([-1, -1], ["B", "T"])}
    assert {o.name: (list(o.shape), list(o.dim_names)) for o in m.outputs} == {
        "per_token": ([-1, -1, 8], ["B", "T", ""]), "pooled": ([-1, 8], ["B", ""])}
    poly, *buckets = m.programs
    assert poly.polymorphic and not poly.dims and poly.jaxexport_file == "model.jaxexport"
    assert [dict(p.dims) for p in buckets] == [{"B": 2, "T": 128}, {"B": 2, "T": 512}]
    assert [p.mlirbc_file for p in buckets] == ["model.B2.T128.mlirbc", "model.B2.T512.mlirbc"]
    assert not any(p.polymorphic for p in buckets)
    tokens = {p.mlirbc_file: next(a for a in p.arguments if a.name == "tokens")
              for p in m.programs}
    assert list(tokens["model.mlirbc"].dim_names) == ["B", "T"]
    assert list(tokens["model.B2.T512.mlirbc"].shape) == [2, 512]
    assert not tokens["model.B2.T512.mlirbc"].dim_names

    def weights(p):
        return [(a.name, a.tensorstore_spec_json, a.sha256) for a in p.arguments
                if a.role == manifest_io.manifest_pb2.ARGUMENT_ROLE_PARAMETER]

    assert weights(poly) == weights(buckets[0]) == weights(buckets[1])
    assert len(weights(poly)) == 3
    # the polymorphic @main really is polymorphic; the bucket programs are fixed
    assert "tensor<?x?xi32>" in (seq_artifact / "model.mlir").read_text()
    assert "?x" not in (seq_artifact / "model.B2.T128.mlir").read_text()
    # goldens: smallest, middle and largest sizes (polymorphic) and each bucket's own
    sizes = {g.name: dict(g.dims) for g in m.goldens}
    assert sizes["dims_min"] == {"B": 1, "T": 8}
    assert sizes["dims_B_mid"] == {"B": 32, "T": 8}
    assert sizes["dims_B_max"] == {"B": 64, "T": 8}
    assert sizes["dims_T_mid"] == {"B": 1, "T": 1024}
    assert sizes["dims_T_max"] == {"B": 1, "T": 2048}
    assert sizes["B2_T128_case0"] == {"B": 2, "T": 128}


def test_verify_runs_every_size_on_jax_export_and_the_buckets_on_pjrt_and_iree(
        seq_artifact: Path) -> None:
    results = verify.run_checks(seq_artifact)
    table = verify.format_table(results)
    assert [r.status for r in results] == ["pass"] * len(verify.CHECKS), table
    by = {r.check: r.detail for r in results}
    # 9 cases on the polymorphic program (5 sizes + 4 bucket cases) + 2 per bucket program
    assert "13 golden case(s) over 3 programs (polymorphic, B2.T128, B2.T512)" in by["jaxexport"]
    for check in ("pjrt", "pjrt-c-api", "iree"):  # the bucket programs, without jax too
        assert "4 golden case(s) over 2 programs (B2.T128, B2.T512)" in by[check]


def test_artifact_call_at_any_admissible_size_equals_the_jax_function(
        seq_artifact: Path) -> None:
    art = jaxport.artifact.open(seq_artifact)
    params = seq.init(jax.random.key(0))
    reference = jax.jit(seq.predict)
    rng = np.random.default_rng(1)
    for b, t in [(1, 8), (5, 200), (64, 2048)]:
        tokens = rng.integers(0, seq.VOCAB, (b, t)).astype(np.int32)
        mask = rng.random((b, t)) < 0.7
        got = art.call(tokens=tokens, mask=mask)
        want = reference(params, tokens, mask)
        for key in ("per_token", "pooled"):
            np.testing.assert_allclose(got[key], np.asarray(want[key]), rtol=RTOL, atol=ATOL)
    for t, needle in [(12, "input 'tokens' dimension 1 (T) is 12: T must be a multiple of 8 "
                           "in 8..2048"),
                      (4096, "input 'tokens' dimension 1 (T) is 4096: T must be a multiple of "
                             "8 in 8..2048")]:
        with pytest.raises(jaxport.artifact.DimensionError, match=re.escape(needle)):
            art.call(tokens=np.zeros((1, t), np.int32), mask=np.ones((1, t), bool))


def test_a_function_that_specialises_on_a_shape_fails_its_goldens(tmp_path: Path) -> None:
    """`x.shape[0] == 1` is False for a symbolic B (jax's warning): the polymorphic program takes
    the other branch, the golden computed at B = 1 does not, and verify says so."""
    def fn(p, x):
        return x * p["w"] if x.shape[0] == 1 else x + p["w"]

    out = tmp_path / "spec"
    api.export(fn, {"w": np.float32(3.0)}, {"x": (("B", 4), np.float32)}, out,
               dims={"B": "1..8"}, quiet=True)
    result = verify.run_checks(out, checks=["jaxexport"])[0]
    assert result.status == "fail", verify.format_table([result])
    assert [c.passed for c in result.comparisons] == [False], verify.format_table([result])


CLI_ERRORS = [
    (["--input", "tokens:int32[B,T]", "--input", "mask:bool[B,T]", "--dim", "B=1..64"], 1,
     ["--input tokens", "dimension 'T' has no --dim", "--dim T="]),
    ([*FLAGS[:4], "--dim", "B=1..64", "--dim", "T=8..x"], 2,
     ["--dim 'T=8..x'", "NAME=MIN..MAX"]),
    (["--input", "tokens:int32[B,a+b]", "--input", "mask:bool[B,T]", "--dim", "B=1..64"], 2,
     ["--input tokens", "'a+b'", "not a name"]),
    ([*FLAGS, "--buckets", "T=4096", "--batch-sizes", "1"], 1,
     ["--buckets T=4096", "T must be a multiple of 8 in 8..2048"]),
    ([*FLAGS, "--buckets", "T=100", "--batch-sizes", "1"], 1,
     ["--buckets T=100", "T must be a multiple of 8 in 8..2048"]),
    ([*FLAGS, "--buckets", "T=128"], 1, ["--buckets", "dimension B has no bucket sizes"]),
    ([*FLAGS[:4], "--dim", "B=1..64", "--dim", "T=4..2048:8"], 1,
     ["--dim T=4..2048:8", "multiples of 8"]),
    ([*FLAGS, "--buckets", "T=12x"], 2, ["--buckets 'T=12x'", "DIM=N1,N2"]),
    ([*FLAGS, "--checks", "nan"], 1, ["--checks", "not built"]),
    ([*FLAGS, "--input", "w:float32[B,T]", "--buckets", "T=128", "--batch-sizes", "1",
      "--pad", "T=w"], 1,
     ["--pad T=w", "must be a bool or integer input (0 / False = padding",
      "w:float32[B,T] is neither: declare it w:int32[B,T] or w:bool[B,T]"]),
    ([*FLAGS, "--input", "n:int32[B]", "--buckets", "T=128", "--batch-sizes", "1",
      "--pad", "T=n"], 1, ["--pad T=n", "the mask n:int32[B] has no T axis"]),
    ([*FLAGS, "--pad", "T=mask"], 1, ["--pad T=mask without --buckets"]),
    ([*FLAGS, "--mesh", "data=2"], 1, ["symbolic dimensions (--dim)", "(--mesh)",
                                       "not supported"]),
]


@pytest.mark.parametrize(("flags", "code", "needles"), CLI_ERRORS,
                         ids=[" ".join(f[-2:]) for f, _, _ in CLI_ERRORS])
def test_bad_symbolic_flags_are_one_line_naming_them(tmp_path: Path, flags: list[str],
                                                     code: int, needles: list[str]) -> None:
    proc = run_cli([*BASE, *flags, "--out", str(tmp_path / "o")], tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, proc.stderr
    assert lines[0].startswith("jaxport export: error: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "o").exists()


def test_pad_is_refused_for_a_function_that_reads_masked_positions(tmp_path: Path) -> None:
    """`--pad T=mask` is a promise: the exporter pads a sample along T (mask False there) and
    refuses when an output changes, naming the flag, the output and the difference."""
    def unmasked(p, tokens, mask):  # a mean over T that ignores the mask
        return {"pooled": p["embed"][tokens].mean(axis=1)}

    with pytest.raises(ExportError, match=r"--pad T=mask: padding T from 8 to 24 with mask "
                                          r"False there changes unmasked's output 'pooled'"):
        api.export(unmasked, seq.init(jax.random.key(0)),
                   {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)},
                   tmp_path / "o", dims={"B": "1..4", "T": "8..64:8"}, buckets={"T": [16]},
                   batch_sizes=[1], padding={"T": "mask"}, quiet=True)
    assert not (tmp_path / "o").exists()


def test_an_output_axis_that_is_no_single_dimension_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"output 'output' dimension 0 is 2\*B"):
        api.export(lambda p, x: jax.numpy.concatenate([x, x]), {},
                   {"x": (("B", 3), np.float32)}, tmp_path / "o", dims={"B": "1..8"},
                   quiet=True)


def test_validate_allows_minus_one_only_on_named_axes_of_polymorphic_programs(
        seq_artifact: Path) -> None:
    text = (seq_artifact / "manifest.json").read_text()
    manifest_io.parse(text)  # as exported: valid

    def edited(change) -> str:
        data = json.loads(text)
        change(data)
        return json.dumps(data)

    def unnamed(d):  # -1 on an axis no dim_names entry names
        d["programs"][0]["arguments"][3]["dimNames"] = ["B", ""]

    def not_polymorphic(d):  # a named -1 axis in a program that is not polymorphic
        d["programs"][0]["polymorphic"] = False

    def undeclared(d):  # an input naming a dimension manifest.dimensions lacks
        d["inputs"][0]["dimNames"] = ["B", "L"]

    def bad_padding(d):  # padding masked by an input the model does not have
        d["padding"][0]["maskInput"] = "attention"

    for change, needle in [(unnamed, "non-fixed shape"), (not_polymorphic, "polymorphic"),
                           (undeclared, "'L'"), (bad_padding, "padding entry T=attention")]:
        with pytest.raises(ArtifactError, match=needle):
            manifest_io.parse(edited(change))
