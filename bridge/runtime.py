"""Model core: load one artifact version and execute it. No grpc in here.

TRUST BOUNDARY: an artifact is code. `jax.export.deserialize` and compiling `model.mlirbc` run
whatever program the artifact contains, custom calls included. The manifest checksums prove
that the files are the ones the exporter wrote (no corruption, no tampering after export); they
do not make an untrusted exporter safe. Serve only repositories whose producers you trust.

Loading a version: manifest -> path checks (nothing may point outside the artifact directory,
weights only from local files) -> sha256 of every file -> deserialize -> parameters from
TensorStore in manifest order, put on the device ONCE -> compile ONCE -> warm up with zeros.
Only then is the model handed to the repository as ready.

Two engines execute the same artifact:
- `exported`: `Exported.call` under one `jax.jit`, lowered and compiled once;
- `pjrt`: the raw `model.mlirbc` compiled by the PJRT client, arguments bound purely from the
  manifest's flat order (what a C++ runtime does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.extend.backend
import numpy as np
from jax import export as jax_export
from jaxport.artifact import checks as checks_io
from jaxport.artifact import manifest as manifest_io
from jaxport.artifact import weights as weights_io
from jaxport.artifact.errors import ArtifactError, CheckFailedError
from jaxport.bridge.batcher import BatchingConfig, DynamicBatcher
from jaxport.bridge.statistics import ModelStatistics, Timings
from jaxport.bridge.testing import gate as test_gate
from jaxport.protocol import dtypes
from jaxport.protocol.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    error_for_code,
)
from jaxport.protocol.gen.jaxport.v1 import manifest_pb2

log = logging.getLogger("jaxport.bridge.runtime")

ENGINES = ("exported", "pjrt")
# Inputs of a request up to this size go to the device through one compiled identity.
SMALL_UPLOAD_BYTES = 1 << 20


def configure_jax() -> None:
    """Process-wide JAX settings the bridge needs, before the first computation.

    64-bit dtypes (INT64/FP64/UINT64) as-is. CPU programs run on the calling thread instead of
    being dispatched to XLA's execute threads: every request waits for its outputs anyway, and
    the hand-off cost ~0.3 ms of CPU per MLP request at concurrency 16 (A/B in
    docs/performance.md).
    """
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_enable_async_dispatch", False)


class LoadError(FailedPreconditionError):
    """An artifact cannot be served; the message says which file or field and why."""


@dataclass(frozen=True)
class TensorSig:
    """A model input or output as a caller sees it. -1 marks the batch dimension."""

    name: str
    shape: tuple[int, ...]
    dtype: dtypes.DType

    @property
    def datatype(self) -> str:
        """Open Inference Protocol datatype string (`FP32`, `BF16`, ...)."""
        return self.dtype.datatype

    def describe(self) -> str:
        """`FP32 [4, 3]`."""
        return f"{self.datatype} {list(self.shape)}"

    def matches_shape(self, shape: Sequence[int]) -> bool:
        """True when `shape` fits (a -1 dimension accepts any size >= 1)."""
        if len(shape) != len(self.shape):
            return False
        return all(w == g if w >= 0 else g >= 1 for w, g in zip(self.shape, shape, strict=True))


def _clip(text: str, limit: int = 64) -> str:
    """A caller-supplied string as it may appear in an error message (bounded length)."""
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"


def _clip_shape(shape: Sequence[int], limit: int = 8) -> str:
    """A caller-supplied shape for an error message (bounded length)."""
    dims = list(shape)
    if len(dims) <= limit:
        return str(dims)
    return f"[{', '.join(map(str, dims[:limit]))}, ...] ({len(dims)} dimensions)"


def _sig(spec: manifest_pb2.TensorSpec) -> TensorSig:
    shape = tuple(int(d) for d in spec.shape)
    return TensorSig(spec.name, shape, _dtype_row(spec.dtype, spec.name))


def _dtype_row(dt: manifest_pb2.DType, what: str) -> dtypes.DType:
    try:
        return dtypes.by_datatype(dt.datatype)
    except dtypes.UnsupportedDtypeError as exc:
        raise LoadError(f"manifest: {what}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Engines


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
        input_sigs: Sequence[tuple[tuple[int, ...], np.dtype]],
        params_by_leaf: Mapping[int, jax.Array],
        device: jax.Device,
    ) -> None:
        n_leaves = len(exp.in_avals)
        input_leaves = list(input_leaves)
        fixed_leaves = [i for i in range(n_leaves) if i not in set(input_leaves)]
        fixed: list[jax.Array] = []
        for leaf in fixed_leaves:
            value = params_by_leaf.get(leaf)
            if value is None:  # a leaf jax dropped from @main: unused, any value of its aval
                aval = exp.in_avals[leaf]
                value = jax.device_put(np.zeros(aval.shape, aval.dtype), device)
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

        sharding = jax.sharding.SingleDeviceSharding(device)
        specs = tuple(jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in input_sigs)
        self._compiled = jax.jit(call).lower(self._fixed, specs).compile()

    def execute(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
        return list(self._compiled(self._fixed, tuple(inputs)))


class PjrtEngine:
    """`model.mlirbc` compiled by the PJRT client; `@main` arguments bound from the manifest."""

    def __init__(
        self,
        mlirbc: bytes,
        program: manifest_pb2.Program,
        platforms: Sequence[str],
        params_by_index: Mapping[int, jax.Array],
        device: jax.Device,
        input_names: Sequence[str],
    ) -> None:
        from jaxlib import xla_client  # the PJRT compile options type lives only here

        backend = jax.extend.backend.get_backend(device.platform)
        position = {name: i for i, name in enumerate(input_names)}
        slots: list[jax.Array | None] = []
        # (argument slot, position in Manifest.inputs); inputs jax dropped have no slot.
        self._bindings: list[tuple[int, int]] = []
        for arg in program.arguments:
            if arg.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER:
                slots.append(params_by_index[arg.index])
            elif arg.role == manifest_pb2.ARGUMENT_ROLE_INPUT:
                if arg.name not in position:
                    raise LoadError(f"argument {arg.index} is input {arg.name!r}, which "
                                    "Manifest.inputs does not list")
                self._bindings.append((len(slots), position[arg.name]))
                slots.append(None)
            elif arg.role == manifest_pb2.ARGUMENT_ROLE_PLATFORM_INDEX:
                index = list(platforms).index(device.platform)
                dtype = _dtype_row(arg.dtype, "platform index").numpy  # i32, i64 under x64
                slots.append(jax.device_put(np.asarray(index, dtype), device))
            else:
                raise LoadError(
                    f"argument {arg.index} ({arg.name!r}) has role "
                    f"{manifest_pb2.ArgumentRole.Name(arg.role)}, which --engine pjrt cannot "
                    "bind; use --engine exported"
                )
        self._slots = slots
        self._device = device
        self._exe = backend.compile_and_load(mlirbc, [device], xla_client.CompileOptions())
        # Host -> device for small inputs through one compiled identity: jit's C++ dispatch
        # moves them all in one call (measured ~15 us vs ~80-180 us per jax.device_put for an
        # MLP input). Large inputs keep device_put, which does not copy them once more.
        bound = [program.arguments[slot] for slot, _ in self._bindings]
        self._upload = None
        if bound and sum(a.byte_size for a in bound) <= SMALL_UPLOAD_BYTES:
            sharding = jax.sharding.SingleDeviceSharding(device)
            specs = [jax.ShapeDtypeStruct(tuple(a.shape), _dtype_row(a.dtype, a.name).numpy,
                                          sharding=sharding) for a in bound]
            self._upload = jax.jit(lambda *xs: xs).lower(*specs).compile()

    def execute(self, inputs: Sequence[jax.Array | np.ndarray]) -> list[jax.Array]:
        args = list(self._slots)
        values = [inputs[position] for _, position in self._bindings]
        if self._upload is not None and not any(isinstance(v, jax.Array) for v in values):
            values = list(self._upload(*values))
        for (slot, _), value in zip(self._bindings, values, strict=True):
            args[slot] = value if isinstance(value, jax.Array) else jax.device_put(
                value, self._device)
        return list(self._exe.execute(args))


# ---------------------------------------------------------------------------------------------
# A loaded model version


@dataclass(frozen=True)
class _Program:
    batch_size: int
    engine: Engine
    input_shapes: tuple[tuple[int, ...], ...]  # fixed shapes, Manifest.inputs order
    output_results: tuple[int, ...]  # positions of Manifest.outputs among non-token results
    check_results: tuple[int, ...]


class Model:
    """One version of one model, loaded, compiled, warmed up, ready to execute.

    Thread-safe and stateless per call; how many calls run at once is the caller's policy
    (`jaxport.bridge.limits.AdmissionController`).
    """

    def __init__(
        self,
        name: str,
        version: int,
        path: Path,
        manifest: manifest_pb2.Manifest,
        programs: Mapping[int, _Program],
        engine_name: str,
        load_seconds: Mapping[str, float],
    ) -> None:
        self.name = name
        self.version = version
        self.path = path
        self.manifest = manifest
        self.engine_name = engine_name
        self.inputs: tuple[TensorSig, ...] = tuple(_sig(s) for s in manifest.inputs)
        self.outputs: tuple[TensorSig, ...] = tuple(_sig(s) for s in manifest.outputs)
        self.load_seconds = dict(load_seconds)
        self.statistics = ModelStatistics()
        self._programs = dict(programs)
        self._inputs_by_name = {s.name: s for s in self.inputs}
        self._outputs_by_name = {s.name: i for i, s in enumerate(self.outputs)}
        self._batched = (
            tuple(manifest.batching.batched_inputs) if manifest.HasField("batching") else ()
        )
        # Set by `enable_batching`: requests of any batch size 1..max go through it.
        self.batcher: DynamicBatcher | None = None

    def enable_batching(self, config: BatchingConfig) -> None:
        """Route requests through a dynamic batcher over this model's fixed-size programs.

        Requires a model exported with batch sizes; `config.batch_sizes` must be exactly them.
        """
        if not self.batch_sizes:
            raise LoadError(f"{self.label} was exported without batch sizes; it cannot batch")
        if tuple(config.batch_sizes) != self.batch_sizes:
            raise LoadError(f"batching config sizes {list(config.batch_sizes)} differ from the "
                            f"exported sizes {list(self.batch_sizes)} of {self.label}")
        self.batcher = DynamicBatcher(
            self.execute, config, [s.name for s in self.inputs], [s.name for s in self.outputs],
            name=f"{self.name}/{self.version}",
        )

    def __repr__(self) -> str:
        return f"Model({self.name!r}, version={self.version}, engine={self.engine_name!r})"

    @property
    def label(self) -> str:
        """`model 'mlp' (version 1)`, for messages."""
        return f"model '{self.name}' (version {self.version})"

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """Exported batch sizes, ascending (empty for an unbatched model)."""
        return tuple(sorted(self._programs)) if self._batched else ()

    def input_sig(self, name: str) -> TensorSig:
        """The signature of input `name`; INVALID_ARGUMENT naming the model's inputs if none."""
        sig = self._inputs_by_name.get(name)
        if sig is None:
            known = ", ".join(f"'{s.name}' ({s.describe()})" for s in self.inputs)
            raise InvalidArgumentError(
                f"unexpected input '{_clip(name)}': {self.label} has inputs {known}"
            )
        return sig

    def check_input(self, name: str, datatype: str, shape: Sequence[int]) -> TensorSig:
        """Check a request input's declared name, datatype and shape (before decoding it)."""
        sig = self.input_sig(name)
        if datatype != sig.datatype:
            raise InvalidArgumentError(
                f"input '{name}': expected datatype {sig.datatype}, "
                f"got {_clip(datatype) or '(empty)'}"
            )
        if not sig.matches_shape(shape):
            raise InvalidArgumentError(
                f"input '{name}': expected shape {list(sig.shape)}, got {_clip_shape(shape)}"
            )
        return sig

    def check_outputs(self, requested: Sequence[str] | None) -> tuple[str, ...]:
        """Validate requested output names (None/empty = all outputs, in manifest order)."""
        if not requested:
            return tuple(s.name for s in self.outputs)
        seen: set[str] = set()
        for name in requested:
            if name not in self._outputs_by_name:
                known = ", ".join(f"'{s.name}'" for s in self.outputs)
                raise InvalidArgumentError(
                    f"unknown requested output '{_clip(name)}': {self.label} has outputs {known}"
                )
            if name in seen:
                raise InvalidArgumentError(f"requested output '{name}' is listed twice")
            seen.add(name)
        return tuple(requested)

    def output_sig(self, name: str) -> TensorSig:
        """Signature of output `name` (validated names only)."""
        return self.outputs[self._outputs_by_name[name]]

    def check_inputs(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Every input present, none extra, each with the right dtype and shape."""
        for sig in self.inputs:
            if sig.name not in arrays:
                raise InvalidArgumentError(
                    f"missing input '{sig.name}': {self.label} expects {sig.describe()}"
                )
        for name, value in arrays.items():
            try:
                datatype = dtypes.by_numpy(value.dtype).datatype
            except dtypes.UnsupportedDtypeError as exc:
                raise InvalidArgumentError(f"input '{name}': {exc}") from None
            self.check_input(name, datatype, value.shape)

    def _program_for(self, arrays: Mapping[str, np.ndarray]) -> _Program:
        if not self._batched:
            return next(iter(self._programs.values()))
        sizes = sorted({int(arrays[n].shape[0]) for n in self._batched})
        if len(sizes) != 1:
            raise InvalidArgumentError(
                f"batched inputs {list(self._batched)} disagree on the batch size: {sizes}"
            )
        program = self._programs.get(sizes[0])
        if program is None:
            raise InvalidArgumentError(
                f"batch size {sizes[0]} is not exported for {self.label}; "
                f"exported sizes: {sorted(self._programs)}"
            )
        return program

    def infer(
        self, arrays: Mapping[str, np.ndarray], requested: Sequence[str] | None = None,
        deadline: float | None = None,
    ) -> tuple[dict[str, np.ndarray], Timings]:
        """Check and execute once; outputs by name (requested ones, or all) and the timings.

        A runtime check compiled into the program (checkify) that fired raises the status its
        kind maps to, with the message `err.get()` gives in JAX.
        """
        test_gate(self.name)  # no-op unless JAXPORT_TEST_GATE_DIR (tests only): bridge/testing.py
        self.check_inputs(arrays)
        names = self.check_outputs(requested)
        if self.batcher is not None:
            # `deadline` (time.monotonic()): expired requests leave the batch queue unexecuted.
            future = self.batcher.submit(arrays, deadline)
            outputs = future.result()
            t = future.batch_timing
            return ({n: outputs[n] for n in names},
                    Timings(queue_ns=t.queue_ns, infer_ns=t.execute_ns, inferences=t.rows,
                            executions=1 if t.first else 0, batch_rows=t.batch_rows))
        program = self._program_for(arrays)
        t1 = time.perf_counter_ns()
        # Host arrays go to the engine as they are: jit's C++ path does the one transfer with no
        # separate device_put + sync (measured 0.3-0.5 ms less per MLP request; input_ns is 0).
        host_inputs = [arrays[sig.name] for sig in self.inputs]
        t2 = time.perf_counter_ns()
        results = program.engine.execute(host_inputs)
        for r in results:
            r.block_until_ready()
        t3 = time.perf_counter_ns()
        if program.check_results:
            self._raise_if_check_fired([np.asarray(results[i]) for i in program.check_results])
        out = {}
        for name in names:
            sig = self.output_sig(name)
            value = np.asarray(results[program.output_results[self._outputs_by_name[name]]])
            out[name] = value.astype(sig.dtype.numpy, copy=False)
        t4 = time.perf_counter_ns()
        return out, Timings(input_ns=t2 - t1, infer_ns=t3 - t2, output_ns=t4 - t3,
                            inferences=max(1, program.batch_size))

    def execute(self, batch_size: int, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the program exported for `batch_size` on full inputs; every output by name.

        The `execute` callable a `jaxport.bridge.batcher.DynamicBatcher` drives.
        """
        program = self._programs.get(batch_size)
        if program is None:
            raise InvalidArgumentError(
                f"batch size {batch_size} is not exported for {self.label}; "
                f"exported sizes: {sorted(self._programs)}"
            )
        results = program.engine.execute([arrays[sig.name] for sig in self.inputs])
        if program.check_results:
            self._raise_if_check_fired([np.asarray(results[i]) for i in program.check_results])
        return {
            sig.name: np.asarray(results[pos])
            for sig, pos in zip(self.outputs, program.output_results, strict=True)
        }

    def _raise_if_check_fired(self, values: Sequence[np.ndarray]) -> None:
        try:
            checks_io.raise_if_fired(self.manifest.checks, values)
        except CheckFailedError as exc:
            raise error_for_code(exc.code, exc.message) from None

    def warm_up(self) -> None:
        """Execute every program once with zeros so the first request pays no first-run cost.

        Check outputs are ignored here: zeros may legitimately trip a model's checks.
        """
        for program in self._programs.values():
            zeros = [
                jax.device_put(np.zeros(shape, sig.dtype.numpy))
                for sig, shape in zip(self.inputs, program.input_shapes, strict=True)
            ]
            for r in program.engine.execute(zeros):
                r.block_until_ready()


# ---------------------------------------------------------------------------------------------
# Loading


def _input_leaves(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program) -> list[int]:
    by_name = {a.name: a.leaf_index for a in program.arguments
               if a.role == manifest_pb2.ARGUMENT_ROLE_INPUT}
    by_name.update({d.name: d.leaf_index for d in manifest.dropped_leaves if d.kind == "input"})
    leaves = []
    for spec in manifest.inputs:
        if spec.name not in by_name:
            raise LoadError(f"manifest: input '{spec.name}' is neither an argument nor dropped")
        leaves.append(by_name[spec.name])
    return leaves


def _input_shapes(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                  ) -> tuple[tuple[int, ...], ...]:
    shapes = []
    for spec in manifest.inputs:
        shape = [int(d) for d in spec.shape]
        if shape and shape[0] == -1:
            shape[0] = program.batch_size
        if any(d < 0 for d in shape):
            raise LoadError(f"manifest: input '{spec.name}' has a symbolic shape {shape}")
        shapes.append(tuple(shape))
    return tuple(shapes)


def _result_positions(manifest: manifest_pb2.Manifest, program: manifest_pb2.Program
                      ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    plain = [r for r in program.results if r.role != manifest_pb2.RESULT_ROLE_TOKEN]
    outputs_by_name = {r.name: i for i, r in enumerate(plain)
                       if r.role == manifest_pb2.RESULT_ROLE_OUTPUT}
    positions = []
    for spec in manifest.outputs:
        if spec.name not in outputs_by_name:
            raise LoadError(f"manifest: output '{spec.name}' is not a result of @main")
        positions.append(outputs_by_name[spec.name])
    checks = tuple(i for i, r in enumerate(plain) if r.role == manifest_pb2.RESULT_ROLE_CHECK)
    return tuple(positions), checks


def load_model(name: str, version: int, path: Path, *, engine: str = "exported") -> Model:
    """Load, verify, compile and warm up one artifact directory. Raises LoadError on refusal."""
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
        manifest = manifest_io.load(path)
        manifest_io.check_paths(path, manifest)
    except ArtifactError as exc:
        raise LoadError(str(exc)) from None
    try:
        manifest_io.verify_files(path, manifest)
    except ArtifactError as exc:
        raise LoadError(f"checksum verification failed: {exc}") from None
    lap("checksum")

    device = jax.devices()[0]
    if device.platform not in manifest.platforms:
        raise LoadError(
            f"artifact was exported for platforms {list(manifest.platforms)}; "
            f"this bridge runs on {device.platform}"
        )
    if not manifest.programs:
        raise LoadError("manifest lists no programs")

    blobs: dict[int, bytes] = {}
    exps: dict[int, jax_export.Exported] = {}
    for program in manifest.programs:
        if engine == "exported":
            blob = (path / program.jaxexport_file).read_bytes()
            try:
                exps[program.batch_size] = jax_export.deserialize(bytearray(blob))
            except Exception as exc:
                raise LoadError(f"{program.jaxexport_file}: cannot deserialize: {exc}") from None
        else:
            blobs[program.batch_size] = (path / program.mlirbc_file).read_bytes()
    lap("deserialize")

    # Parameters are shared by every program (same leaves, same order); read them once.
    first = manifest.programs[0]
    try:
        values = weights_io.read_parameters(path, first)
    except Exception as exc:
        raise LoadError(f"reading weights: {exc}") from None
    param_args = [a for a in first.arguments if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
    if len(values) != len(param_args):
        raise LoadError(f"read {len(values)} parameters, manifest lists {len(param_args)}")
    by_leaf: dict[int, jax.Array] = {}
    for arg, value in zip(param_args, values, strict=True):
        want = tuple(int(d) for d in arg.shape)
        if tuple(value.shape) != want:
            raise LoadError(f"parameter '{arg.name}': stored shape {list(value.shape)}, "
                            f"manifest says {list(want)}")
        by_leaf[arg.leaf_index] = jax.device_put(value, device)
    for v in by_leaf.values():
        v.block_until_ready()
    lap("weights")

    programs: dict[int, _Program] = {}
    for program in manifest.programs:
        shapes = _input_shapes(manifest, program)
        outs, checks = _result_positions(manifest, program)
        params_here = {a.index: by_leaf[a.leaf_index] for a in program.arguments
                       if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER}
        sigs = [(s, _sig(spec).dtype.numpy) for s, spec in zip(shapes, manifest.inputs,
                                                               strict=True)]
        built: Engine
        try:
            if engine == "exported":
                exp = exps[program.batch_size]
                n_plain = sum(r.role != manifest_pb2.RESULT_ROLE_TOKEN for r in program.results)
                if len(exp.out_avals) != n_plain:
                    raise LoadError(f"{program.jaxexport_file} has {len(exp.out_avals)} results, "
                                    f"the manifest lists {n_plain}")
                leaves_here = {a.leaf_index: by_leaf[a.leaf_index] for a in program.arguments
                               if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER}
                built = ExportedEngine(exp, _input_leaves(manifest, program), sigs, leaves_here,
                                       device)
            else:
                built = PjrtEngine(blobs[program.batch_size], program, manifest.platforms,
                                   params_here, device, [i.name for i in manifest.inputs])
        except LoadError:
            raise
        except Exception as exc:
            raise LoadError(f"compiling program (batch size {program.batch_size}) with engine "
                            f"{engine}: {exc}") from None
        programs[program.batch_size] = _Program(program.batch_size, built, shapes, outs, checks)
    lap("compile")

    model = Model(name, version, path, manifest, programs, engine, seconds)
    try:
        model.warm_up()
    except Exception as exc:
        raise LoadError(f"warm-up run failed: {exc}") from None
    lap("warmup")
    model.load_seconds.update(seconds)
    return model
