"""Symbolic dimensions of a shape-polymorphic artifact (schema 2): which sizes are admissible.

The one rule every consumer applies before running the polymorphic program: the bridge's
request validation (`Model.prepare`), `Artifact.call`, and the exporter's bucket check. jax
checks the same constraints inside the program, but its words name internal variables
(`T_8`) and for a size above the maximum only say "Error refining shapes".

    sizes = dims.bind(manifest, {"tokens": (2, 16), "mask": (2, 16)})   # {"B": 2, "T": 16}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2

__all__ = ["DimensionError", "admissible", "bind", "rule"]


class DimensionError(ArtifactError):
    """A size outside a symbolic dimension's constraint; the message names the input, the axis,
    the dimension and the rule."""


def admissible(dim: manifest_pb2.Dimension, size: int) -> bool:
    """Whether `size` is one of `dim`'s sizes: min..max and a multiple of `multiple_of`."""
    return dim.min <= size <= dim.max and size % max(1, dim.multiple_of) == 0


def rule(dim: manifest_pb2.Dimension) -> str:
    """`T must be a multiple of 8 in 8..2048` / `B must be in 1..64`."""
    if dim.multiple_of > 1:
        return f"{dim.name} must be a multiple of {dim.multiple_of} in {dim.min}..{dim.max}"
    return f"{dim.name} must be in {dim.min}..{dim.max}"


def bind(manifest: manifest_pb2.Manifest, shapes: Mapping[str, Sequence[int]]
         ) -> dict[str, int]:
    """Each symbolic dimension's size in a request whose inputs have `shapes` (by input name;
    inputs not given are skipped). Raises DimensionError for a size outside its dimension's
    rule or two inputs that disagree on a dimension. Ranks are the caller's to check."""
    dims = {d.name: d for d in manifest.dimensions}
    sizes: dict[str, int] = {}
    seen: dict[str, str] = {}
    for spec in manifest.inputs:
        shape = shapes.get(spec.name)
        if shape is None or not spec.dim_names:
            continue
        for axis, (name, size) in enumerate(zip(spec.dim_names, shape, strict=False)):
            if not name:
                continue
            size = int(size)
            dim = dims.get(name)
            if dim is None:
                raise ArtifactError(f"input '{spec.name}' axis {axis} names dimension {name!r}, "
                                    "which manifest.dimensions does not declare")
            where = f"input '{spec.name}' dimension {axis} ({name}) is {size}"
            if name in sizes and sizes[name] != size:
                raise DimensionError(f"{where} but input '{seen[name]}' has {name} = "
                                     f"{sizes[name]}: inputs must agree on {name}")
            if not admissible(dim, size):
                raise DimensionError(f"{where}: {rule(dim)}")
            sizes[name] = size
            seen.setdefault(name, spec.name)
    return sizes
