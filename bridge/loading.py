"""Load one artifact version for the worker: a `Loaded` model whose programs are compiled,
warmed up and ready to execute validated inputs. No grpc, no request checks in here.

TRUST BOUNDARY: an artifact is code. `jax.export.deserialize` and compiling `model.mlirbc` run
whatever program the artifact contains, custom calls included. The manifest checksums prove
that the files are the ones the exporter wrote (no corruption, no tampering after export); they
do not make an untrusted exporter safe. Serve only repositories whose producers you trust.

Loading a version goes through the public artifact API (`jaxport.artifact.open`, a local
directory or a `file://`, `http(s)://` or `s3://` URL): manifest read and validated, the one
path rule, sha256 of every file and parameter -> deserialize -> parameters by manifest name,
put on the device ONCE -> compile ONCE per program -> warm up with zeros. Each phase's seconds
end up in `Loaded.load_seconds` (checksum, deserialize, weights, compile, warmup). A refusal is
a `LoadError` (FAILED_PRECONDITION), one line naming the file or field and why.

What the worker answers about a loaded model (its programs) and what it executes are the
LOAD and EXECUTE frames of docs/frames.md.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jaxport.artifact
import numpy as np
from jax import export as jax_export
from jaxport.artifact import binding
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.errors import ArtifactError, ChecksumError
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.location import Location
from jaxport.artifact.manifest import CompatibilityWarning
from jaxport.bridge.engines import (
    ENGINES,
    Engine,
    ExportedEngine,
    InputSig,
    PjrtEngine,
    PjrtSharding,
    PolymorphicEngine,
)
from jaxport.protocol import dtypes
from jaxport.protocol.errors import FailedPreconditionError

log = logging.getLogger("jaxport.bridge.loading")

_RES = manifest_pb2.ResultRole


class LoadError(FailedPreconditionError):
    """An artifact cannot be served; the message says which file or field and why."""


def _dtype_row(dt: manifest_pb2.DType, what: str) -> dtypes.DType:
    try:
        return dtypes.by_datatype(dt.datatype)
    except dtypes.UnsupportedDtypeError as exc:
        raise LoadError(f"manifest: {what}: {exc}") from None


def _input_leaves(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program) -> list[int]:
    try:
        return binding.input_leaves(manifest, program)
    except ArtifactError as exc:
        raise LoadError(f"manifest: {exc}") from None


def _input_shapes(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                  ) -> tuple[tuple[int, ...], ...]:
    """Each input's shape in `program`: a bucket program's at its sizes (`dims`), a polymorphic
    one's at every dimension's smallest size (the shape the warm-up compiles)."""
    sizes = dict(program.dims) or {d.name: int(d.min) for d in manifest.dimensions}
    shapes = []
    for spec in manifest.inputs:
        shape = [int(d) for d in spec.shape]
        if spec.dim_names:
            shape = [sizes[n] if n else d for d, n in zip(shape, spec.dim_names, strict=True)]
        if shape and shape[0] == -1:
            shape[0] = program.batch_size
        if any(d < 0 for d in shape):
            raise LoadError(f"manifest: input '{spec.name}' has a symbolic shape {shape}")
        shapes.append(tuple(shape))
    return tuple(shapes)


def _pjrt_sharding(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program,
                   mesh: jax.sharding.Mesh | None) -> PjrtSharding | None:
    """A sharded program's devices, input and result layouts for PjrtEngine (None: one
    device), purely from the manifest."""
    if mesh is None:
        return None
    return PjrtSharding(
        devices=list(mesh.devices.flat),
        inputs=[sharding_io.named_sharding(mesh, program.arguments[slot].sharding)
                for slot, _ in binding.input_slots(manifest, program)],
        results=[(tuple(int(d) for d in r.shape), sharding_io.named_sharding(mesh, r.sharding))
                 for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN])


def _pjrt_arguments(
    manifest: manifest_pb2.Manifest, program: manifest_pb2.Program,
    by_leaf: dict[int, jax.Array], device: jax.Device,
    mesh: jax.sharding.Mesh | None = None,
) -> tuple[list[jax.Array | None], list[tuple[int, int, InputSig]]]:
    """`@main`'s argument slots and input bindings for PjrtEngine, purely from the manifest
    (`jaxport.artifact.binding`): the parameters already on the device, None for each input
    (filled per request), the platform index placed here (replicated on a sharded program's
    `mesh`)."""
    params = {a.name: by_leaf[a.leaf_index] for a in binding.parameter_arguments(program)}
    try:
        inputs = binding.input_slots(manifest, program)
    except ArtifactError as exc:
        raise LoadError(str(exc)) from None
    try:
        values = binding.main_arguments(manifest, program, params, None, device.platform)
    except ArtifactError as exc:  # a token
        raise LoadError(f"{exc}; --engine pjrt cannot bind it, use --engine exported") from None
    slots: list[jax.Array | None] = [
        jax.device_put(v, device if mesh is None else sharding_io.named_sharding(mesh, a.sharding))
        if isinstance(v, np.ndarray) else v  # the platform index; parameters are placed already
        for a, v in zip(program.arguments, values, strict=True)]
    bindings: list[tuple[int, int, InputSig]] = []
    for slot, position in inputs:
        arg = program.arguments[slot]
        sig = (tuple(int(d) for d in arg.shape), _dtype_row(arg.dtype, arg.name).numpy)
        bindings.append((slot, position, sig))
    return slots, bindings


def _mesh(art: jaxport.artifact.Artifact, devices: list[jax.Device]
          ) -> jax.sharding.Mesh | None:
    """A sharded artifact's mesh over this process's first nr_devices devices (None: a
    single-device artifact). The device count is the process's (`--cpu-devices`), never
    raised here: one line naming the flag when it is too small."""
    manifest = art.manifest
    if not manifest.HasField("mesh"):
        return None
    n = manifest.nr_devices
    what = f"the artifact is sharded over {n} devices (mesh " \
           f"{sharding_io.describe_mesh(manifest.mesh)})"
    if len(devices) < n:
        raise LoadError(f"{what} and this bridge has {len(devices)} {devices[0].platform} "
                        f"device(s): start it with --cpu-devices {n} (JAXPORT_CPU_DEVICES)")
    return sharding_io.jax_mesh(manifest.mesh, devices)




@dataclass(frozen=True)


class ServedProgram:
    """One program of a loaded model, compiled on its engine. `index`: its position in
    `manifest.programs` (what EXECUTE names)."""

    index: int
    batch_size: int
    dims: Mapping[str, int]
    polymorphic: bool
    engine: Engine
    # The shapes the warm-up runs (a polymorphic program's at every dimension's smallest size).
    warm_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[np.dtype, ...]
    # Every non-token @main result's dtype as the manifest declares it.
    result_dtypes: tuple[np.dtype, ...]

    def describe(self) -> dict[str, Any]:
        """This program in the LOAD answer (docs/frames.md)."""
        return {"index": self.index, "batch_size": self.batch_size, "dims": dict(self.dims),
                "polymorphic": self.polymorphic}

    def execute(self, inputs: Sequence[np.ndarray | jax.Array]) -> list[np.ndarray]:
        """Every non-token @main result on the host, in order, for inputs in manifest order
        (validated by the caller: nothing is checked here)."""
        results = self.engine.execute(inputs)
        return [np.asarray(r).astype(dt, copy=False)
                for r, dt in zip(results, self.result_dtypes, strict=True)]


@dataclass(frozen=True)


class Loaded:
    """One artifact version, loaded with one engine: every program it serves, compiled and
    warmed up (by manifest index). Thread-safe and stateless per call."""

    location: str
    engine_name: str
    manifest: manifest_pb2.Manifest
    programs: Mapping[int, ServedProgram]
    load_seconds: Mapping[str, float]

    def describe(self) -> dict[str, Any]:
        """The body of the LOAD answer (docs/frames.md)."""
        return {"programs": [p.describe() for p in self.programs.values()],
                "load_seconds": dict(self.load_seconds)}

    def warm_up(self) -> None:
        """Execute every program once with zeros so the first request pays no first-run cost.
        Check outputs are ignored: zeros may legitimately trip a model's checks."""
        for program in self.programs.values():
            program.execute([np.zeros(shape, dt) for shape, dt
                             in zip(program.warm_shapes, program.input_dtypes, strict=True)])


def _open(location: str | Path | Location) -> jaxport.artifact.Artifact:
    """The artifact, checksums verified; refusals as LoadError."""
    try:
        # An artifact outside jax's compatibility window still loads (jax decides whether it
        # can read it), but the operator hears of it in the worker's log, not on bare stderr.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CompatibilityWarning)
            art = jaxport.artifact.open(location)
        for w in caught:
            if issubclass(w.category, CompatibilityWarning):
                log.warning("artifact compatibility", extra={"fields": {
                    "location": str(location), "warning": str(w.message)}})
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    except ChecksumError as exc:
        raise LoadError(f"checksum verification failed: {exc}") from None
    except ArtifactError as exc:  # what the manifest says (or is) cannot be served
        raise LoadError(f"manifest.json: {exc}") from None
    return art


def load(location: str | Path | Location, *, engine: str, compiled_shapes: int) -> Loaded:
    """Load, verify, compile and warm up one artifact (`location`: a local directory or a URL,
    see `jaxport.artifact.location`) with `engine` (`exported` or `pjrt`). Raises LoadError on
    refusal. `compiled_shapes`: executables a shape-polymorphic program keeps (an LRU)."""
    if engine not in ENGINES:
        raise LoadError(f"unknown engine {engine!r}: the worker runs {', '.join(ENGINES)}")
    seconds: dict[str, float] = {}
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        seconds[phase] = now - t
        t = now

    art = _open(location)
    manifest = art.manifest
    lap("checksum")

    devices = jax.devices()
    device = devices[0]
    if device.platform not in manifest.platforms:
        raise LoadError(
            f"artifact was exported for platforms {list(manifest.platforms)}; "
            f"this bridge runs on {device.platform}"
        )
    # A model with symbolic dimensions: `exported` serves its polymorphic program at every
    # admissible size; `pjrt` its fixed-shape bucket programs, at their sizes.
    served = [(i, p) for i, p in enumerate(manifest.programs)]
    if manifest.dimensions:
        served = [(i, p) for i, p in served if p.polymorphic == (engine == "exported")]
    if manifest.dimensions and not served:
        names = ", ".join(d.name for d in manifest.dimensions)
        raise LoadError(
            f"the model has symbolic dimensions ({names}) and no bucket program: --engine "
            f"{engine} runs fixed-shape programs only; serve it with --engine exported, or "
            "export it with --buckets" if engine != "exported"
            else "manifest: symbolic dimensions but no polymorphic program")
    mesh = _mesh(art, devices)

    exps: dict[int, jax_export.Exported] = {}
    blobs: dict[int, bytes] = {}
    for key, program in served:
        try:
            if engine == "exported":
                exps[key] = art.exported(program.batch_size or None,
                                         dims=dict(program.dims) or None)
            else:
                blobs[key] = art.read_file(program.mlirbc_file)
        except ArtifactError as exc:
            raise LoadError(str(exc)) from None
    lap("deserialize")

    # Parameters are shared by every program (same leaves, same order); read them once.
    try:
        values = art.parameters()
    except Exception as exc:  # TensorStore's own words
        raise LoadError(f"reading weights: {exc}") from None
    by_leaf: dict[int, jax.Array] = {}
    for arg in binding.parameter_arguments(manifest.programs[0]):
        value = values[arg.name]
        want = tuple(int(d) for d in arg.shape)
        if tuple(value.shape) != want:
            raise LoadError(f"parameter '{arg.name}': stored shape {list(value.shape)}, "
                            f"manifest says {list(want)}")
        by_leaf[arg.leaf_index] = jax.device_put(
            value, device if mesh is None else sharding_io.named_sharding(mesh, arg.sharding))
    for v in by_leaf.values():
        v.block_until_ready()
    del values  # the host copies: the device holds the parameters now
    lap("weights")

    input_dtypes = tuple(_dtype_row(s.dtype, s.name).numpy for s in manifest.inputs)
    programs: dict[int, ServedProgram] = {}
    for key, program in served:
        shapes = _input_shapes(manifest, program)
        build: Callable[[], Engine]
        if engine == "exported":
            exp = exps[key]
            n_plain = sum(r.role != _RES.RESULT_ROLE_TOKEN for r in program.results)
            if len(exp.out_avals) != n_plain:
                raise LoadError(f"{program.jaxexport_file} has {len(exp.out_avals)} results, "
                                f"the manifest lists {n_plain}")
            leaves = _input_leaves(manifest, program)
            params = {a.leaf_index: by_leaf[a.leaf_index]
                      for a in binding.parameter_arguments(program)}
            if program.polymorphic:
                build = functools.partial(PolymorphicEngine, exp, leaves, input_dtypes, params,
                                          device, compiled_shapes)
            else:
                build = functools.partial(
                    ExportedEngine, exp, leaves, list(zip(shapes, input_dtypes, strict=True)),
                    params, device,
                    None if mesh is None else art.leaf_shardings(mesh,
                                                                 program.batch_size or None))
        else:
            slots, bindings = _pjrt_arguments(manifest, program, by_leaf, device, mesh)
            build = functools.partial(PjrtEngine, blobs[key], slots, bindings, device,
                                      _pjrt_sharding(manifest, program, mesh))
        try:
            built = build()
        except Exception as exc:  # XLA's words: the program does not compile here
            raise LoadError(f"compiling program (batch size {program.batch_size}) with engine "
                            f"{engine}: {exc}") from None
        results = tuple(_dtype_row(r.dtype, r.name).numpy for r in program.results
                        if r.role != _RES.RESULT_ROLE_TOKEN)
        programs[key] = ServedProgram(key, program.batch_size, dict(program.dims),
                                      program.polymorphic, built, shapes, input_dtypes, results)
    lap("compile")

    loaded = Loaded(str(location), engine, manifest, programs, seconds)
    try:
        loaded.warm_up()
    except Exception as exc:
        raise LoadError(f"warm-up run failed: {exc}") from None
    lap("warmup")
    return loaded
