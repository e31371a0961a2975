"""How `make_cases.py --check` compares freshly computed cases with the committed ones
(numpy only, no JAX: tests/conformance/test_conformance_cases.py runs it on perturbed copies).

XLA's CPU code differs between processors (FMA contraction, vector width), so a float output
JAX computes here may differ by an ulp from the one committed on another machine. The rule
(docs/conformance-suite.md, "Portable expectations"):

- an expected FLOAT output (`expect.outputs[*]` and stream `responses[*].outputs[*]` with
  datatype FP16/BF16/FP32/FP64 and a data file) is compared under the case's own rtol/atol,
  the tolerance the runners judge servers with (`suite.compare_tensor`); a difference within it
  is reported as "moved" (case, output, elements, largest difference in value and in ulps) and
  is not a failure;
- everything else is compared byte for byte: case JSON, inputs (the suite chose them, nothing
  computed them), integer and BOOL outputs, exact ramps, classification strings (computed from
  outputs chosen exact in every dtype), checkify messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jaxport_conformance import suite

FLOATS = suite.FLOATS
#: Unsigned integer of each float width, for ulp distances.
_BITS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class FloatExpectation:
    """An expected float output stored in a data file: its case, name and tolerance."""

    case: str
    output: str
    datatype: str
    shape: tuple[int, ...]
    rtol: float
    atol: float


def float_expectations(cases: Path) -> dict[str, FloatExpectation]:
    """Data file (relative to `cases`) -> the float expectation it holds, for every case."""
    out: dict[str, FloatExpectation] = {}
    for path in sorted(Path(cases).glob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        expect = case.get("expect", {})
        specs = list(expect.get("outputs", []))
        for response in expect.get("responses", []):
            specs += response.get("outputs", [])
        for spec in specs:
            if spec.get("datatype") in FLOATS and "data" in spec:
                out[spec["data"]] = FloatExpectation(
                    case["name"], spec["name"], spec["datatype"], tuple(spec["shape"]),
                    float(spec["rtol"]), float(spec["atol"]))
    return out


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ulps between same-dtype float arrays (BF16 given as its <u2 patterns): the distance of
    their encodings along the ordered integers (sign-magnitude to two's complement; -0 and +0
    are 0 apart); NaN to NaN counts 0."""
    bits = _BITS[a.dtype.itemsize]
    sign = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ordered = []
    for x in (a, b):
        i = np.ascontiguousarray(x).view(bits).astype(np.int64)
        ordered.append(np.where(i & sign, -(i & (sign - 1)), i))
    va, vb = (suite.as_values(_datatype(x), list(x.shape), np.ascontiguousarray(x).tobytes())
              for x in (a, b))
    return np.where(np.isnan(va) & np.isnan(vb), 0, np.abs(ordered[0] - ordered[1]))


def _datatype(array: np.ndarray) -> str:
    return {"<u2": "BF16", "<f2": "FP16", "<f4": "FP32", "<f8": "FP64"}[array.dtype.str]


def compare_float(spec: FloatExpectation, fresh: np.ndarray, committed: np.ndarray
                  ) -> tuple[str | None, str | None]:
    """(moved, bad): a line saying how far a float expectation moved within its tolerance, or
    why it is outside it (or of another dtype/shape)."""
    where = f"case {spec.case} output {spec.output} ({spec.datatype})"
    if fresh.dtype != committed.dtype or fresh.shape != committed.shape:
        return None, (f"{where}: committed {committed.dtype}{list(committed.shape)}, JAX gives "
                      f"{fresh.dtype}{list(fresh.shape)}")
    if fresh.tobytes() == committed.tobytes():
        return None, None
    want = suite.as_values(spec.datatype, list(committed.shape), committed.tobytes())
    got = suite.as_values(spec.datatype, list(fresh.shape), fresh.tobytes())
    a, e = got.astype(np.float64), want.astype(np.float64)
    ok = np.isclose(a, e, rtol=spec.rtol, atol=spec.atol, equal_nan=True)
    with np.errstate(invalid="ignore"):
        diff = np.where(np.isnan(a) & np.isnan(e), 0.0, np.abs(a - e))
    ulps = ulp_distance(fresh, committed)
    changed = int((ulps != 0).sum())
    amount = (f"{changed} of {e.size} elements, largest |difference| {np.nanmax(diff):.3g} "
              f"({int(ulps.max())} ulp), tolerance rtol={spec.rtol} atol={spec.atol}")
    if not ok.all():
        k = int(np.argmin(ok.ravel()))
        return None, (f"{where}: outside the tolerance: {amount}; first at flat index {k}: "
                      f"JAX gives {a.ravel()[k]!r}, committed {e.ravel()[k]!r}")
    if changed == 0:
        return f"{where}: only NaN payloads or the sign of a zero differ", None
    return f"{where}: moved within its tolerance: {amount}", None


@dataclass
class Comparison:
    """What `compare_trees` found: expectations that moved within tolerance (not failures),
    and differences that fail the check."""

    moved: list[str]
    bad: list[str]
    #: data files that moved within tolerance (make_cases.py keeps the committed copy)
    moved_files: list[str]


def compare_trees(fresh: Path, committed: Path) -> Comparison:
    """Compare a freshly written case tree with the committed one under the module's rule."""
    fresh, committed = Path(fresh), Path(committed)
    result = Comparison([], [], [])
    floats = float_expectations(fresh)
    names = {p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file()}
    have = {p.relative_to(committed).as_posix() for p in committed.rglob("*") if p.is_file()}
    result.bad += [f"missing: {n} (JAX writes it, cases/ lacks it)" for n in sorted(names - have)]
    result.bad += [f"stale: {n} (cases/ has it, JAX no longer writes it)"
                   for n in sorted(have - names)]
    for name in sorted(names & have):
        new, old = fresh / name, committed / name
        if name in floats:
            moved, bad = compare_float(floats[name], _load(new), _load(old))
            if moved:
                result.moved.append(moved)
                result.moved_files.append(name)
            if bad:
                result.bad.append(bad)
        elif new.read_bytes() != old.read_bytes():
            result.bad.append(f"differs: {name} (compared byte for byte: "
                              f"{_why_exact(name)})")
    return result


def _load(path: Path) -> np.ndarray:
    return np.load(path, allow_pickle=False)


def _why_exact(name: str) -> str:
    if name.endswith(".json"):
        return "case description"
    if ".expected." in name:
        return "an exact output (integer, BOOL)"
    return "an input"


def report(result: Comparison) -> tuple[int, list[str]]:
    """Exit status and lines of `make_cases.py --check`: moved expectations are listed (not
    failures), any other difference fails."""
    lines: list[str] = []
    if result.moved:
        lines.append("make_cases.py --check: expectations that moved within their tolerance "
                     "(not failures: XLA's CPU code differs between processors):")
        lines += [f"  {m}" for m in result.moved]
    if result.bad:
        lines.append("make_cases.py --check: cases/ is stale:")
        lines += [f"  {b}" for b in result.bad]
        lines.append("Run .venv/bin/python tests/conformance/make_cases.py")
    return (1 if result.bad else 0), lines
