"""The one manifest argument binder: which value goes where when a program runs, purely from
the manifest.

A program is called in one of two shapes, and both are bound here:

- `@main`'s flat argument list (`Program.arguments`, what PJRT, IREE and the C++ runtime see):
  `main_arguments` puts a parameter by its manifest name, an input by its name, and the
  platform index (`platform`'s position in `Manifest.platforms`, of the argument's dtype) in
  each slot; `input_slots` says which slot takes which `Manifest.inputs` entry, for a caller
  that fills them per request;
- the leaves of the exported pytree `(params, *inputs)` (what `jax.export.Exported.call`
  takes): `leaves` places parameters and inputs at their `leaf_index`, inputs jax dropped at
  their `DroppedLeaf.leaf_index`, and zeros for parameters jax dropped; `input_leaves` gives
  each input's leaf.

Users: `reader` (`Artifact.call`, `call_arguments`, `parameter_tree`), the bridge's loading
(`--engine exported` and `--engine pjrt`) and `jaxport verify` (pjrt, iree, the f32 reference).
Numpy only: importing it does not import jax.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2

__all__ = ["input_leaves", "input_slots", "leaves", "main_arguments", "parameter_arguments",
           "platform_index"]

_ARG = manifest_pb2.ArgumentRole


def parameter_arguments(program: manifest_pb2.Program) -> list[manifest_pb2.Argument]:
    """The parameter arguments of `program`, in `@main` order (the stored weights)."""
    return [a for a in program.arguments if a.role == _ARG.ARGUMENT_ROLE_PARAMETER]


def platform_index(manifest: manifest_pb2.Manifest, arg: manifest_pb2.Argument,
                   platform: str) -> np.ndarray:
    """The platform-index argument's value on `platform`: its position in the manifest's
    platforms, as a scalar of the argument's dtype (int32, or int64 when lowered under
    jax_enable_x64)."""
    return np.asarray(list(manifest.platforms).index(platform),
                      manifest_mod.numpy_dtype(arg.dtype))


def main_arguments[T](
    manifest: manifest_pb2.Manifest, program: manifest_pb2.Program,
    parameters: Mapping[str, T], inputs: Mapping[str, T] | None, platform: str,
) -> list[T | np.ndarray | None]:
    """Every `@main` argument of `program`, in flat order: a parameter from `parameters` and an
    input from `inputs`, each by its manifest name (`inputs=None`: the input slots are None,
    for the caller to fill per call, see `input_slots`), the platform index as a numpy scalar
    (`platform_index`). ArtifactError for a token argument (ordered effects): nothing in the
    manifest can stand for one."""
    values: list[T | np.ndarray | None] = []
    for arg in program.arguments:
        if arg.role == _ARG.ARGUMENT_ROLE_PARAMETER:
            values.append(parameters[arg.name])
        elif arg.role == _ARG.ARGUMENT_ROLE_INPUT:
            values.append(None if inputs is None else inputs[arg.name])
        elif arg.role == _ARG.ARGUMENT_ROLE_PLATFORM_INDEX:
            values.append(platform_index(manifest, arg, platform))
        else:
            raise ArtifactError(
                f"argument {arg.index} ({arg.name!r}) has role {_ARG.Name(arg.role)}, which "
                "cannot be bound from the manifest (tokens of ordered effects are not supported)")
    return values


def input_slots(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                ) -> list[tuple[int, int]]:
    """`(slot, position)` of every input argument of `program`, in `@main` order: its index in
    `main_arguments` and its position in `Manifest.inputs`. ArtifactError for an input
    argument `Manifest.inputs` does not list."""
    position = {spec.name: i for i, spec in enumerate(manifest.inputs)}
    slots = []
    for slot, arg in enumerate(program.arguments):
        if arg.role != _ARG.ARGUMENT_ROLE_INPUT:
            continue
        if arg.name not in position:
            raise ArtifactError(f"argument {arg.index} is input {arg.name!r}, which "
                                "Manifest.inputs does not list")
        slots.append((slot, position[arg.name]))
    return slots


def _input_leaf_by_name(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                        ) -> dict[str, int]:
    """Input name -> its leaf in `(params, *inputs)`: an argument's, or a dropped input's."""
    by_name = {a.name: a.leaf_index for a in program.arguments
               if a.role == _ARG.ARGUMENT_ROLE_INPUT}
    by_name.update({d.name: d.leaf_index for d in manifest.dropped_leaves if d.kind == "input"})
    return by_name


def input_leaves(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program) -> list[int]:
    """The leaf of each `Manifest.inputs` entry (in that order) in `(params, *inputs)`: its
    argument's `leaf_index`, or its dropped leaf's when jax dropped it. ArtifactError for an
    input that is neither."""
    by_name = _input_leaf_by_name(manifest, program)
    missing = [s.name for s in manifest.inputs if s.name not in by_name]
    if missing:
        raise ArtifactError(f"input '{missing[0]}' is neither an argument nor dropped")
    return [by_name[s.name] for s in manifest.inputs]


def leaves(
    manifest: manifest_pb2.Manifest, program: manifest_pb2.Program, in_avals: Sequence[Any],
    parameters: Mapping[str, Any], inputs: Mapping[str, Any] | None,
) -> list[Any]:
    """Every leaf of `(params, *inputs)` in flatten order (`in_avals`: the exported program's,
    one per leaf): the parameters by manifest name, the inputs by name as given (`inputs=None`:
    None leaves; a dropped input too, since a symbolic shape has no zeros to make), and zeros
    of the leaf's shape and dtype for a parameter jax dropped (any value of the right type)."""
    by_leaf: dict[int, Any] = {a.leaf_index: parameters[a.name]
                              for a in parameter_arguments(program)}
    for name, leaf in _input_leaf_by_name(manifest, program).items():
        by_leaf[leaf] = None if inputs is None else inputs[name]
    return [by_leaf[i] if i in by_leaf else np.zeros(aval.shape, aval.dtype)
            for i, aval in enumerate(in_avals)]

