"""Sharded export: `--mesh data=2,model=2` and `--shard KEY=SPEC` as a plan of NamedShardings.

A `Plan` is built once per export (`plan`): the mesh (validated, over the first N devices of
this process, `jaxport.artifact.sharding.require_devices` raising the CPU device count when jax
has not started yet) and the PartitionSpec of every parameter leaf and input. Output specs are
resolved per program once its outputs are named (`Plan.out_shardings`). Unnamed leaves are
replicated. Every split dimension must divide evenly (`Plan.check_shapes`): jax would refuse it
with a message about pjit arguments, and the weights' chunks must be exactly the shards.

`--shard` keys: an input name; else a parameter name or a glob over the manifest's parameter
names (`fnmatch`: `params.w1`, `params.layers.*.kernel`; the first key that matches a parameter
decides its spec); else an output name (a key that is none of these is an error). SPEC is one
entry per array axis, comma-separated: a mesh axis name, `None` (or empty) for an unsplit axis,
`a+b` for several mesh axes; axes past the last entry are unsplit, and an empty SPEC replicates
the array.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError, UsageError
from jaxport.exporter.trace import ExportFunction, LeafInfo

__all__ = ["Plan", "parse_mesh", "plan", "provide_devices"]

_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_mesh(text: str) -> list[tuple[str, int]]:
    """`data=2,model=2` -> [("data", 2), ("model", 2)]; a usage error naming the flag."""
    out: list[tuple[str, int]] = []
    for part in text.split(","):
        name, _, size = part.strip().partition("=")
        if not _AXIS_NAME.fullmatch(name) or not size.strip().isdigit():
            raise UsageError(f"--mesh {text!r}: expected NAME=SIZE[,NAME=SIZE...], e.g. "
                             "--mesh data=2,model=2")
        out.append((name, int(size)))
    return out


def provide_devices(mesh: Sequence[tuple[str, int]]) -> None:
    """Make this process provide the mesh's devices before jax starts its backend (the CLI
    calls it before loading params); an impossible count is the same one line as `plan`'s."""
    n = math.prod(s for _, s in mesh)
    if n > 1:
        _devices(n, ",".join(f"{a}={s}" for a, s in mesh))


def _devices(n: int, text: str) -> list[jax.Device]:
    try:
        return sharding_io.require_devices(
            n, f"--mesh {text}",
            how=f"run jaxport export (it sets the count itself) or set XLA_FLAGS="
                f"--xla_force_host_platform_device_count={n} before jax starts")
    except sharding_io.DeviceCountError as exc:
        raise ExportError(str(exc)) from None


def _check_mesh(mesh: Mapping[str, int] | Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    axes = list(mesh.items()) if isinstance(mesh, Mapping) else [tuple(a) for a in mesh]
    text = ",".join(f"{n}={s}" for n, s in axes)
    if not axes:
        raise ExportError("mesh (--mesh) is empty; give axes, e.g. --mesh data=2")
    names = [n for n, _ in axes]
    for name, size in axes:
        if not isinstance(name, str) or not _AXIS_NAME.fullmatch(name):
            raise ExportError(f"--mesh {text}: axis name {name!r} must be an identifier")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ExportError(f"--mesh {text}: axis {name} has size {size!r}; sizes are "
                              "integers >= 1")
    if len(set(names)) != len(names):
        raise ExportError(f"--mesh {text}: an axis is named twice")
    if math.prod(s for _, s in axes) < 2:
        raise ExportError(f"--mesh {text} is 1 device: a single-device program needs no mesh; "
                          "omit --mesh and --shard")
    return [(str(n), int(s)) for n, s in axes]


def _spec(key: str, value: Any, axes: Mapping[str, int]) -> PartitionSpec:
    """A --shard value (text `data,None`, a PartitionSpec or a sequence) as a PartitionSpec
    whose axis names all exist, each used once."""
    flag = f"--shard {key}={value if isinstance(value, str) else tuple(value)}"
    if isinstance(value, str):
        entries: list[Any] = []
        if value.strip():
            for part in value.split(","):
                part = part.strip()
                names = [n.strip() for n in part.split("+")] if part and part != "None" else []
                entries.append(None if not names else names[0] if len(names) == 1
                               else tuple(names))
        spec = PartitionSpec(*entries)
    elif isinstance(value, PartitionSpec | tuple | list):
        spec = PartitionSpec(*value)
    else:
        raise ExportError(f"{flag}: expected a PartitionSpec or text like 'data,None'")
    used: list[str] = []
    for entry in spec:
        for name in ((entry,) if isinstance(entry, str) else (entry or ())):
            if name not in axes:
                raise ExportError(f"{flag}: mesh axis {name!r} is not in the mesh (--mesh "
                                  f"axes: {', '.join(axes)})")
            if name in used:
                raise ExportError(f"{flag}: mesh axis {name!r} is used twice")
            used.append(name)
    return spec


@dataclass
class Plan:
    """The mesh and the PartitionSpec of every leaf of one sharded export."""

    mesh: jax.sharding.Mesh
    message: manifest_pb2.Mesh
    params: dict[int, tuple[str, PartitionSpec]]  # parameter leaf index -> (--shard key, spec)
    inputs: dict[str, tuple[str, PartitionSpec]]  # input name -> (--shard key, spec)
    outputs: dict[str, tuple[str, PartitionSpec]] = field(default_factory=dict)
    unmatched: dict[str, PartitionSpec] = field(default_factory=dict)  # output keys, maybe

    @property
    def nr_devices(self) -> int:
        return int(self.mesh.devices.size)

    def _named(self, spec: PartitionSpec | None) -> NamedSharding:
        return NamedSharding(self.mesh, spec if spec is not None else PartitionSpec())

    def in_shardings(self, params: Any, inputs: Mapping[str, Any]) -> tuple[Any, ...]:
        """jit's in_shardings for `(params, *inputs)`: a tree of NamedShardings."""
        leaves, tree = jax.tree.flatten(params)
        p = jax.tree.unflatten(tree, [self._named(self.params.get(i, ("", None))[1])
                                      for i in range(len(leaves))])
        return (p, *(self._named(self.inputs.get(n, ("", None))[1]) for n in inputs))

    def out_shardings(self, result_names: Sequence[str], output_names: Sequence[str],
                      inputs: Sequence[str], params: Sequence[str]) -> tuple[NamedSharding, ...]:
        """jit's out_shardings for the flat results (check results replicated); the first
        time, --shard keys that named no input or parameter must name an output."""
        outputs = set(output_names)
        for key, spec in self.unmatched.items():
            if key not in outputs:
                raise ExportError(
                    f"--shard {key}: no input, output or parameter is named {key!r} (inputs: "
                    f"{', '.join(inputs)}; outputs: {', '.join(output_names)}; parameters: "
                    f"{', '.join(params) or 'none'})")
            self.outputs[key] = (key, spec)
        self.unmatched = {}
        return tuple(self._named(self.outputs.get(n, ("", None))[1]) for n in result_names)

    def jit_shardings(self, export_fn: ExportFunction, params: Any,
                      inputs: Mapping[str, jax.ShapeDtypeStruct], infos: Sequence[LeafInfo],
                      batch_size: int) -> tuple[Any, tuple[NamedSharding, ...]]:
        """jit's `(in_shardings, out_shardings)` for one program, every split dimension
        checked to divide evenly (outputs at their traced shapes)."""
        where = f" at batch size {batch_size}" if batch_size else ""
        self.check_shapes("input", {n: tuple(s.shape) for n, s in inputs.items()}, self.inputs,
                          where)
        out = self.out_shardings(export_fn.result_names, export_fn.output_names, list(inputs),
                                 [i.name for i in infos if i.kind == "parameter"])
        if self.outputs:
            spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
            avals = jax.eval_shape(export_fn.fn, spec, *inputs.values())
            shapes = {n: tuple(a.shape) for n, a in zip(export_fn.result_names, avals,
                                                          strict=True)}
            self.check_shapes("output", shapes, self.outputs, where)
        return self.in_shardings(params, inputs), out

    def check_shapes(self, what: str, shapes: Mapping[str, tuple[int, ...]],
                     specs: Mapping[str, tuple[str, PartitionSpec]], where: str = "") -> None:
        """Every split dimension of these arrays divides by its mesh axes' sizes."""
        _check_divisible(dict(self.mesh.shape), what, shapes, specs, where)

    def shard_shapes(self, infos: Sequence[LeafInfo]) -> dict[int, list[int]]:
        """Parameter leaf index -> the shape of one device's shard (split parameters only):
        the weights' zarr3 chunk shape along the split axes."""
        out = {}
        for info in infos:
            if info.kind == "parameter" and info.leaf_index in self.params:
                spec = sharding_io.spec_strings(self.params[info.leaf_index][1], len(info.shape))
                if any(spec):
                    out[info.leaf_index] = sharding_io.shard_shape(info.shape, spec,
                                                                   self.message)
        return out


def _check_divisible(sizes: Mapping[str, int], what: str, shapes: Mapping[str, tuple[int, ...]],
                     specs: Mapping[str, tuple[str, PartitionSpec]], where: str = "") -> None:
    """Every split dimension of these arrays divides by its mesh axes' sizes (one line naming
    the --shard, the array, the dimension and the mesh axis otherwise)."""
    for name, (key, spec) in specs.items():
        shape = shapes[name]
        flag = f"--shard {key}"
        if len(spec) > len(shape):
            raise ExportError(f"{flag}: {len(spec)} entries for {what} {name!r} of rank "
                              f"{len(shape)} (shape {list(shape)}{where})")
        for axis, entry in enumerate(spec):
            names = (entry,) if isinstance(entry, str) else tuple(entry or ())
            parts = math.prod(sizes[n] for n in names)
            if shape[axis] % parts:
                raise ExportError(
                    f"{flag}: dimension {axis} of {what} {name!r} is {shape[axis]} (shape "
                    f"{list(shape)}{where}), not divisible by mesh axis "
                    f"{'+'.join(names)} ({parts} devices)")


def plan(
    mesh: Mapping[str, int] | Sequence[tuple[str, int]],
    shardings: Mapping[str, Any] | None,
    infos: Sequence[LeafInfo],
) -> Plan:
    """Validate the mesh and the --shard keys; the mesh over this process's devices."""
    axes = _check_mesh(mesh)
    sizes = dict(axes)
    specs = {k: _spec(k, v, sizes) for k, v in (shardings or {}).items()}
    inputs = [i.name for i in infos if i.kind == "input"]
    params = [i for i in infos if i.kind == "parameter"]
    by_input: dict[str, tuple[str, PartitionSpec]] = {}
    by_param: dict[int, tuple[str, PartitionSpec]] = {}
    unmatched: dict[str, PartitionSpec] = {}
    for key, spec in specs.items():
        if key in inputs:
            by_input.setdefault(key, (key, spec))
            continue
        hits = [p for p in params if fnmatch.fnmatchcase(p.name, key)]
        for p in hits:
            by_param.setdefault(p.leaf_index, (key, spec))
        if not hits:
            unmatched[key] = spec  # an output's name, or nothing (checked once outputs exist)
    text = ",".join(f"{n}={s}" for n, s in axes)
    n = math.prod(sizes.values())
    _check_divisible(sizes, "parameter", {p.name: p.shape for p in params},
                     {p.name: by_param[p.leaf_index] for p in params if p.leaf_index in by_param})
    devices = _devices(n, text)
    message = manifest_pb2.Mesh(axes=[manifest_pb2.MeshAxis(name=a, size=s) for a, s in axes])
    return Plan(sharding_io.jax_mesh(message, devices), message, by_param, by_input,
                unmatched=unmatched)
