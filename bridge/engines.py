"""The two engines that execute one program of an artifact (no grpc in here).

- `exported`: `Exported.call` under one `jax.jit`, lowered and compiled once
  (`ExportedEngine`); for a shape-polymorphic program, compiled once per distinct concrete
  input shape, the executables kept in an LRU (`PolymorphicEngine`, `--compiled-shapes`);
- `pjrt`: the raw `model.mlirbc` compiled by the PJRT client, every `@main` argument bound from
  the manifest's flat order (what a C++ runtime does); fixed-shape programs only.

Engines interpret no manifest and check no request: `jaxport.bridge.loading` hands them what
the manifest says (leaves, argument slots, parameters already on the device); the inputs they
execute were validated once, by the front, before the worker received them.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import jax.extend.backend
import numpy as np
from jax import export as jax_export

ENGINES = ("exported", "pjrt")
# Inputs of a request up to this size go to the device through one compiled identity.
SMALL_UPLOAD_BYTES = 1 << 20

InputSig = tuple[tuple[int, ...], np.dtype]
"""(fixed shape, numpy dtype) of one program input."""


def configure_jax(cpu_devices: int = 0) -> None:
    """Process-wide JAX settings a worker needs, before the first computation.

    64-bit dtypes (INT64/FP64/UINT64) as-is. CPU programs run on the calling thread instead of
    being dispatched to XLA's execute threads: every request waits for its outputs anyway, and
    the hand-off cost ~0.3 ms of CPU per MLP request at concurrency 16 (A/B in
    docs/performance.md). `cpu_devices` (`--cpu-devices`, > 0): that many CPU devices, for
    sharded artifacts; 0 leaves jax's default (one, or XLA_FLAGS' count).
    """
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    if cpu_devices > 0:
        jax.config.update("jax_num_cpu_devices", cpu_devices)


class Engine(Protocol):
    """Executes one fixed-shape program; parameters are already resident on the device."""

    def execute(self, inputs: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        """Run with host or device inputs in Manifest.inputs order; every non-token result."""
        ...


class ExportedEngine:
    """`Exported.call` under `jax.jit`, lowered and compiled once at load."""

    def __init__(
        self,
        exp: jax_export.Exported,
        input_leaves: Sequence[int],
        input_sigs: Sequence[InputSig],
        params_by_leaf: Mapping[int, jax.Array],
        device: jax.Device,
        leaf_shardings: Sequence[jax.sharding.Sharding] | None = None,
    ) -> None:
        self._bind(exp, input_leaves, params_by_leaf, device, leaf_shardings)
        self._compiled = self._compile(input_sigs)

    def _bind(self, exp: jax_export.Exported, input_leaves: Sequence[int],
              params_by_leaf: Mapping[int, jax.Array], device: jax.Device,
              leaf_shardings: Sequence[jax.sharding.Sharding] | None = None) -> None:
        """The resident arguments (`_fixed`), the jitted call and where each input goes
        (`leaf_shardings`, one per leaf, for a sharded program; else `device`)."""
        n_leaves = len(exp.in_avals)
        input_leaves = list(input_leaves)
        fixed_leaves = [i for i in range(n_leaves) if i not in set(input_leaves)]

        def placement(leaf: int) -> jax.sharding.Sharding:
            # A sharded program: the leaf's layout on the mesh (`leaf_shardings`, one per leaf).
            if leaf_shardings is None:
                return jax.sharding.SingleDeviceSharding(device)
            return leaf_shardings[leaf]

        fixed: list[jax.Array] = []
        for leaf in fixed_leaves:
            value = params_by_leaf.get(leaf)
            if value is None:  # a leaf jax dropped from @main: unused, any value of its aval
                aval = exp.in_avals[leaf]
                value = jax.device_put(np.zeros(aval.shape, aval.dtype), placement(leaf))
            fixed.append(value)
        self._fixed = tuple(fixed)
        in_tree = exp.in_tree

        def call(fixed_args: tuple[jax.Array, ...], inputs: tuple[jax.Array, ...]) -> Any:
            leaves: list[Any] = [None] * n_leaves
            for leaf, value in zip(fixed_leaves, fixed_args, strict=True):
                leaves[leaf] = value
            for leaf, value in zip(input_leaves, inputs, strict=True):
                leaves[leaf] = value
            args, kwargs = jax.tree.unflatten(in_tree, leaves)
            return tuple(jax.tree.leaves(exp.call(*args, **kwargs)))

        self._jitted = jax.jit(call)
        self._placements = [placement(leaf) for leaf in input_leaves]
        # A sharded program's inputs are split across its devices before the call (jit's
        # compiled callable takes only arrays laid out as compiled); None: as they come.
        self._input_shardings = None if leaf_shardings is None else self._placements

    def _compile(self, input_sigs: Sequence[InputSig]) -> Any:
        specs = tuple(jax.ShapeDtypeStruct(s, d, sharding=place)
                      for (s, d), place in zip(input_sigs, self._placements, strict=True))
        return self._jitted.lower(self._fixed, specs).compile()

    def execute(self, inputs: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        if self._input_shardings is not None:
            inputs = jax.device_put(list(inputs), self._input_shardings)
        return list(self._compiled(self._fixed, tuple(inputs)))


class PolymorphicEngine(ExportedEngine):
    """A shape-polymorphic `Exported` under `jax.jit`: jax compiles one executable per concrete
    input shape, so this engine compiles on the first request of each shape and keeps the
    `cache_size` (`--compiled-shapes`) most recently used executables (an LRU: a client cycling
    through more shapes pays a compilation per miss, memory stays bounded).
    The request's sizes were checked against the dimensions' rules by the front; jax checks
    them again inside.

    `compilations` counts the executables built (misses), for tests."""

    def __init__(
        self,
        exp: jax_export.Exported,
        input_leaves: Sequence[int],
        input_dtypes: Sequence[np.dtype],
        params_by_leaf: Mapping[int, jax.Array],
        device: jax.Device,
        cache_size: int,
    ) -> None:
        if cache_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self._bind(exp, input_leaves, params_by_leaf, device)
        self._dtypes = tuple(input_dtypes)
        self._cache: OrderedDict[tuple[tuple[int, ...], ...], Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.compilations = 0

    def cached_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        """The input shapes with a compiled executable, least recently used first."""
        with self._lock:
            return list(self._cache)

    def execute(self, inputs: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        key = tuple(tuple(int(d) for d in x.shape) for x in inputs)
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is not None:
                self._cache.move_to_end(key)
        if compiled is None:
            # Outside the lock: other shapes keep running while this one compiles (two
            # concurrent first requests of one shape may both compile; one executable stays).
            compiled = self._compile(list(zip(key, self._dtypes, strict=True)))
            with self._lock:
                self.compilations += 1
                self._cache[key] = compiled
                self._cache.move_to_end(key)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return list(compiled(self._fixed, tuple(inputs)))


class PjrtEngine:
    """`model.mlirbc` compiled by the PJRT client; `@main` arguments bound from the manifest.

    `slots`: one entry per `@main` argument, the device value for parameters and the platform
    index, None for inputs. `bindings`: (argument slot, position in Manifest.inputs, its
    InputSig) for every input argument (inputs jax dropped have no slot).
    """

    def __init__(
        self,
        mlirbc: bytes,
        slots: Sequence[jax.Array | None],
        bindings: Sequence[tuple[int, int, InputSig]],
        device: jax.Device,
        sharded: PjrtSharding | None = None,
    ) -> None:
        from jaxlib import xla_client  # the PJRT compile options type lives only here

        backend = jax.extend.backend.get_backend(device.platform)
        self._slots = list(slots)
        self._bindings = [(slot, position) for slot, position, _ in bindings]
        self._device = device
        self._sharded = sharded
        if sharded is None:
            self._exe = backend.compile_and_load(mlirbc, [device], xla_client.CompileOptions())
        else:  # one replica, one partition per device of the mesh, in the mesh's order
            self._exe = backend.compile_and_load(
                mlirbc, sharded.devices, jax.extend.backend.get_compile_options(
                    num_replicas=1, num_partitions=len(sharded.devices),
                    device_assignment=np.array([[d.id for d in sharded.devices]])))
        # Host -> device for small inputs through one compiled identity: jit's C++ dispatch
        # moves them all in one call (measured ~15 us vs ~80-180 us per jax.device_put for an
        # MLP input). Large inputs keep device_put, which does not copy them once more.
        sigs = [sig for _, _, sig in bindings]
        self._upload = None
        if sharded is None and sigs and \
                sum(math.prod(s) * d.itemsize for s, d in sigs) <= SMALL_UPLOAD_BYTES:
            sharding = jax.sharding.SingleDeviceSharding(device)
            specs = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in sigs]
            self._upload = jax.jit(lambda *xs: xs).lower(*specs).compile()

    def execute(self, inputs: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        args = list(self._slots)
        values = [inputs[position] for _, position in self._bindings]
        if self._sharded is not None:
            return self._execute_sharded(args, values)
        if self._upload is not None and not any(isinstance(v, jax.Array) for v in values):
            values = list(self._upload(*values))
        for (slot, _), value in zip(self._bindings, values, strict=True):
            args[slot] = value if isinstance(value, jax.Array) else jax.device_put(
                value, self._device)
        return list(self._exe.execute(args))

    def _execute_sharded(self, args: list[jax.Array | None],
                         values: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        """Each input split across the devices as its manifest sharding says; each result's
        per-device buffers assembled into one array by its sharding."""
        sharded = self._sharded
        assert sharded is not None
        for (slot, _), value, place in zip(self._bindings, values, sharded.inputs, strict=True):
            args[slot] = jax.device_put(value, place)
        shards = self._exe.execute_sharded(args).disassemble_into_single_device_arrays()
        return [jax.make_array_from_single_device_arrays(shape, place, buffers)
                for (shape, place), buffers in zip(sharded.results, shards, strict=True)]


@dataclass(frozen=True)
class PjrtSharding:
    """How PjrtEngine runs a sharded program (from the manifest): the mesh's devices in order
    (logical device i = devices[i]), each input binding's sharding and each non-token result's
    (shape, sharding)."""

    devices: list[jax.Device]
    inputs: list[jax.sharding.Sharding]
    results: list[tuple[tuple[int, ...], jax.sharding.Sharding]]
