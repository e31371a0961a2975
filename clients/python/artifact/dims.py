"""Symbolic dimensions of a shape-polymorphic artifact (schema 2): which sizes are admissible.

The one rule every consumer applies before running the polymorphic program: the bridge's
request validation (`Model.prepare`), `Artifact.call`, and the exporter's bucket check. jax
checks the same constraints inside the program, but its words name internal variables
(`T_8`) and for a size above the maximum only say "Error refining shapes".

    sizes = dims.bind(manifest, {"tokens": (2, 16), "mask": (2, 16)})   # {"B": 2, "T": 16}

It also says which outputs have rows (`row_outputs`): the one rule of where a classification
(top-k) ranks each batch row apart, applied by the bridge's workers (`Model.finish`) and the
exporter's `--labels` check; the native front's Go copy is `classRows` (bridge/front).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2

__all__ = ["DimensionError", "admissible", "batch_dimension", "bind", "row_outputs", "rule"]


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


def batch_dimension(manifest: manifest_pb2.Manifest) -> str | None:
    """The symbolic dimension that is the batch axis: dimension 0 of every input and every
    output (the convention `--batch-sizes` uses for its batched tensors), e.g. `B` of
    `--dim B=1..8`; None when no symbolic dimension is (or the model has no inputs/outputs)."""
    specs = [*manifest.inputs, *manifest.outputs]
    if not manifest.dimensions or not specs:
        return None
    first = {s.dim_names[0] if s.dim_names else "" for s in specs}
    name = first.pop() if len(first) == 1 else ""
    return name or None


def row_outputs(manifest: manifest_pb2.Manifest) -> frozenset[str]:
    """The outputs whose dimension 0 is the batch, so that top-k classification ranks each row
    apart: the batched outputs of a `--batch-sizes` export, every output when a symbolic
    dimension is the batch axis (`batch_dimension`), else none (top-k then ranks the whole
    tensor, as Triton does for max_batch_size 0)."""
    if manifest.HasField("batching"):
        return frozenset(manifest.batching.batched_outputs)
    if batch_dimension(manifest) is not None:
        return frozenset(o.name for o in manifest.outputs)
    return frozenset()
