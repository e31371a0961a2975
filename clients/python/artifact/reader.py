"""`open(path)`: a jaxport artifact as a Python consumer uses it, without the model's source.

    import jaxport.artifact
    art = jaxport.artifact.open("repo/mlp/1")       # manifest, paths and checksums checked
    art.call(x=x)                                   # {"logits": array(...)}, by output name
    art.parameters()                                # {"params.w1": array, ...}, manifest names
    art.parameter_tree()                            # the params pytree the model was exported with
    art.exported()                                  # the jax.export.Exported
    art.goldens()                                   # [Golden(name, inputs, outputs, ...)]
    art.labels("probs")                             # class labels of an output, or None

Importing this module does not import jax; `exported`, `parameter_tree`, `call_arguments` and
`call` do, on first use. Everything else (manifest, parameters, goldens) is numpy + TensorStore
only, so a tool that inspects artifacts stays light.

TRUST BOUNDARY: opening checks INTEGRITY (every path stays inside the artifact, every file and
parameter matches its sha256). Deserializing and calling the program runs whatever code the
artifact contains; only call artifacts from producers you trust.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxport.artifact import batching, binding
from jaxport.artifact import checks as checks_mod
from jaxport.artifact import dims as dims_mod
from jaxport.artifact import goldens as goldens_mod
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact import weights as weights_mod
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.location import LocalLocation, Location, locate

if TYPE_CHECKING:
    import jax
    from jax import export as jax_export

__all__ = ["Artifact", "Golden", "open"]

_ARG = manifest_pb2.ArgumentRole
_RES = manifest_pb2.ResultRole


@dataclass(frozen=True)
class Golden:
    """One golden case: inputs and the outputs JAX computed for them when exporting.

    A case that trips a runtime check has no `outputs`; `expected_check` names the kind and
    `expected_error` is JAX's `err.get()` text. `batch_size` is the program it belongs to
    (0 = the unbatched program). In a differentiable artifact (vjp_order >= 1) the first case
    of each program also has `output_cotangents` (by output name) and the `gradients` (by
    argument name) `jax.vjp` of the original function gave for them. In a shape-polymorphic
    artifact `dims` gives each symbolic dimension's size in the case: the polymorphic program
    runs every case, a bucket program those whose `dims` are its own.
    """

    name: str
    batch_size: int
    inputs: Mapping[str, np.ndarray]
    outputs: Mapping[str, np.ndarray]
    check_outputs: Mapping[str, np.ndarray]
    expected_check: str
    expected_error: str
    output_cotangents: Mapping[str, np.ndarray] = field(default_factory=dict)
    gradients: Mapping[str, np.ndarray] = field(default_factory=dict)
    # Shape-polymorphic artifacts: each symbolic dimension's size in this case.
    dims: Mapping[str, int] = field(default_factory=dict)


def open(path: str | os.PathLike[str] | Location, *, verify_checksums: bool = True
         ) -> Artifact:
    """Open the artifact directory `path`: manifest read and validated, every path it names
    checked to stay inside `path`, and (unless `verify_checksums=False`) every file and
    parameter checked against its sha256. Raises `ArtifactError` naming what is wrong.

    `path` is a local directory, a `file://` URL or an `http(s)://` URL of one
    (`jaxport.artifact.location`): by URL every file, weights included, is read over HTTP
    and checked exactly as a local one, and no manifest path may leave the URL's prefix.

    An artifact outside jax's compatibility window (`exportedAt` more than 6 months ago, or
    exported by a newer jax than this one) gives one `manifest.CompatibilityWarning` line per
    reason; an artifact without `exportedAt` (written before the field) has an unknown age."""
    root = locate(path)
    manifest = manifest_mod.load(root)
    for line in manifest_mod.compatibility_warnings(manifest):
        warnings.warn(f"{root}: {line}", manifest_mod.CompatibilityWarning, stacklevel=2)
    manifest_mod.check_paths(root, manifest)
    if verify_checksums:
        manifest_mod.verify_files(root, manifest)
    return Artifact(root, manifest)


class Artifact:
    """One artifact directory, opened. Thread-safe for reading; caches what it loads.

    `location` says where its files are; `path` is the local directory (a `Path`), or the
    URL (a `str`) of an artifact read over HTTP."""

    def __init__(self, path: str | os.PathLike[str] | Location,
                 manifest: manifest_pb2.Manifest) -> None:
        self.location = locate(path)
        self.path: Path | str = (self.location.path if isinstance(self.location, LocalLocation)
                                 else str(self.location))
        self.manifest = manifest
        self._exported: dict[str, jax_export.Exported] = {}  # by jaxexport_file

    def __repr__(self) -> str:
        return f"Artifact({str(self.path)!r}, name={self.manifest.name!r})"

    def read_file(self, rel: str) -> bytes:
        """The bytes of file `rel` of the artifact (a path as the manifest names it, held to
        the path rule). ArtifactError when it is missing or cannot be read."""
        self.location.resolve(rel, repr(rel))
        data = self.location.read_bytes(rel)
        if data is None:
            raise ArtifactError(f"{self.location.display(rel)}: no such file in the artifact")
        return data

    # -- description --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The model name recorded at export."""
        return self.manifest.name

    @property
    def inputs(self) -> Sequence[manifest_pb2.TensorSpec]:
        """Inputs as callers see them (a -1 dimension is the batch dimension)."""
        return self.manifest.inputs

    @property
    def outputs(self) -> Sequence[manifest_pb2.TensorSpec]:
        """Outputs as callers see them, in result order."""
        return self.manifest.outputs

    @property
    def polymorphic(self) -> bool:
        """Whether the model has symbolic dimensions (`manifest.dimensions`): `call` then takes
        any admissible size (jaxport.artifact.dims)."""
        return bool(self.manifest.dimensions)

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The exported batch sizes, ascending; empty for an unbatched artifact."""
        if not self.manifest.HasField("batching"):
            return ()
        return tuple(sorted(self.manifest.batching.batch_sizes))

    def program(self, batch_size: int | None = None, *, dims: Mapping[str, int] | None = None
                ) -> manifest_pb2.Program:
        """The manifest Program for `batch_size` (None: the only program; an unbatched artifact
        has exactly one, a polymorphic one its polymorphic program), or the bucket program of
        `dims` (`{"B": 8, "T": 128}`). ArtifactError names what is exported when there is
        none."""
        if dims:
            for p in self.manifest.programs:
                if p.dims and dict(p.dims) == dict(dims):
                    return p
            buckets = [dict(p.dims) for p in self.manifest.programs if p.dims]
            raise ArtifactError(f"{self.location}: no bucket program for {dict(dims)} "
                                f"(buckets: {buckets or 'none'})")
        programs = {p.batch_size: p for p in self.manifest.programs if not p.dims}
        if batch_size is None:
            if len(programs) == 1:
                return next(iter(programs.values()))
            raise ArtifactError(
                f"{self.location}: several programs (batch sizes {list(self.batch_sizes)}); "
                "say which batch size"
            )
        program = programs.get(batch_size if self.batch_sizes else 0)
        if program is None:
            raise ArtifactError(
                f"{self.location}: batch size {batch_size} is not exported "
                f"(exported sizes: {list(self.batch_sizes)})"
            )
        return program

    # -- parameters ---------------------------------------------------------------------------

    @cached_property
    def _parameters(self) -> dict[str, np.ndarray]:
        program = self.manifest.programs[0]  # every program shares the same parameters
        names = [a.name for a in binding.parameter_arguments(program)]
        values = weights_mod.read_parameters(self.location, program)
        return dict(zip(names, values, strict=True))

    def parameters(self) -> dict[str, np.ndarray]:
        """Every stored parameter by its manifest name (`params.dense.kernel`), read once.

        Parameters jax dropped from the program (unused by it) are not stored and not listed.
        """
        return dict(self._parameters)

    def parameter_tree(self) -> Any:
        """The params pytree the model was exported with (structure from the serialized
        program, leaves from the weights). A leaf the program does not use was not stored; it
        comes back as zeros of its shape and dtype."""
        program = self.manifest.programs[0]
        exp = self.exported(program.batch_size or None, dims=dict(program.dims) or None)
        args, _ = exp.in_tree.unflatten(self._leaves(exp, program, inputs=None))
        return args[0]

    # -- programs -----------------------------------------------------------------------------

    def exported(self, batch_size: int | None = None, *, dims: Mapping[str, int] | None = None
                 ) -> jax_export.Exported:
        """The deserialized `jax.export.Exported` of one program (`program(batch_size, dims=)`;
        imports jax)."""
        from jax import export as jax_export

        program = self.program(batch_size, dims=dims)
        exp = self._exported.get(program.jaxexport_file)
        if exp is None:
            blob = self.read_file(program.jaxexport_file)
            try:
                exp = jax_export.deserialize(bytearray(blob))
            except Exception as exc:  # jax's own words, on one line
                raise ArtifactError(
                    f"{self.location.display(program.jaxexport_file)}: cannot deserialize: {exc}"
                ) from None
            self._exported[program.jaxexport_file] = exp
        return exp

    def call_arguments(
        self, inputs: Mapping[str, Any], batch_size: int | None = None, *,
        dims: Mapping[str, int] | None = None,
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """`(args, kwargs)` for `self.exported(batch_size).call(*args, **kwargs)`: the stored
        parameters and `inputs` (by input name, used as given: no dtype or shape checks) in the
        pytree the program was exported with, zeros for leaves jax dropped.

        For tools that need the raw results of one program: every non-token result of
        `program(batch_size)`, in order, check outputs included. To run the model, use `call`
        (inputs checked, program chosen by their batch size, check failures raised).
        """
        program = self.program(batch_size, dims=dims)
        exp = self.exported(batch_size, dims=dims)
        args, kwargs = exp.in_tree.unflatten(self._leaves(exp, program, inputs))
        return args, kwargs

    def _leaves(
        self, exp: jax_export.Exported, program: manifest_pb2.Program,
        inputs: Mapping[str, np.ndarray] | None,
    ) -> list[Any]:
        """Every leaf of `(params, *inputs)` in flatten order: stored parameters, the given
        inputs (None: None leaves), zeros for leaves jax dropped (`binding.leaves`)."""
        return binding.leaves(self.manifest, program, exp.in_avals, self._parameters, inputs)

    def mesh(self) -> jax.sharding.Mesh | None:
        """The device mesh of a sharded artifact (`nr_devices` > 1) over this process's first
        `nr_devices` devices, or None for a single-device artifact. On CPU the device count is
        raised while jax has not started its backend; `sharding.DeviceCountError` (one line
        saying how to start the process) when the devices cannot be had."""
        if not self.manifest.HasField("mesh"):
            return None
        mesh = self.manifest.mesh
        devices = sharding_io.require_devices(
            self.manifest.nr_devices,
            f"{self.name} (sharded over mesh {sharding_io.describe_mesh(mesh)})")
        return sharding_io.jax_mesh(mesh, devices)

    def leaf_shardings(self, mesh: jax.sharding.Mesh, batch_size: int | None = None
                       ) -> list[jax.sharding.NamedSharding]:
        """The NamedSharding of every leaf of `(params, *inputs)` (flatten order) of a sharded
        program on `mesh` (`self.mesh()`): each argument's manifest sharding, leaves jax
        dropped replicated. Place `call_arguments` with it (`jax.device_put`)."""
        program = self.program(batch_size)
        exp = self.exported(batch_size)
        by_leaf = {a.leaf_index: a.sharding for a in program.arguments if a.leaf_index >= 0}
        return [sharding_io.named_sharding(mesh, by_leaf.get(i, manifest_pb2.Sharding()))
                for i in range(len(exp.in_avals))]

    def _needs_x64(self) -> bool:
        return any(a.dtype.itemsize == 8 for p in self.manifest.programs
                   for a in [*p.arguments, *p.results] if a.dtype.itemsize)

    def call(
        self, inputs: Mapping[str, Any] | None = None, /, **named: Any
    ) -> dict[str, np.ndarray]:
        """Run the program on inputs given by name; outputs by name (numpy).

        `art.call(x=x)` or `art.call({"x": x})`. With batch sizes, any number of rows up to the
        largest size runs, by the server's rule (`jaxport.artifact.batching`): on the smallest
        exported program that holds them, batched inputs padded with copies of their last row,
        batched outputs cut back to the given rows. A polymorphic artifact runs its polymorphic
        program at the inputs' own sizes, after checking them against the dimensions' rules
        (`DimensionError` names the input, the dimension and the rule). A runtime check
        compiled into the program (checkify) that fires raises `CheckFailedError` carrying
        JAX's `err.get()` text.
        """
        import contextlib

        import jax

        given = {**(inputs or {}), **named}
        declared = {s.name: s for s in self.manifest.inputs}
        unknown = sorted(set(given) - set(declared))
        missing = [n for n in declared if n not in given]
        if unknown or missing:
            raise ArtifactError(
                f"{self.name}: inputs are {list(declared)}"
                + (f"; unknown: {unknown}" if unknown else "")
                + (f"; missing: {missing}" if missing else "")
            )
        arrays: dict[str, np.ndarray] = {}
        for name, spec in declared.items():
            value = np.asarray(given[name])
            want = manifest_mod.numpy_dtype(spec.dtype)
            if value.dtype != want:
                raise ArtifactError(
                    f"input {name!r}: dtype {value.dtype}, the model takes {want} "
                    f"(convert it, e.g. x.astype(np.{want.name}))"
                )
            arrays[name] = value
        if self.polymorphic:
            for spec in declared.values():
                if spec.dim_names and arrays[spec.name].ndim != len(spec.shape):
                    raise ArtifactError(f"input {spec.name!r}: {arrays[spec.name].ndim} "
                                        f"dimensions, the model takes {len(spec.shape)}")
            dims_mod.bind(self.manifest, {n: a.shape for n, a in arrays.items()})
        batch = rows = None
        if self.batch_sizes:
            label = f"model {self.name!r}"
            batched = list(self.manifest.batching.batched_inputs)
            rows = batching.batch_rows(arrays, batched, label)
            batch = batching.program_size(rows, self.batch_sizes, label)
            arrays.update({n: batching.pad_rows(arrays[n], batch) for n in batched})
        program = self.program(batch)
        exp = self.exported(batch)
        mesh = self.mesh()  # a sharded program: its devices first (or one line saying how)
        with jax.enable_x64(True) if self._needs_x64() else contextlib.nullcontext():
            leaves = self._leaves(exp, program, arrays)
            if mesh is not None:
                leaves = jax.device_put(leaves, self.leaf_shardings(mesh, batch))
            args, kwargs = exp.in_tree.unflatten(leaves)
            results = [np.asarray(r) for r in jax.tree.leaves(exp.call(*args, **kwargs))]
        plain = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
        checks = [v for r, v in zip(plain, results, strict=True)
                  if r.role == _RES.RESULT_ROLE_CHECK]
        if checks:
            checks_mod.raise_if_fired(self.manifest.checks, checks)
        cut = set(self.manifest.batching.batched_outputs) if rows != batch else set()
        return {r.name: v[:rows] if r.name in cut else v
                for r, v in zip(plain, results, strict=True)
                if r.role == _RES.RESULT_ROLE_OUTPUT}

    # -- goldens ------------------------------------------------------------------------------

    def labels(self, output: str) -> list[str] | None:
        """The class labels of output `output` (line i of its `labels_file` names class index
        i), or None when it has none. ArtifactError for an unknown output or a file that is
        not UTF-8 text."""
        spec = next((o for o in self.manifest.outputs if o.name == output), None)
        if spec is None:
            known = ", ".join(o.name for o in self.manifest.outputs)
            raise ArtifactError(f"no output {output!r} in {self.location} (outputs: {known})")
        if not spec.labels_file:
            return None
        self.location.resolve(spec.labels_file, f"outputs[{output!r}].labels_file")
        try:
            text = self.read_file(spec.labels_file).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"labels file {spec.labels_file!r} of output {output!r} is "
                                f"not UTF-8 text: {exc}") from None
        return text.splitlines()

    def goldens(self) -> list[Golden]:
        """Every golden case, arrays loaded (bf16 reinterpreted from its raw `.npy` storage)."""
        in_dtypes = {s.name: manifest_mod.numpy_dtype(s.dtype) for s in self.manifest.inputs}
        res_dtypes = {r.name: manifest_mod.numpy_dtype(r.dtype)
                      for p in self.manifest.programs for r in p.results
                      if r.role != _RES.RESULT_ROLE_TOKEN}
        arg_dtypes = {a.name: manifest_mod.numpy_dtype(a.dtype)
                      for p in self.manifest.programs for a in p.arguments
                      if a.role in (_ARG.ARGUMENT_ROLE_PARAMETER, _ARG.ARGUMENT_ROLE_INPUT)}

        def npy(rel: str) -> Any:
            if isinstance(self.location, LocalLocation):
                return self.location.path / rel
            return io.BytesIO(self.read_file(rel))

        def load(paths: Mapping[str, str], types: Mapping[str, np.dtype]) -> dict:
            return {n: goldens_mod.load_npy(npy(rel), types[n]) for n, rel in paths.items()}

        return [
            Golden(case.name, case.batch_size, load(case.inputs, in_dtypes),
                   load(case.outputs, res_dtypes), load(case.check_outputs, res_dtypes),
                   case.expected_check, case.expected_error,
                   load(case.output_cotangents, res_dtypes), load(case.gradients, arg_dtypes),
                   dict(case.dims))
            for case in self.manifest.goldens
        ]
