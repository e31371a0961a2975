"""Artifacts exported by earlier jaxport/JAX versions must keep loading and computing.

Each directory here is an artifact committed as it was exported (see make_golden.py). A change
of manifest format, weight layout or JAX version that breaks them fails this test loudly, the
way jax keeps its own back-compat test data. Never regenerate an existing golden to make this
pass: add a new one and keep reading the old ones (or bump the schema range deliberately).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import jax
import jaxport.artifact
import pytest
from jaxport.artifact import manifest, weights
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api, verify

HERE = Path(__file__).resolve().parent
GOLDENS = sorted(p for p in HERE.iterdir() if (p / "manifest.json").is_file())
sys.path.insert(0, str(HERE.parents[0] / "models"))


def test_there_is_a_golden_artifact() -> None:
    assert GOLDENS, "no back-compat artifact committed under tests/backcompat/"
    total = sum(f.stat().st_size for g in GOLDENS for f in g.rglob("*") if f.is_file())
    assert total < 200 * 1024


@pytest.mark.parametrize("art", GOLDENS, ids=lambda p: p.name)
def test_old_artifact_loads_and_verifies(art: Path) -> None:
    m = manifest.load(art)
    assert manifest.MIN_SUPPORTED_SCHEMA_VERSION <= m.schema_version
    manifest.verify_files(art, m)
    params = weights.read_parameters(art, m.programs[0])
    assert len(params) == sum(a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER
                              for a in m.programs[0].arguments)
    results = verify.run_checks(art, checks=("checksums", "jaxexport", "pjrt", "iree"))
    for r in results:
        assert r.status == "pass", f"{art.name}: {r.check}: {r.detail}"


@pytest.mark.parametrize("art", GOLDENS, ids=lambda p: p.name)
def test_old_artifact_without_export_date_has_unknown_age(art: Path) -> None:
    """Artifacts written before `exportedAt` existed still open through the public loader,
    with no compatibility warning (their age is unknown: docs/artifact-format.md), and still
    compute their goldens."""
    m = manifest.load(art)
    assert m.exported_at == "" and manifest.exported_at(m) is None
    assert manifest.compatibility_warnings(m) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", manifest.CompatibilityWarning)
        opened = jaxport.artifact.open(art)
    _assert_computes_goldens(opened, opened.goldens(), art.name)


def _assert_computes_goldens(runner: jaxport.artifact.Artifact,
                             goldens: list[jaxport.artifact.Golden], what: str) -> None:
    """`runner.call` on each golden's inputs equals its outputs within verify's tolerances."""
    assert goldens, f"{what}: no golden cases"
    comps: dict[str, verify.Comparison] = {}
    for golden in goldens:
        out = runner.call(golden.inputs)
        for name, want in golden.outputs.items():
            verify.compare(name, out[name], want, comps)
    failed = {n: (c.max_abs, c.tolerance) for n, c in comps.items() if not c.passed}
    assert not failed, f"{what}: {failed}"


@pytest.mark.parametrize("art", GOLDENS, ids=lambda p: p.name)
def test_reexport_today_has_the_same_contract(art: Path, tmp_path: Path) -> None:
    """Exporting the same model now must describe @main the same way (order, names, types),
    and compute the stored goldens (the old export's outputs) within verify's tolerances."""
    old = manifest.load(art)
    module_name, fn_name = old.source_function.split(":")
    mod = __import__(module_name)
    inputs = {i.name: jax.ShapeDtypeStruct(tuple(i.shape), manifest.numpy_dtype(i.dtype))
              for i in old.inputs}
    new = api.export(getattr(mod, fn_name), mod.init(jax.random.key(0)), inputs,
                     tmp_path / "new", quiet=True, goldens=0)

    def contract(m: manifest_pb2.Manifest) -> list[tuple]:
        prog = m.programs[0]
        return ([(a.index, a.role, a.name, a.key_path, a.leaf_index, tuple(a.shape),
                  a.dtype.numpy, a.sha256) for a in prog.arguments]
                + [(r.index, r.role, r.name, tuple(r.shape), r.dtype.numpy) for r in prog.results])

    assert contract(new) == contract(old)
    _assert_computes_goldens(jaxport.artifact.open(tmp_path / "new"),
                             jaxport.artifact.open(art).goldens(), f"re-export of {art.name}")
