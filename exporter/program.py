"""What the manifest says about the exported programs: its header, inputs, outputs, dropped
leaves, batching, and one `Program` per lowered `@main` (`build_program`).

An export lowers one program per size: the unbatched program (batch size 0, files
`model.{mlirbc,mlir,jaxexport}`, inputs and outputs with their fixed shapes), or one per batch
size (`model.b<N>.*`; dimension 0 of every input and output is the batch dimension, -1 in the
manifest's inputs/outputs, and `manifest.batching` lists the sizes). `program_inputs` plans them,
`Lowered` is one of them as lowered, and `describe` checks that they agree (same weights, same
check table, outputs batched) and builds the manifest they share.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax import export as jax_export
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import checks as checks_mod
from jaxport.exporter import module as module_mod
from jaxport.exporter.errors import ExportError
from jaxport.exporter.symbolic import Plan
from jaxport.exporter.trace import ExportFunction, LeafInfo
from jaxport.protocol import dtypes

__all__ = ["Lowered", "build_program", "check_batch_sizes", "describe", "program_inputs"]

_ARG = manifest_pb2.ArgumentRole
_RES = manifest_pb2.ResultRole


# --------------------------------------------------------------------------------------------
# sizes: the unbatched program, or one program per batch size


def check_batch_sizes(
    batch_sizes: Sequence[int] | None, input_specs: Mapping[str, jax.ShapeDtypeStruct]
) -> tuple[int, ...]:
    """Validated batch sizes, ascending (empty when not batching)."""
    if batch_sizes is None:
        return ()
    sizes = list(batch_sizes)
    if not sizes:
        raise ExportError("batch sizes are empty; give at least one, e.g. --batch-sizes 1,8,32")
    for b in sizes:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ExportError(f"batch size {b!r} is not a positive integer (got {sizes})")
    if len(set(sizes)) != len(sizes):
        raise ExportError(f"batch size listed twice in {sizes}")
    for in_name, spec in input_specs.items():
        if not spec.shape:
            raise ExportError(
                f"input {in_name!r} is a scalar; with batch sizes dimension 0 of every input "
                "is the batch dimension (give it a leading dimension, e.g. x:f32[1,16])"
            )
    return tuple(sorted(int(b) for b in sizes))


def program_inputs(
    input_specs: Mapping[str, jax.ShapeDtypeStruct], batch_sizes: Sequence[int]
) -> list[tuple[int, dict[str, jax.ShapeDtypeStruct]]]:
    """(batch size, input specs) of each program to export: `[(0, input_specs)]` without
    batch sizes, else one per size with dimension 0 of every input set to it."""
    if not batch_sizes:
        return [(0, dict(input_specs))]
    return [(b, {k: jax.ShapeDtypeStruct((b, *v.shape[1:]), v.dtype)
                 for k, v in input_specs.items()}) for b in batch_sizes]


@dataclass
class Lowered:
    """One program as lowered, with everything written for it."""

    batch_size: int  # 0: the unbatched program
    inputs: dict[str, jax.ShapeDtypeStruct]  # at this batch size
    infos: list[LeafInfo]  # leaves of (params, *inputs) at this batch size
    export_fn: ExportFunction
    exported: jax_export.Exported
    text: str  # exported.mlir_module()
    module: module_mod.ModuleInfo
    serialized: bytes  # exported.serialize()
    # Symbolic dimensions: the one shape-polymorphic program (`polymorphic`), or a fixed-shape
    # bucket program with each dimension's size in it (`dims`).
    polymorphic: bool = False
    dims: dict[str, int] = field(default_factory=dict)
    mesh: jax.sharding.Mesh | None = None  # a sharded program's mesh (jaxport.exporter.sharding)

    @property
    def files_prefix(self) -> str:
        """`model` (unbatched or polymorphic), `model.b<N>`, or `model.B8.T128` for a bucket
        program: the program's files are `<prefix>.mlirbc` etc."""
        if self.dims:
            return "model." + ".".join(f"{k}{v}" for k, v in self.dims.items())
        return f"model.b{self.batch_size}" if self.batch_size else "model"

    @property
    def golden_prefix(self) -> str:
        """Prefix of its golden case names: none (unbatched), `b<N>_` or `B8_T128_`."""
        if self.dims:
            return "_".join(f"{k}{v}" for k, v in self.dims.items()) + "_"
        return f"b{self.batch_size}_" if self.batch_size else ""


# --------------------------------------------------------------------------------------------
# the manifest, less programs, goldens and files


def describe(
    lowered: Sequence[Lowered],
    input_specs: Mapping[str, jax.ShapeDtypeStruct],
    *,
    name: str,
    source_function: str,
    fn_name: str,
    plan: Plan | None = None,
) -> manifest_pb2.Manifest:
    """The manifest every program shares: header, check table, dropped leaves, inputs, outputs
    and (batched) `batching`. Programs, goldens and files are added as they are written.

    Batched programs must agree: the same kept parameters (one set of weights), the same check
    table, and every output batched along dimension 0 with the same non-batch shape. With
    symbolic dimensions (`plan`) the first program is the polymorphic one: inputs and outputs
    get -1 and a name on their symbolic axes, `dimensions` the admissible sizes, and the bucket
    programs must keep the same parameters.
    """
    first = lowered[0]
    if plan is not None:
        _require_same_weights(lowered, fn_name)
    batched = first.batch_size != 0
    checks_mod.require_same_table([low.export_fn.checks for low in lowered],
                                  [low.batch_size for low in lowered])
    kept = set(first.exported.module_kept_var_idx)
    if batched:
        _require_batched_outputs(lowered, kept, fn_name)
    manifest = manifest_pb2.Manifest(
        schema_version=manifest_mod.SCHEMA_VERSION,
        name=name,
        source_function=source_function,
        versions=_versions(first.exported),
        platforms=list(first.exported.platforms),
        nr_devices=first.exported.nr_devices,
    )
    if first.export_fn.checks is not None:
        manifest.checks.CopyFrom(first.export_fn.checks)
    for leaf in first.infos:
        if leaf.leaf_index not in kept:
            manifest.dropped_leaves.add(leaf_index=leaf.leaf_index, key_path=leaf.key_path,
                                        name=leaf.name, kind=leaf.kind)
    if plan is not None:
        manifest.dimensions.extend(d.message() for d in plan.dims.values())
    for in_name, spec in input_specs.items():
        shape = [-1, *spec.shape[1:]] if batched else list(spec.shape)
        entry = manifest.inputs.add(name=in_name, dtype=manifest_mod.dtype_message(spec.dtype))
        _set_shape(entry, shape, plan, f"input {in_name!r}")
    out_avals = dict(zip(first.export_fn.result_names, first.exported.out_avals, strict=True))
    for out_name in first.export_fn.output_names:
        aval = out_avals[out_name]
        shape = [-1, *aval.shape[1:]] if batched else list(aval.shape)
        entry = manifest.outputs.add(name=out_name, dtype=manifest_mod.dtype_message(aval.dtype))
        _set_shape(entry, shape, plan, f"output {out_name!r}")
    if batched:
        manifest.batching.CopyFrom(manifest_pb2.Batching(
            batch_sizes=[low.batch_size for low in lowered], batched_inputs=list(input_specs),
            batched_outputs=list(first.export_fn.output_names)))
    return manifest


def _set_shape(entry: manifest_pb2.TensorSpec | manifest_pb2.Argument | manifest_pb2.Result,
               shape: Sequence[Any], plan: Plan | None, what: str) -> None:
    """`entry.shape`, with -1 and `dim_names` for the axes that are symbolic dimensions."""
    names = plan.dim_names(shape, what) if plan is not None else []
    if any(names):
        entry.dim_names.extend(names)
        entry.shape.extend(-1 if n else int(d) for n, d in zip(names, shape, strict=True))
    else:
        entry.shape.extend(int(d) for d in shape)


def _byte_size(shape: Sequence[Any], dtype: np.dtype) -> int:
    """Bytes of a fixed shape; 0 for a shape with a symbolic axis (its size varies)."""
    if not all(isinstance(d, int | np.integer) for d in shape):
        return 0
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def _require_same_weights(lowered: Sequence[Lowered], fn_name: str) -> None:
    """The bucket programs read their parameters from the polymorphic program's weights. jax
    keeps every argument of a shape-polymorphic program (even unused ones), so a bucket
    program may take fewer parameters and inputs, never others."""
    kept = set(lowered[0].exported.module_kept_var_idx)
    for low in lowered[1:]:
        if not set(low.exported.module_kept_var_idx) <= kept:
            raise ExportError(
                f"{fn_name} uses different parameters in the bucket program {low.dims} than in "
                "the polymorphic program; bucket programs must share one set of weights")


def _require_batched_outputs(lowered: Sequence[Lowered], kept: set[int], fn_name: str) -> None:
    """Batched programs share one set of weights and batch every output along dimension 0."""
    first_size = lowered[0].batch_size
    out_shapes: dict[str, tuple[int, ...]] = {}
    for low in lowered:
        b = low.batch_size
        if set(low.exported.module_kept_var_idx) != kept:
            raise ExportError(
                f"{fn_name} uses different parameters at batch size {b} than at "
                f"{first_size}; batched programs must share one set of weights"
            )
        avals = dict(zip(low.export_fn.result_names, low.exported.out_avals, strict=True))
        for out_name in low.export_fn.output_names:
            shape = tuple(avals[out_name].shape)
            if not shape or shape[0] != b:
                raise ExportError(
                    f"output {out_name!r} has shape {list(shape)} at batch size {b}; with "
                    "batch sizes every output needs the batch dimension first (one row per "
                    "input row), so requests can be batched and split back"
                )
            if out_shapes.setdefault(out_name, shape[1:]) != shape[1:]:
                raise ExportError(
                    f"output {out_name!r} changes its non-batch shape with the batch size "
                    f"({list(out_shapes[out_name])} vs {list(shape[1:])} at {b})"
                )


def _versions(exported: jax_export.Exported) -> manifest_pb2.Versions:
    from jax._src.export import serialization as jax_serialization
    from jax.extend.mlir.dialects import stablehlo

    target = stablehlo.get_version_from_compatibility_requirement(
        stablehlo.StablehloCompatibilityRequirement.WEEK_4
    )
    try:
        own = importlib.metadata.version("jaxport")
    except importlib.metadata.PackageNotFoundError:
        own = "0+unknown"
    return manifest_pb2.Versions(
        jaxport=own,
        jax=jax.__version__,
        jaxlib=importlib.metadata.version("jaxlib"),
        stablehlo_target=str(target),
        calling_convention=exported.calling_convention_version,
        serialization=int(jax_serialization._SERIALIZATION_VERSION),
    )


# --------------------------------------------------------------------------------------------
# one program: @main exactly as lowered


def _shape_type(shape: Sequence[Any], dtype: np.dtype) -> str:
    """`tensor<4x?xf32>`: a symbolic axis is `?`, as the polymorphic module declares it."""
    mlir = dtypes.by_numpy(dtype).mlir
    return "tensor<" + "".join(
        f"{d}x" if isinstance(d, int | np.integer) else "?x" for d in shape) + mlir + ">"


def _platform_index_dtype(info: module_mod.ModuleInfo) -> np.dtype:
    """The element type of `@main`'s platform index argument, as the module declares it.

    jax types the platform index like a dimension variable, i.e. as its default integer:
    int64 when jax_enable_x64 was on during lowering (a 64-bit leaf, or the caller's own
    setting), int32 otherwise. The module is the authority, so read it from there.
    """
    types = info.main_argument_types
    elem = module_mod.scalar_element_type(types[0]) if types else None
    if elem not in ("i32", "i64"):
        raise ExportError(
            f"internal: @main's first argument is {types[:1]}; with several platforms it must "
            "be the platform index, an i32 or i64 scalar"
        )
    return dtypes.by_mlir(elem).numpy


def build_program(
    lowered: Lowered, weights: Mapping[int, tuple[str, str]], plan: Plan | None = None
) -> manifest_pb2.Program:
    """Describe `@main` exactly: platform index, tokens, kept leaves; then its results.

    `weights` maps each stored parameter's leaf index to (tensorstore spec JSON, sha256).
    Cross-checks the description against the argument types in the module text, so the
    manifest cannot silently disagree with the program.
    """
    exported, export_fn, infos, info = (
        lowered.exported, lowered.export_fn, lowered.infos, lowered.module)
    prefix = lowered.files_prefix
    program = manifest_pb2.Program(
        mlirbc_file=f"{prefix}.mlirbc",
        mlir_file=f"{prefix}.mlir",
        jaxexport_file=f"{prefix}.jaxexport",
        batch_size=lowered.batch_size,
        custom_call_targets=info.custom_call_targets,
        polymorphic=lowered.polymorphic,
        dims=lowered.dims,
    )
    shape_plan = plan if lowered.polymorphic else None
    expected_types: list[str] = []
    in_shardings = out_shardings = None
    if lowered.mesh is not None:  # what jax recorded, as the consumer will read it back
        in_shardings = exported.in_shardings_jax(lowered.mesh)
        out_shardings = exported.out_shardings_jax(lowered.mesh)
    if len(exported.platforms) > 1:
        index_dtype = _platform_index_dtype(info)
        program.arguments.add(
            index=len(program.arguments), role=_ARG.ARGUMENT_ROLE_PLATFORM_INDEX,
            name="platform_index", leaf_index=-1, shape=[],
            dtype=manifest_mod.dtype_message(index_dtype), byte_size=index_dtype.itemsize,
        )
        expected_types.append(_shape_type((), index_dtype))
    for n, _ in enumerate(exported.ordered_effects):
        program.arguments.add(index=len(program.arguments), role=_ARG.ARGUMENT_ROLE_TOKEN,
                              name=f"token_{n}", leaf_index=-1)
        expected_types.append("!stablehlo.token")
    for leaf_index in exported.module_kept_var_idx:
        leaf = infos[leaf_index]
        aval = exported.in_avals[leaf_index]
        if tuple(aval.shape) != leaf.shape or np.dtype(aval.dtype) != leaf.dtype:
            raise ExportError(
                f"internal: leaf {leaf.name} is {leaf.dtype}{list(leaf.shape)} but jax lowered "
                f"{aval.dtype}{list(aval.shape)} (is jax_enable_x64 off for a 64-bit leaf?)"
            )
        arg = program.arguments.add(
            index=len(program.arguments),
            role=(_ARG.ARGUMENT_ROLE_PARAMETER if leaf.kind == "parameter"
                  else _ARG.ARGUMENT_ROLE_INPUT),
            name=leaf.name, key_path=leaf.key_path, leaf_index=leaf.leaf_index,
            dtype=manifest_mod.dtype_message(leaf.dtype),
            byte_size=_byte_size(leaf.shape, leaf.dtype),
        )
        _set_shape(arg, leaf.shape, shape_plan, f"{leaf.kind} {leaf.name!r}")
        if leaf.kind == "parameter":
            arg.tensorstore_spec_json, arg.sha256 = weights[leaf_index]
        if in_shardings is not None:
            arg.sharding.CopyFrom(_sharding(in_shardings[leaf_index], len(leaf.shape), arg.name))
        expected_types.append(_shape_type(leaf.shape, leaf.dtype))
    if info.main_argument_types != expected_types:
        raise ExportError(
            f"internal: @main arguments {info.main_argument_types} do not match the manifest "
            f"description {expected_types}"
        )
    if len(export_fn.result_names) != len(exported.out_avals):
        raise ExportError("internal: result names do not match the lowered results")
    for n, _ in enumerate(exported.ordered_effects):
        program.results.add(
            index=len(program.results), role=_RES.RESULT_ROLE_TOKEN, name=f"token_{n}"
        )
    checks = export_fn.result_checks or [None] * len(export_fn.result_names)
    for n, (name, role, check, aval) in enumerate(zip(
        export_fn.result_names, export_fn.result_roles, checks, exported.out_avals, strict=True
    )):
        dt = np.dtype(aval.dtype)
        res = program.results.add(
            index=len(program.results), role=role, name=name,
            dtype=manifest_mod.dtype_message(dt), byte_size=_byte_size(aval.shape, dt),
        )
        _set_shape(res, aval.shape, shape_plan, f"result {name!r}")
        if check is not None:
            res.check.CopyFrom(check)
        if out_shardings is not None:
            res.sharding.CopyFrom(_sharding(out_shardings[n], len(aval.shape), name))
    return program


def _sharding(sharding: jax.sharding.Sharding | None, ndim: int, what: str
              ) -> manifest_pb2.Sharding:
    """The manifest Sharding of one argument or result: its PartitionSpec, one string per
    axis, and the HLO sharding text a C++ consumer reads."""
    if not isinstance(sharding, jax.sharding.NamedSharding):
        raise ExportError(f"internal: {what} has no recorded sharding ({sharding!r}) in a "
                          "sharded program")
    hlo = sharding._to_xla_hlo_sharding(ndim)  # no public accessor; the text is XLA's own
    return manifest_pb2.Sharding(spec=sharding_io.spec_strings(sharding.spec, ndim),
                                 hlo_sharding=str(hlo))
