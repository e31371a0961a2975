"""Sharded programs: the device mesh and per-array layouts a schema-2 manifest records, and the
devices a process needs to run them.

A sharded artifact (`jaxport export --mesh data=2,model=2 --shard ...`) has `nr_devices` > 1,
`Manifest.mesh` (axes in order) and on every argument and result a `Sharding` whose `spec` is
one string per array axis: `""` not split, `"data"` split over mesh axis `data`, `"data+model"`
split over both (a PartitionSpec entry `("data", "model")`).

The exporter, `jaxport verify`, the reader (`Artifact.call`) and the bridge all use this one
module to turn those fields into jax objects (`jax_mesh`, `named_sharding`) and to get enough
devices (`require_devices`). Importing it does not import jax; its jax functions do.

CPU devices: XLA's CPU client has one device unless told otherwise, and the count is fixed
when jax initialises its backends. `require_devices(n)` raises it to `n` (jax's
`jax_num_cpu_devices`, which takes precedence over `XLA_FLAGS=
--xla_force_host_platform_device_count=N`) while that is still possible, and otherwise raises
`DeviceCountError`, one line saying how to start the process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2

if TYPE_CHECKING:
    import jax

__all__ = [
    "DeviceCountError",
    "describe_mesh",
    "jax_mesh",
    "named_sharding",
    "partition_spec",
    "require_devices",
    "shard_shape",
    "spec_strings",
]


class DeviceCountError(ArtifactError):
    """This process cannot provide the devices a sharded program needs (one line: how to)."""


def describe_mesh(mesh: manifest_pb2.Mesh) -> str:
    """`data=2,model=2`: the mesh as `--mesh` writes it."""
    return ",".join(f"{a.name}={a.size}" for a in mesh.axes)


def _backends_initialized() -> bool:
    from jax._src import xla_bridge  # no public query; the config validator uses the same

    return bool(xla_bridge.backends_are_initialized())


def require_devices(n: int, what: str, how: str = "") -> list[jax.Device]:
    """The first `n` devices of jax's default backend, raising the CPU device count to `n`
    when jax has not initialised its backends yet. DeviceCountError (one line naming `what`,
    the devices present and `how` to get more, default: the XLA flag) otherwise."""
    import jax

    if n > 1 and not _backends_initialized():
        current = jax.config.jax_num_cpu_devices
        if current < n:
            jax.config.update("jax_num_cpu_devices", n)
    devices = jax.devices()
    if len(devices) >= n:
        return list(devices[:n])
    platform = devices[0].platform if devices else "none"
    if platform != "cpu":
        fix = (f"this machine's default jax platform {platform} has {len(devices)} device(s); "
               f"run it where {n} are present")
    else:
        fix = how or (f"start the process with XLA_FLAGS=--xla_force_host_platform_device_count"
                      f"={n} (or call jax.config.update('jax_num_cpu_devices', {n}) right "
                      "after importing jax)")
        fix = (f"this process has {len(devices)} cpu device(s) and jax has already "
               f"initialised its backend, so no more can be added: {fix}")
    raise DeviceCountError(f"{what} needs {n} devices; {fix}")


def jax_mesh(mesh: manifest_pb2.Mesh, devices: Sequence[jax.Device]) -> jax.sharding.Mesh:
    """The `jax.sharding.Mesh` of a manifest mesh over `devices` (the first product-of-sizes
    of them, in order: logical device i of the program is `devices[i]`)."""
    import jax
    import numpy as np

    shape = tuple(int(a.size) for a in mesh.axes)
    n = math.prod(shape)
    if len(devices) < n:
        raise ArtifactError(f"mesh {describe_mesh(mesh)} needs {n} devices, got {len(devices)}")
    grid = np.array(list(devices)[:n], dtype=object).reshape(shape)
    return jax.sharding.Mesh(grid, tuple(a.name for a in mesh.axes))


def partition_spec(spec: Sequence[str]) -> jax.sharding.PartitionSpec:
    """A manifest `Sharding.spec` (`["data", ""]`, `"a+b"` for several axes) as a
    PartitionSpec."""
    import jax

    entries: list[Any] = []
    for entry in spec:
        names = [n for n in entry.split("+") if n]
        entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
    return jax.sharding.PartitionSpec(*entries)


def spec_strings(spec: Any, ndim: int) -> list[str]:
    """One manifest string per array axis of a PartitionSpec (axes past its end: `""`)."""
    out: list[str] = []
    for entry in tuple(spec)[:ndim]:
        if entry is None:
            out.append("")
        elif isinstance(entry, str):
            out.append(entry)
        else:
            out.append("+".join(str(e) for e in entry))
    return out + [""] * (ndim - len(out))


def named_sharding(mesh: jax.sharding.Mesh, sharding: manifest_pb2.Sharding
                   ) -> jax.sharding.NamedSharding:
    """The NamedSharding of one argument or result over `mesh` (no spec: replicated)."""
    import jax

    return jax.sharding.NamedSharding(mesh, partition_spec(sharding.spec))


def shard_shape(shape: Sequence[int], spec: Sequence[str], mesh: manifest_pb2.Mesh
                ) -> list[int]:
    """The shape of one device's shard of an array of `shape` laid out as `spec` on `mesh`."""
    sizes = {a.name: int(a.size) for a in mesh.axes}
    out = []
    for axis, dim in enumerate(shape):
        entry = spec[axis] if axis < len(spec) else ""
        parts = math.prod(sizes[n] for n in entry.split("+") if n)
        out.append(int(dim) // parts)
    return out
