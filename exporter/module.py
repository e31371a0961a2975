"""Checks on the lowered StableHLO module that a consumer relies on.

A C++ consumer compiles `model.mlirbc` as is, so the module must have fixed shapes (no `?`
dimension, no `shape_assertion`, which only JAX's own shape refinement resolves), must not
carry weights as constants (they belong under weights/), and its custom-call targets must
be known to the consumer's runtime (recorded in the manifest).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from jaxport.exporter.errors import ExportError
from jaxport.protocol import dtypes

__all__ = [
    "DEFAULT_MAX_CONSTANT_BYTES",
    "ModuleInfo",
    "inspect_module",
    "main_signature",
    "scalar_element_type",
]

# Dense (non-splat) constants larger than this are treated as baked-in weights. Small tables
# (a few KiB) are legitimate program constants; a 128x128 f32 matrix (64 KiB) is not.
DEFAULT_MAX_CONSTANT_BYTES = 16 << 10

_DYNAMIC_DIM = re.compile(r"tensor<(?:[^<>]*x)?\?")
_CONSTANT = re.compile(r"stablehlo\.constant\s+dense<(.{0,2})[^\n]*?>\s*:\s*tensor<([^<>]*)>")
_CUSTOM_CALL = re.compile(r"stablehlo\.custom_call\s+@([\w$.\-]+)")
_CUSTOM_CALL_GENERIC = re.compile(r'call_target_name\s*=\s*"([^"]+)"')
_MAIN = re.compile(r"func\.func public @main\((.*?)\)\s*->", re.S)
_ARG_TYPE = re.compile(r"%arg\d+:\s*(tensor<[^<>]*>|!stablehlo\.token)")
_SCALAR = re.compile(r"tensor<([a-z]+[0-9]*)>")


@dataclass
class ModuleInfo:
    """What the exporter records about a module."""

    custom_call_targets: list[str] = field(default_factory=list)
    main_argument_types: list[str] = field(default_factory=list)


def main_signature(text: str) -> list[str]:
    """The MLIR types of `@main`'s arguments, in order (e.g. `tensor<4x3xf32>`)."""
    m = _MAIN.search(text)
    if not m:
        raise ExportError("internal: the lowered module has no public @main function")
    return _ARG_TYPE.findall(m.group(1))


def scalar_element_type(mlir_type: str) -> str | None:
    """The element type of a 0-d tensor type (`i64` for `tensor<i64>`); None for others."""
    m = _SCALAR.fullmatch(mlir_type)
    return m.group(1) if m else None


def _tensor_bytes(type_body: str) -> tuple[int, str]:
    *dims, elem = type_body.split("x")
    dims = [d for d in dims if d != "?"]
    try:
        itemsize = dtypes.by_mlir(elem).itemsize
    except dtypes.UnsupportedDtypeError:
        itemsize = 4
    return math.prod(int(d) for d in dims) * itemsize, elem


def inspect_module(
    text: str, *, what: str, max_constant_bytes: int = DEFAULT_MAX_CONSTANT_BYTES,
    polymorphic: bool = False,
) -> ModuleInfo:
    """Check a module's text form; raises ExportError naming the problem and the fix.

    `polymorphic`: the shape-polymorphic program of an export with symbolic dimensions, whose
    `?` dimensions and `shape_assertion` calls are expected (only jax runs it)."""
    if not polymorphic and _DYNAMIC_DIM.search(text):
        raise ExportError(
            f"{what}: the lowered module has a dynamic ('?') dimension; jaxport exports fixed "
            "shapes only; give every input a concrete shape"
        )
    if "shape_assertion" in text and not polymorphic:
        raise ExportError(
            f"{what}: the lowered module contains shape_assertion (shape polymorphism); "
            "jaxport exports fixed shapes only"
        )
    dense = []
    for m in _CONSTANT.finditer(text):
        splat = m.group(1)[:1] not in ('"', "[")
        nbytes, _ = _tensor_bytes(m.group(2))
        if not splat:
            dense.append((nbytes, m.group(2)))
    over = [(n, t) for n, t in dense if n > max_constant_bytes]
    if over:
        nbytes, body = max(over)
        total = sum(n for n, _ in dense)
        raise ExportError(
            f"{what}: the module embeds a dense constant tensor<{body}> "
            f"({nbytes} bytes > {max_constant_bytes}, the --max-constant-bytes limit; "
            f"{len(over)} constant(s) over it); weights must not be baked into the program: "
            "pass them in the params pytree instead of closing over them; if they are real "
            f"program constants, raise the limit (--max-constant-bytes {max(nbytes, 1)} / "
            f"max_constant_bytes=), at a cost: all {total} bytes of dense constants are then "
            "copied into model.mlirbc, model.mlir and model.jaxexport (once per batch-size "
            "program), compiled into every consumer's executable, and not in weights/"
        )
    targets = sorted(set(_CUSTOM_CALL.findall(text)) | set(_CUSTOM_CALL_GENERIC.findall(text)))
    return ModuleInfo(custom_call_targets=targets, main_argument_types=main_signature(text))
