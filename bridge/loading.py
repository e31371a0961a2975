"""Load one artifact version into a ready `Model`. No grpc in here.

TRUST BOUNDARY: an artifact is code. `jax.export.deserialize` and compiling `model.mlirbc` run
whatever program the artifact contains, custom calls included. The manifest checksums prove
that the files are the ones the exporter wrote (no corruption, no tampering after export); they
do not make an untrusted exporter safe. Serve only repositories whose producers you trust.

Loading a version goes through the public artifact API (`jaxport.artifact.open`): manifest
read and validated, the one path rule (nothing may point outside the artifact directory or
URL, weights only from the artifact's own files), sha256 of every file and parameter ->
deserialize -> parameters by manifest name, put on the device ONCE -> compile ONCE per
program -> warm up with zeros. Only then is the model handed to the repository as ready. Each
phase's seconds end up in `Model.load_seconds` (checksum, deserialize, weights, compile,
warmup).
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path

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
from jaxport.bridge.model import Model, Program, TensorSig
from jaxport.bridge.settings import DEFAULT_COMPILED_SHAPES
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


def _sig(spec: manifest_pb2.TensorSpec) -> TensorSig:
    shape = tuple(int(d) for d in spec.shape)
    return TensorSig(spec.name, shape, _dtype_row(spec.dtype, spec.name))


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


def _result_positions(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                      ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    plain = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    outputs_by_name = {r.name: i for i, r in enumerate(plain)
                       if r.role == _RES.RESULT_ROLE_OUTPUT}
    positions = []
    for spec in manifest.outputs:
        if spec.name not in outputs_by_name:
            raise LoadError(f"manifest: output '{spec.name}' is not a result of @main")
        positions.append(outputs_by_name[spec.name])
    checks = tuple(i for i, r in enumerate(plain) if r.role == _RES.RESULT_ROLE_CHECK)
    return tuple(positions), checks


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


def load_model(name: str, version: int, path: Path | Location, *, engine: str = "exported",
               compiled_shapes: int = DEFAULT_COMPILED_SHAPES) -> Model:
    """Load, verify, compile and warm up one artifact directory (`path`: local, or a Location
    read by URL, see `jaxport.artifact.location`). Raises LoadError on refusal.
    `compiled_shapes`: executables a shape-polymorphic model keeps (`--compiled-shapes`)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    seconds: dict[str, float] = {}
    t = time.perf_counter()

    def lap(phase: str) -> None:
        nonlocal t
        now = time.perf_counter()
        seconds[phase] = now - t
        t = now

    try:
        # An artifact outside jax's compatibility window still loads (jax decides whether it
        # can read it), but the operator hears of it in the bridge's log, not on bare stderr.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", CompatibilityWarning)
            art = jaxport.artifact.open(path)
        for w in caught:
            if issubclass(w.category, CompatibilityWarning):
                log.warning("artifact compatibility", extra={"fields": {
                    "model": name, "version": version, "warning": str(w.message)}})
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    except ChecksumError as exc:
        raise LoadError(f"checksum verification failed: {exc}") from None
    except ArtifactError as exc:  # what the manifest says (or is) cannot be served
        raise LoadError(f"manifest.json: {exc}") from None
    manifest = art.manifest
    lap("checksum")

    devices = jax.devices()
    device = devices[0]
    if device.platform not in manifest.platforms:
        raise LoadError(
            f"artifact was exported for platforms {list(manifest.platforms)}; "
            f"this bridge runs on {device.platform}"
        )
    # A model with symbolic dimensions: `--engine exported` serves its polymorphic program at
    # every admissible size; `--engine pjrt` its fixed-shape bucket programs, at their sizes.
    served = list(manifest.programs)
    if manifest.dimensions:
        served = [p for p in manifest.programs if p.polymorphic == (engine == "exported")]
    if manifest.dimensions and not served:
        names = ", ".join(d.name for d in manifest.dimensions)
        raise LoadError(
            f"the model has symbolic dimensions ({names}) and no bucket program: --engine "
            f"{engine} runs fixed-shape programs only; serve it with --engine exported, or "
            "export it with --buckets" if engine != "exported"
            else "manifest: symbolic dimensions but no polymorphic program")
    mesh = _mesh(art, devices)

    # Programs by position among those served (`batch_size` keys them in fixed-shape models;
    # the programs of a polymorphic model all have batch size 0).
    exps: dict[int, jax_export.Exported] = {}
    blobs: dict[int, bytes] = {}
    for key, program in enumerate(served):
        if engine == "exported":
            try:
                exps[key] = art.exported(program.batch_size or None,
                                         dims=dict(program.dims) or None)
            except ArtifactError as exc:
                raise LoadError(str(exc)) from None
        else:
            try:
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
    lap("weights")

    inputs = tuple(_sig(s) for s in manifest.inputs)
    outputs = tuple(_sig(s) for s in manifest.outputs)
    programs: dict[int, Program] = {}
    for key, program in enumerate(served):
        shapes = _input_shapes(manifest, program)
        outs, checks = _result_positions(manifest, program)
        build: Callable[[], Engine]
        if engine == "exported":
            exp = exps[key]
            n_plain = sum(r.role != _RES.RESULT_ROLE_TOKEN for r in program.results)
            if len(exp.out_avals) != n_plain:
                raise LoadError(f"{program.jaxexport_file} has {len(exp.out_avals)} results, "
                                f"the manifest lists {n_plain}")
            leaves = _input_leaves(manifest, program)
            sigs = [(s, sig.dtype.numpy) for s, sig in zip(shapes, inputs, strict=True)]
            params = {a.leaf_index: by_leaf[a.leaf_index]
                      for a in binding.parameter_arguments(program)}
            if program.polymorphic:
                build = functools.partial(PolymorphicEngine, exp, leaves,
                                          [sig.dtype.numpy for sig in inputs], params, device,
                                          compiled_shapes)
            else:
                build = functools.partial(
                    ExportedEngine, exp, leaves, sigs, params, device,
                    None if mesh is None else art.leaf_shardings(mesh,
                                                                 program.batch_size or None))
        else:
            slots, bindings = _pjrt_arguments(manifest, program, by_leaf, device, mesh)
            blob = blobs[key]
            build = functools.partial(PjrtEngine, blob, slots, bindings, device,
                                      _pjrt_sharding(manifest, program, mesh))
        try:
            built = build()
        except Exception as exc:  # XLA's words: the program does not compile here
            raise LoadError(f"compiling program (batch size {program.batch_size}) with engine "
                            f"{engine}: {exc}") from None
        programs[program.batch_size if not manifest.dimensions else key] = Program(
            program.batch_size, built, shapes, outs, checks, dict(program.dims))
    lap("compile")

    model = Model(name, version, manifest, inputs, outputs, programs, engine, seconds,
                  artifact=art)
    try:
        model.warm_up()
    except Exception as exc:
        raise LoadError(f"warm-up run failed: {exc}") from None
    lap("warmup")
    model.load_seconds.update(seconds)
    return model
