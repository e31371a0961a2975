"""Symbolic dimensions (`--input tokens:int32[B,T] --dim B=1..64 --dim 'T=8..2048:8'`).

A name in an input's shape is a symbolic dimension; the same name in several inputs is the same
dimension. `plan` validates the names, their ranges (`--dim`) and the bucket sizes
(`--buckets`), and gives:

- `Plan.symbolic_specs()`: every input as a `jax.ShapeDtypeStruct` with symbolic dimensions,
  all built in ONE jax symbolic scope (one `jax.export.symbolic_shape` call: jax refuses to mix
  scopes). A range is a jax constraint (`B <= 64`; jax itself assumes `>= 1`); "a multiple of
  m" cannot be one, so such a dimension is exported as the expression `m*T_m` with `T_m` in
  `min/m..max/m` (jax then refuses T = 12 with "Division had remainder 4").
- `Plan.concrete_specs(sizes)`: the same inputs at fixed sizes (bucket programs, goldens);
- `Plan.buckets`: every combination of the bucket sizes, one fixed-shape program each;
- `Plan.golden_sizes()`: the smallest, a middle and the largest admissible size of every
  dimension (one dimension at a time), where the polymorphic program's goldens are computed.

The one rule of what a size may be (`admissible`, `rule`) lives in jaxport.artifact.dims, which
the bridge and `jaxport.artifact` consumers use as well.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jaxport.artifact import dims as dims_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError
from jaxport.protocol import dtypes

__all__ = ["Dim", "Plan", "parse_dim_range", "plan"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*(?::\s*(\d+)\s*)?$")
DIM_SYNTAX = "NAME=MIN..MAX or NAME=MIN..MAX:MULTIPLE, e.g. --dim T=8..2048:8"


def parse_dim_range(text: str) -> tuple[int, int, int]:
    """`8..2048` -> (8, 2048, 1); `8..2048:8` -> (8, 2048, 8). ValueError when malformed."""
    m = _RANGE.match(text)
    if not m:
        raise ValueError(f"expected MIN..MAX or MIN..MAX:MULTIPLE, got {text!r}")
    lo, hi, mult = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
    return lo, hi, mult


@dataclass(frozen=True)
class Dim:
    """One symbolic dimension: sizes min..max that are multiples of `multiple_of`."""

    name: str
    min: int
    max: int
    multiple_of: int = 1

    @property
    def var(self) -> str:
        """The jax dimension variable: the name, or `T_8` for a multiple of 8."""
        return self.name if self.multiple_of == 1 else f"{self.name}_{self.multiple_of}"

    @property
    def expression(self) -> str:
        """The dimension as jax exports it: `T`, or `8*T_8`."""
        return self.name if self.multiple_of == 1 else f"{self.multiple_of}*{self.var}"

    def constraints(self) -> list[str]:
        lo, hi = self.min // self.multiple_of, self.max // self.multiple_of
        return ([f"{self.var} >= {lo}"] if lo > 1 else []) + [f"{self.var} <= {hi}"]

    def message(self) -> manifest_pb2.Dimension:
        return manifest_pb2.Dimension(name=self.name, min=self.min, max=self.max,
                                      multiple_of=self.multiple_of, expression=self.expression)

    def middle(self) -> int:
        m = self.multiple_of
        return max(self.min, ((self.min + self.max) // 2) // m * m)


def _dim(name: str, value: Any) -> Dim:
    flag = f"--dim {name}"
    if isinstance(value, str):
        try:
            lo, hi, mult = parse_dim_range(value)
        except ValueError:
            raise ExportError(f"{flag}={value}: expected {DIM_SYNTAX}") from None
    elif isinstance(value, Sequence) and len(value) in (2, 3) and all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value):
        lo, hi, mult = int(value[0]), int(value[1]), int(value[2]) if len(value) == 3 else 1
    else:
        raise ExportError(f"dims[{name!r}] = {value!r}: expected 'MIN..MAX[:MULTIPLE]' or "
                          "(min, max[, multiple])")
    spelled = f"{flag}={lo}..{hi}" + (f":{mult}" if mult != 1 else "")
    if mult < 1 or lo < 1:
        raise ExportError(f"{spelled}: the minimum and the multiple must be >= 1")
    if lo > hi:
        raise ExportError(f"{spelled}: the minimum {lo} is larger than the maximum {hi}")
    if lo % mult or hi % mult:
        fixed = f"{flag}={max(mult, lo // mult * mult)}..{hi // mult * mult}:{mult}"
        raise ExportError(f"{spelled}: the minimum and the maximum must be multiples of {mult} "
                          f"(e.g. {fixed})")
    return Dim(name, lo, hi, mult)


@dataclass
class Plan:
    """The symbolic dimensions of an export, its inputs' named shapes and its buckets."""

    dims: dict[str, Dim]
    # input name -> (shape: an int or a dimension name per axis, numpy dtype)
    shapes: dict[str, tuple[tuple[int | str, ...], np.dtype]]
    buckets: list[dict[str, int]]
    # dimension -> the bool or integer input whose False / 0 entries mark padding along it
    # (`--pad T=mask`; Hugging Face attention masks are int32)
    padding: dict[str, str] = field(default_factory=dict)

    def symbolic_specs(self) -> dict[str, jax.ShapeDtypeStruct]:
        """Every input with symbolic dimensions, all in one jax symbolic scope."""
        from jax import export as jax_export

        dims = list(self.dims.values())
        constraints = [c for d in dims for c in d.constraints()]
        variables = jax_export.symbolic_shape(", ".join(d.var for d in dims),
                                              constraints=constraints)
        by_name = {d.name: (v if d.multiple_of == 1 else d.multiple_of * v)
                   for d, v in zip(dims, variables, strict=True)}
        return {n: jax.ShapeDtypeStruct(tuple(by_name[a] if isinstance(a, str) else a
                                              for a in shape), dt)
                for n, (shape, dt) in self.shapes.items()}

    def concrete_specs(self, sizes: Mapping[str, int]) -> dict[str, jax.ShapeDtypeStruct]:
        return {n: jax.ShapeDtypeStruct(self.concrete_shape(n, sizes), dt)
                for n, (_, dt) in self.shapes.items()}

    def concrete_shape(self, name: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(sizes[a] if isinstance(a, str) else a for a in self.shapes[name][0])

    def golden_sizes(self) -> list[tuple[str, dict[str, int]]]:
        """(label, sizes): every dimension at its minimum (`min`), then each dimension at a
        middle size and at its maximum with the others at their minimum (`T_mid`, `T_max`):
        each dimension's extremes are run, never all maxima at once (a [B_max, T_max, H]
        golden of a real model would be gigabytes)."""
        smallest = {d.name: d.min for d in self.dims.values()}
        out: list[tuple[str, dict[str, int]]] = [("min", smallest)]
        for d in self.dims.values():
            for label, size in (("mid", d.middle()), ("max", d.max)):
                sizes = {**smallest, d.name: size}
                if all(sizes != s for _, s in out):
                    out.append((f"{d.name}_{label}", sizes))
        return out

    def dim_names(self, shape: Sequence[Any], what: str) -> list[str]:
        """Per axis of a lowered shape: the dimension's name, or "" for a fixed axis. An axis
        that is an expression of no single dimension (`T - 1`, `B*T`) is refused."""
        by_expr = {d.expression: d.name for d in self.dims.values()}
        names = []
        for axis, d in enumerate(shape):
            if isinstance(d, int | np.integer):
                names.append("")
                continue
            if str(d) not in by_expr:
                raise ExportError(
                    f"{what} dimension {axis} is {d}, an expression of the symbolic "
                    f"dimensions rather than one of them ({', '.join(by_expr.values())}): a "
                    "consumer could not tell its size from the request; return arrays whose "
                    "axes are the input dimensions themselves")
            names.append(by_expr[str(d)])
        return names


def plan(
    inputs: Mapping[str, Any],
    dims: Mapping[str, Any],
    buckets: Mapping[str, Sequence[int]] | None = None,
    padding: Mapping[str, str] | None = None,
) -> Plan:
    """Validate symbolic inputs, their `dims` ranges and `buckets`; ExportError names the
    input, dimension or flag at fault.

    `inputs` maps each name to `(shape, dtype)` (or anything with `.shape` and `.dtype`) whose
    shape holds ints and dimension names."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise ExportError("inputs must be a non-empty mapping of name -> (shape, dtype)")
    shapes: dict[str, tuple[tuple[int | str, ...], np.dtype]] = {}
    used: dict[str, str] = {}
    for in_name, spec in inputs.items():
        if isinstance(spec, tuple) and len(spec) == 2:
            shape, dtype = spec
        else:
            shape, dtype = getattr(spec, "shape", None), getattr(spec, "dtype", None)
        if shape is None or dtype is None:
            raise ExportError(f"input {in_name!r}: expected (shape, dtype), got {spec!r}")
        axes: list[int | str] = []
        for axis in shape:
            if isinstance(axis, str):
                if not _NAME.fullmatch(axis):
                    raise ExportError(
                        f"--input {in_name}: dimension {axis!r} is not a name: a symbolic "
                        "dimension is one name (T) that some --dim declares; jax solves only "
                        "dimensions an input has alone, not forms such as a+b or 2*T")
                used.setdefault(axis, in_name)
                axes.append(axis)
            elif isinstance(axis, int | np.integer) and not isinstance(axis, bool) and axis >= 0:
                axes.append(int(axis))
            else:
                raise ExportError(f"--input {in_name}: bad dimension {axis!r} in {tuple(shape)}")
        try:
            row = dtypes.by_numpy(dtype)
        except (dtypes.UnsupportedDtypeError, TypeError) as exc:
            raise ExportError(f"input {in_name!r}: {exc}") from None
        shapes[in_name] = (tuple(axes), np.dtype(row.numpy))
    for name, in_name in used.items():
        if name not in dims:
            raise ExportError(f"--input {in_name}: dimension {name!r} has no --dim; declare its "
                              f"sizes, e.g. --dim {name}=1..64 (dims={{{name!r}: '1..64'}})")
    for name in dims:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ExportError(f"--dim {name!r}: a dimension name is letters, digits and _")
        if name not in used:
            raise ExportError(f"--dim {name}: no --input has a dimension named {name!r}")
    declared = {name: _dim(name, value) for name, value in dims.items()}
    ordered = {name: declared[name] for name in used}  # in order of first use
    combos = _buckets(ordered, buckets or {})
    pads = dict(padding or {})
    for name, mask in pads.items():
        flag = f"--pad {name}={mask}"
        if name not in ordered:
            raise ExportError(f"{flag}: {name!r} is not a symbolic dimension (those are "
                              f"{', '.join(ordered)})")
        if mask not in shapes:
            raise ExportError(f"{flag}: no input named {mask!r} (inputs: {', '.join(shapes)})")
        mask_shape, mask_dtype = shapes[mask]
        shape_text = f"{mask}:{{}}[{','.join(map(str, mask_shape))}]"
        if np.dtype(mask_dtype).kind not in "biu":
            raise ExportError(f"{flag}: the mask must be a bool or integer input (0 / False = "
                              f"padding; a Hugging Face attention_mask is int32); "
                              f"{shape_text.format(np.dtype(mask_dtype).name)} is neither: "
                              f"declare it {shape_text.format('int32')} or "
                              f"{shape_text.format('bool')}")
        if name not in mask_shape:
            raise ExportError(f"{flag}: the mask {shape_text.format(np.dtype(mask_dtype).name)} "
                              f"has no {name} axis; name the dimension its padded axis has")
        if not combos:
            raise ExportError(f"{flag} without --buckets: padding goes up to a bucket size")
    return Plan(ordered, shapes, combos, pads)


def _buckets(dims: Mapping[str, Dim], buckets: Mapping[str, Sequence[int]]
             ) -> list[dict[str, int]]:
    if not buckets:
        return []
    sizes: dict[str, list[int]] = {}
    for name, values in buckets.items():
        if name not in dims:
            raise ExportError(f"--buckets {name}=...: {name!r} is not a symbolic dimension "
                              f"(those are {', '.join(dims)})")
        values = list(values)
        if not values:
            raise ExportError(f"--buckets {name}=: no sizes")
        d = dims[name]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise ExportError(f"--buckets {name}={v!r}: not an integer")
            if not dims_mod.admissible(d.message(), int(v)):
                raise ExportError(f"--buckets {name}={v}: {dims_mod.rule(d.message())} "
                                  f"(--dim {name})")
        if len(set(values)) != len(values):
            raise ExportError(f"--buckets {name}: a size is listed twice in {values}")
        sizes[name] = sorted(int(v) for v in values)
    missing = [n for n in dims if n not in sizes]
    if missing:
        raise ExportError(
            f"--buckets: dimension {missing[0]} has no bucket sizes; a bucket program fixes "
            f"every dimension: add --buckets {missing[0]}=... (for B, --batch-sizes works too)")
    names = list(dims)
    return [dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(sizes[n] for n in names))]
