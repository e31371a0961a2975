"""The tolerance rule of `jaxport verify` (docs/artifact-format.md, Tolerances): per-dtype
`atol + rtol*|expected|`, a run's `--atol/--rtol` override, and for bfloat16/float16 outputs the
float32-reference rule (`compare`). Used by every execution check and by the exporter's own
comparisons (`--pad`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["EXACT", "LOW_PRECISION", "REFERENCE_ULPS", "TOLERANCES", "Comparison", "compare",
           "override", "set_override", "tolerance", "ulp"]

# (atol, rtol) per dtype: pass when |actual - expected| <= atol + rtol * |expected|.
# Floating point differs between compilers (XLA vs IREE codegen: different tanh/exp
# approximations and reduction orders), so the tolerance is a few units in the last place of
# each type. bf16 keeps only 8 significand bits (ulp 2^-7 relative = 0.78%), so a single
# rounding flip in an intermediate shows up as ~1% error: it gets 2 ulp relative plus an
# absolute floor for values near zero. Integers and booleans must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-10),
    "float32": (1e-5, 1e-4),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
}
EXACT = (0.0, 0.0)

# Low-precision floats: significand bits (ulp of x is 2^(floor(log2|x|) - bits)) and the
# smallest normal. Their outputs are judged against a float32 evaluation of the same program
# (`reference.f32_reference`), not only against JAX's own low-precision result: see `compare`.
LOW_PRECISION: dict[str, tuple[int, float]] = {"bfloat16": (7, 2.0 ** -126),
                                               "float16": (10, 2.0 ** -14)}
# The f32-reference rule: an element also passes when BOTH the consumer's value and JAX's
# golden are within REFERENCE_ULPS ulps of the output's scale (its largest |f32 value|) of the
# float32 evaluation: room for intermediates rounded to bf16 one op at a time (IREE) instead of
# once (XLA's excess precision), which cancellation magnifies. 8 ulps are 6.25% of the
# output's scale for bf16 and 0.8% for f16; a wrong weight moves results by the order of the
# values themselves. Requiring the golden to be close too keeps a wrong golden from widening
# the bound.
REFERENCE_ULPS = 8

# `--atol/--rtol` of this run: replaces the rules above for every float output when set.
_OVERRIDE: tuple[float, float] | None = None


def set_override(atol: float | None, rtol: float | None) -> None:
    """Use `|a - e| <= atol + rtol*|e|` for every float output of this process's checks."""
    global _OVERRIDE
    if atol is None and rtol is None:
        _OVERRIDE = None
        return
    _OVERRIDE = (atol or 0.0, rtol or 0.0)


def override() -> tuple[float, float] | None:
    """This process's `--atol/--rtol` (`set_override`), or None when the rules apply."""
    return _OVERRIDE


def tolerance(dtype: str) -> tuple[float, float]:
    """(atol, rtol) of `dtype` in this process: the override for a float, else the table."""
    if _OVERRIDE is not None and dtype in TOLERANCES:
        return _OVERRIDE
    return TOLERANCES.get(dtype, EXACT)


def _describe(atol: float, rtol: float) -> str:
    return "exact" if (atol, rtol) == EXACT else f"{atol:g}+{rtol:g}*|x|"


@dataclass
class Comparison:
    """Error of one output of one check, over all golden cases."""

    output: str
    dtype: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    passed: bool = True
    rule: str = ""

    @property
    def tolerance(self) -> str:
        if self.rule:
            return self.rule
        return _describe(*tolerance(self.dtype))


def ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """One unit in the last place of `dtype` at |x| (subnormals: the smallest normal's)."""
    bits, tiny = LOW_PRECISION[dtype]
    mag = np.maximum(np.abs(x.astype(np.float64)), tiny)
    return np.exp2(np.floor(np.log2(mag)) - bits)


def compare(
    name: str, actual: np.ndarray, expected: np.ndarray, into: dict[str, Comparison],
    reference: np.ndarray | None = None,
) -> None:
    """Fold the error of `actual` vs `expected` for output `name` into `into[name]`.

    Every element passes when `|actual - expected| <= atol + rtol*|expected|` (TOLERANCES, or
    this run's --atol/--rtol); where either is NaN or infinite, only the same value passes
    (NaN any NaN, an infinity the same infinity). A bfloat16/float16 output with a float32
    `reference` (the same program evaluated in float32, `f32_reference`) also passes an
    element when both the
    consumer's value and JAX's are within bf16/f16 rounding of that reference:
    `|actual - ref| <= 8 ulp(max|ref|)` and `|expected - ref| <= 8 ulp(max|ref|)` (max over the
    output): two compilers rounding differently both stay close to the f32 value, while a
    wrong result (a swapped weight) is far from it.
    """
    dtype = expected.dtype.name
    comp = into.setdefault(name, Comparison(name, dtype))
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        comp.passed = False
        comp.max_abs = math.inf
        return
    atol, rtol = tolerance(dtype)
    if not comp.rule:  # the worker's rule (with this run's --atol/--rtol) for the table
        comp.rule = _describe(atol, rtol)
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    # Where either side is not finite only the same value passes (NaN any NaN, an infinity
    # the same infinity): `rtol*|inf|` would otherwise admit anything against an infinity.
    special = ~(np.isfinite(a) & np.isfinite(e))
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    with np.errstate(invalid="ignore"):
        err = np.where(special, np.where(same, 0.0, np.inf), np.abs(a - e))
    if not err.size:
        return
    comp.max_abs = max(comp.max_abs, float(err.max()))
    comp.max_rel = max(comp.max_rel, float((err / np.maximum(np.abs(e), 1e-30)).max()))
    ok = np.where(special, same, err <= atol + rtol * np.abs(np.where(special, 0.0, e)))
    if reference is not None and dtype in LOW_PRECISION and _OVERRIDE is None \
            and reference.shape == expected.shape:
        comp.rule = f"{atol:g}+{rtol:g}*|x| or both within {REFERENCE_ULPS}ulp(scale) of f32"
        r = reference.astype(np.float64)
        finite = np.isfinite(r) & np.isfinite(e) & np.isfinite(a)
        scale = np.asarray(np.abs(r[finite]).max() if finite.any() else 0.0)
        bound = REFERENCE_ULPS * float(ulp(scale, dtype))
        ok = ok | (finite & (np.abs(a - r) <= bound) & (np.abs(e - r) <= bound))
    if not bool(np.all(ok)):
        comp.passed = False
