"""`export()`: a JAX function + params pytree -> a jaxport artifact directory.

One pipeline for every export; the unbatched program is simply the one "size" with batch
size 0. Each step lives in the module named for it:

1. `trace`: validate the inputs, params and platforms;
2. for each size: `trace.prepare_function` (the function actually exported, plus checkify
   outputs from `checks.apply_checks`), `trace.lower`, `module.inspect_module`;
3. `program.describe`: the manifest the programs share (header, inputs, outputs, dropped
   leaves, batching), after checking that the programs agree;
4. `write`: a staging directory renamed into place only when complete and fsync'd; in it the
   weights, then per program its files, its `program.build_program` entry and its goldens
   (`goldens.write_goldens`, `check_search.write_check_goldens`); then the golden coverage of the
   checks, the file checksums and manifest.json.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import weights as weights_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import check_search, trace, write
from jaxport.exporter import checks as checks_mod
from jaxport.exporter import goldens as goldens_mod
from jaxport.exporter import labels as labels_mod
from jaxport.exporter import module as module_mod
from jaxport.exporter import params as params_mod
from jaxport.exporter import program as program_mod
from jaxport.exporter import sharding as sharding_mod
from jaxport.exporter import symbolic as symbolic_mod
from jaxport.exporter import train_mode as train_mode_mod
from jaxport.exporter.errors import ExportError
from jaxport.exporter.progress import Progress

__all__ = ["export"]


def export(
    fn: Callable[..., Any],
    params: Any,
    inputs: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    output_names: Sequence[str] | Mapping[str, str] | None = None,
    goldens: int = 2,
    platforms: Sequence[str] = ("cpu",),
    force: bool = False,
    name: str | None = None,
    quiet: bool = False,
    source_function: str = "",
    max_constant_bytes: int = module_mod.DEFAULT_MAX_CONSTANT_BYTES,
    seed: int = 0,
    batch_sizes: Sequence[int] | None = None,
    checks: Sequence[str] | str | None = None,
    check_goldens: Mapping[str, Any] | None = None,
    require_check_goldens: bool = False,
    golden_inputs: Mapping[str, Any] | None = None,
    labels: Mapping[str, str | os.PathLike[str]] | None = None,
    vjp_order: int = 0,
    allow_custom_calls: Sequence[str] = (),
    calling_convention: int | None = None,
    dims: Mapping[str, Any] | None = None,
    buckets: Mapping[str, Sequence[int]] | None = None,
    padding: Mapping[str, str] | None = None,
    mesh: Mapping[str, int] | Sequence[tuple[str, int]] | None = None,
    shardings: Mapping[str, Any] | None = None,
    allow_train_mode: bool = False,
) -> manifest_pb2.Manifest:
    """Export `fn(params, *inputs)` as a jaxport artifact in `out_dir`; returns its manifest.

    `params` is any pytree of arrays: plain dicts/lists are stored as they are; a Flax
    `FrozenDict`, an NNX module or `nnx.State`, a dataclass or any other registered pytree is
    stored as plain nested dicts keyed by key path, and `fn` still receives the original
    structure (RNG state is not stored: see jaxport.exporter.params).

    `inputs` maps each input name to a `jax.ShapeDtypeStruct` with a fixed shape, in the
    order `fn` takes them. Raises ExportError (one line) for every user mistake.

    Outputs are named by their dict keys / NamedTuple or dataclass fields (`a.b` when nested,
    `output_<i>` for tuple positions). `output_names` is either a mapping `{key: new name}`
    (renames) or one name per output in flatten order; a list that puts an output's own key at
    another position (jax sorts dict keys) is refused rather than silently mislabelling it.

    Memory: `jax.Array` params (from training or an Orbax restore) are used in place, for the
    weights and the goldens alike; numpy params are copied to the device once for the goldens
    (about one more copy of the parameters) unless their buffers are 64-byte aligned. The
    artifact is fsync'd before it is renamed into `out_dir`: whole or absent after a crash.

    `batch_sizes` (e.g. (1, 8, 32)) exports one fixed-shape program per size: dimension 0 of
    EVERY input is the batch dimension (its value in `inputs` is replaced by each size) and
    every output must have it too. Programs are `model.b<N>.{mlirbc,mlir,jaxexport}`, share
    the weights, and the manifest lists inputs/outputs with -1 for the batch dimension.

    `checks` (e.g. ["user", "index", "nan", "div"]) exports checkify checks as extra results
    and an error table; `check_goldens` ({case: inputs}) adds golden cases, e.g. ones that
    trip each check (see jaxport.exporter.checks). Kinds no golden trips are searched for
    within a bounded budget (`check_search.search_inputs`); `manifest.checks.golden_kinds` lists the
    kinds some golden trips, and each kind none trips is a warning, or with
    `require_check_goldens` an error. `goldens=0` without `check_goldens` writes no goldens.

    `golden_inputs` ({case: {input: array}} or {case: [arrays in input order]}) adds golden
    cases with the caller's own inputs (real data) next to the `goldens` sampled ones; each
    case goes to the program whose input shapes it has.

    `labels` ({output: path of a UTF-8 text file, one class label per line}) copies each file
    into the artifact (`labels/<output>.txt`, checksummed) as that output's `labels_file`; the
    line count must equal the output's last dimension (see jaxport.exporter.labels).

    `vjp_order` (default 0) serializes each `.jaxexport` with that many levels of VJP
    (`Exported.serialize(vjp_order=...)`, recorded as `manifest.vjp_order`), so a consumer can
    `jax.grad` the loaded program (`jaxport.artifact.open(dir).exported().call`) up to that
    order; 0 artifacts refuse differentiation with jax's "No VJP is available".

    `allow_custom_calls` (e.g. ["my_ffi_kernel"]) exports custom-call targets outside jax's
    guaranteed-stable list (`DisabledSafetyCheck.custom_call`); they are recorded in
    `manifest.allowed_custom_calls` and a warning says consumers need that kernel. A target
    the programs do not call is refused (a typo would otherwise go unnoticed).

    `calling_convention` (default: jax's) lowers `@main` with that
    `Exported.calling_convention_version`, for a consumer whose jax is older; it must be in the
    range this jax can export (`jax.export.minimum/maximum_supported_calling_convention_version`).
    The manifest records it (`versions.calling_convention`) and the export time (`exported_at`,
    UTC; `SOURCE_DATE_EPOCH` when set, for reproducible builds).

    `dims` ({"B": "1..64", "T": "8..2048:8"} or {"T": (8, 2048, 8)}) declares the symbolic
    dimensions named in `inputs`, whose values are then `(shape, dtype)` with names in the
    shape (`{"tokens": (("B", "T"), np.int32)}`): ONE shape-polymorphic program
    (`model.jaxexport`) runs at every admissible size (jaxport.exporter.symbolic).
    `buckets` ({"T": [128, 512]}; `batch_sizes` gives B's) adds one fixed-shape program per
    combination of sizes (`model.B8.T128.*`) for consumers without jax (PJRT, IREE).
    `padding` ({"T": "mask"}) declares that the bool input `mask` marks valid positions along
    T, so a consumer may pad a request along T up to a bucket (the exporter checks that padding
    leaves the outputs unchanged and records `manifest.padding`).

    `mesh` ({"data": 2, "model": 2}, axes in order) exports a sharded program for that many
    devices of this process (on CPU the device count is raised while jax has not started its
    backend; else ExportError says how to start the process), with `shardings` ({key: spec})
    giving PartitionSpecs (a `PartitionSpec`, or text `"data,None"`) of inputs, parameters (by
    manifest name or a glob, `params.layers.*.w`) and outputs, by name; the rest is
    replicated. The manifest records the mesh and every argument's and result's sharding, and
    split parameters are stored in chunks of one shard (jaxport.exporter.sharding). Goldens are
    computed by the unsharded function on one device.

    A model in training mode (dropout drawing random numbers, BatchNorm normalising with the
    batch's statistics) is refused naming the layer (jaxport.exporter.train_mode);
    `allow_train_mode=True` exports it anyway, with a warning and the manifest's
    `dropped_state` saying what was left out and why.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise ExportError(write.exists_message(out_dir))
    if goldens < 0:
        raise ExportError(f"goldens must be >= 0, got {goldens}")
    if isinstance(vjp_order, bool) or not isinstance(vjp_order, int) or vjp_order < 0:
        raise ExportError(f"vjp_order (--vjp-order) must be an integer >= 0, got {vjp_order!r}")
    if golden_inputs and checks:
        raise ExportError("golden_inputs (--golden-inputs) with checks: give the cases as "
                          "check_goldens (--check-goldens), which records their check outputs")
    if require_check_goldens and not checks:
        raise ExportError("require_check_goldens (--require-check-goldens) without checks: it "
                          "only applies with checks (--checks)")
    plats = trace.check_platforms(platforms)
    convention = _calling_convention(calling_convention)
    allowed = _check_allowed_custom_calls(allow_custom_calls)
    label_files = labels_mod.read_labels(labels)
    fn_name = source_function or getattr(fn, "__name__", "function")
    progress = Progress(quiet=quiet)
    shape_plan = _plan(inputs, dims, buckets, batch_sizes, padding, checks=checks,
                       vjp_order=vjp_order, golden_inputs=golden_inputs,
                       check_goldens=check_goldens)
    if shape_plan is not None and mesh is not None:
        raise ExportError("symbolic dimensions (--dim) and a device mesh (--mesh) together are "
                          "not supported: export the sharded model at fixed shapes "
                          "(--batch-sizes for the batch dimension)")
    if shape_plan is None:
        input_specs = trace.check_inputs(inputs)
        sizes = program_mod.check_batch_sizes(batch_sizes, input_specs)
        planned = [(b, specs, {}) for b, specs in program_mod.program_inputs(input_specs, sizes)]
    else:
        input_specs = shape_plan.symbolic_specs()
        planned = [(0, input_specs, {}),
                   *((0, shape_plan.concrete_specs(b), b) for b in shape_plan.buckets)]
    # Framework pytrees (FrozenDict, NNX module/State, dataclasses) become plain nested dicts;
    # `fn` is then called through a wrapper that rebuilds what it expects.
    normalized = params_mod.normalize(params, fn)
    fn = normalized.fn
    for note in normalized.notes:
        progress.step(note)
    host_params = trace.check_params(normalized.params)
    infos = trace.leaf_infos(host_params, input_specs)
    if mesh is None and shardings:
        raise ExportError("shardings (--shard) without a mesh: give one with --mesh (mesh=), "
                          "e.g. --mesh data=2")
    mesh_plan = sharding_mod.plan(mesh, shardings, infos) if mesh is not None else None
    # 64-bit leaves need x64 for tracing, lowering AND computing goldens; scoped, so the
    # caller's process keeps its own setting.
    with jax.enable_x64(True) if trace.needs_x64(infos) else contextlib.nullcontext(), \
            convention:
        lowered = [
            _lower(fn, host_params, batch_size, specs, output_names=output_names,
                   platforms=plats, fn_name=fn_name, checks=checks,
                   max_constant_bytes=max_constant_bytes, progress=progress,
                   vjp_order=vjp_order, allow_custom_calls=allowed,
                   polymorphic=shape_plan is not None and not bucket, dims=bucket,
                   mesh_plan=mesh_plan)
            for batch_size, specs, bucket in planned
        ]
        manifest = program_mod.describe(
            lowered, input_specs, fn_name=fn_name, source_function=source_function,
            name=name or (out_dir.parent.name if out_dir.name.isdigit() else out_dir.name),
            plan=shape_plan,
        )
        manifest.vjp_order = vjp_order
        findings = train_mode_mod.random_layers(
            normalized.fn_with_rng or (lambda _rng, p, *xs: fn(p, *xs)), normalized.rng_paths,
            normalized.rng_values, host_params, input_specs)
        findings += train_mode_mod.stats_layers(
            [d.name for d in manifest.dropped_leaves], normalized.running_stats,
            [o.name for o in manifest.outputs],
            [i.name for i in infos if i.kind == "parameter"])
        for warning in train_mode_mod.check(findings, fn_name, allow_train_mode):
            progress.warn(warning)
        train_mode_mod.record(manifest, findings)
        if mesh_plan is not None:
            manifest.mesh.CopyFrom(mesh_plan.message)
        manifest.exported_at = _exported_at()
        if allowed:
            used = {t for low in lowered for t in low.module.custom_call_targets}
            unused = [t for t in allowed if t not in used]
            if unused:
                raise ExportError(
                    f"--allow-custom-call {unused[0]}: {fn_name} has no custom call to "
                    f"{unused[0]!r} (its custom calls: {', '.join(sorted(used)) or 'none'})")
            manifest.allowed_custom_calls.extend(allowed)
            progress.warn(
                f"custom call target(s) {', '.join(allowed)} are outside jax's compatibility "
                "guarantee (exported with --allow-custom-call): consumers need that kernel "
                "registered under the same name (e.g. jax.ffi.register_ffi_target) to run this "
                "artifact, and no jax or StableHLO version promise covers it")
        if shape_plan is not None and shape_plan.padding:
            goldens_mod.check_padding(fn_name, lowered[0], host_params, shape_plan, manifest,
                                      seed)
            manifest.padding.extend(manifest_pb2.Padding(dim=d, mask_input=m)
                                    for d, m in shape_plan.padding.items())
        for warning in labels_mod.check_labels(manifest, label_files):
            progress.warn(warning)
        kept = set(lowered[0].exported.module_kept_var_idx)  # the same in every program
        param_idx = [i.leaf_index for i in infos if i.kind == "parameter"]
        if param_idx and not kept.intersection(param_idx):
            progress.warn(
                f"{fn_name} uses none of its {len(param_idx)} parameter(s): all are dropped "
                "and the artifact has no weights; does the function read its params argument "
                "(and not weights closed over from elsewhere)?")

        with write.staging_dir(out_dir, force) as tmp, write.background() as pool:
            weights = write.write_weights(tmp, infos, host_params, kept, progress, pool,
                                          mesh_plan.shard_shapes(infos) if mesh_plan else None)
            # The weights reach the disk while goldens are computed; the final pass is cheap.
            weights_synced = pool.submit(write.fsync_tree, tmp / weights_mod.WEIGHTS_DIR)
            # Goldens run the function: params go to the device once, for every case.
            device_params = goldens_mod.params_on_device(host_params) \
                if goldens or check_goldens or golden_inputs else host_params
            used: set[str] = set()
            for low in lowered:
                write.write_program_files(tmp, low)
                manifest.programs.append(program_mod.build_program(low, weights, shape_plan))
                if goldens and low.polymorphic:
                    assert shape_plan is not None
                    goldens_mod.write_sized_goldens(tmp, manifest, low, device_params,
                                                    shape_plan, seed)
                elif goldens:
                    _step(progress, low.batch_size, f"computing {goldens} golden case(s)")
                    goldens_mod.write_goldens(tmp, manifest, low, device_params, goldens, seed)
                    if vjp_order:
                        goldens_mod.write_gradient_golden(tmp, manifest, low,
                                                          manifest.programs[-1], device_params,
                                                          seed)
                if golden_inputs:
                    used |= goldens_mod.write_given_goldens(tmp, manifest, low, device_params,
                                                            golden_inputs)
                check_search.write_check_goldens(
                    tmp, manifest, low.export_fn, fn, device_params, low.inputs, check_goldens,
                    batch_size=low.batch_size,
                    search_seed=seed if goldens or check_goldens else None)
            del device_params
            unused = [c for c in (golden_inputs or {}) if c not in used]
            if unused:
                shapes = "; ".join(
                    ", ".join(f"{n}{list(v.shape)}" for n, v in low.inputs.items())
                    for low in lowered)
                raise ExportError(f"golden input case {unused[0]!r} fits no program: its input "
                                  f"shapes must be exactly those of one ({shapes})")
            check_search.check_golden_coverage(manifest, progress.warn,
                                               require=require_check_goldens)
            labels_mod.write_labels(tmp, manifest, label_files)
            manifest.files.extend(write.file_entries(tmp, pool))
            manifest.schema_version = manifest_mod.schema_version_for(manifest)
            manifest_mod.write(manifest, tmp)
            weights_synced.result()
    for path in write.refresh_indices(out_dir):
        progress.step(f"updated {path}")
    return manifest


def _lower(
    fn: Callable[..., Any],
    params: Any,
    batch_size: int,
    inputs: dict[str, jax.ShapeDtypeStruct],
    *,
    output_names: Sequence[str] | Mapping[str, str] | None,
    platforms: Sequence[str],
    fn_name: str,
    checks: Sequence[str] | str | None,
    max_constant_bytes: int,
    progress: Progress,
    vjp_order: int = 0,
    allow_custom_calls: Sequence[str] = (),
    polymorphic: bool = False,
    dims: Mapping[str, int] | None = None,
    mesh_plan: sharding_mod.Plan | None = None,
) -> program_mod.Lowered:
    """Trace, lower and inspect `fn` for one size (batch size 0: the unbatched program), the
    shape-polymorphic program or one bucket (`dims`) of it."""
    where = f" (batch size {batch_size})" if batch_size else ""
    if dims:
        where = f" (bucket {', '.join(f'{k}={v}' for k, v in dims.items())})"
        progress.step(f"tracing and lowering {fn_name} for bucket "
                      f"{', '.join(f'{k}={v}' for k, v in dims.items())}")
    _step(progress, batch_size, f"tracing and lowering {fn_name}")
    export_fn = trace.prepare_function(fn, params, inputs, output_names, fn_name)
    export_fn = checks_mod.apply_checks(export_fn, fn, params, inputs, checks)
    infos = trace.leaf_infos(params, inputs)
    shardings = None if mesh_plan is None else mesh_plan.jit_shardings(
        export_fn, params, inputs, infos, batch_size)
    exported = trace.lower(export_fn, params, inputs, platforms, fn_name, allow_custom_calls,
                           shardings)
    text = exported.mlir_module()
    info = module_mod.inspect_module(text, what=fn_name + where,
                                     max_constant_bytes=max_constant_bytes,
                                     polymorphic=polymorphic)
    return program_mod.Lowered(
        batch_size=batch_size, inputs=inputs, infos=infos,
        mesh=None if mesh_plan is None else mesh_plan.mesh,
        export_fn=export_fn, exported=exported, text=text, module=info,
        serialized=trace.serialize(exported, vjp_order), polymorphic=polymorphic,
        dims=dict(dims or {}),
    )


def _plan(inputs: Mapping[str, Any], dims: Mapping[str, Any] | None,
          buckets: Mapping[str, Sequence[int]] | None, batch_sizes: Sequence[int] | None,
          padding: Mapping[str, str] | None, **refused: Any) -> symbolic_mod.Plan | None:
    """The symbolic-dimension plan of an export with `dims` (None without): `batch_sizes` are
    then the bucket sizes of `B`; what is not built for polymorphic programs is refused."""
    if not dims:
        if buckets or padding:
            raise ExportError(f"{'buckets (--buckets)' if buckets else 'padding (--pad)'} "
                              "without symbolic dimensions: declare them with dims= (--dim), "
                              "e.g. --dim T=8..2048:8")
        return None
    flags = {"checks": "--checks", "vjp_order": "--vjp-order",
             "golden_inputs": "--golden-inputs", "check_goldens": "--check-goldens"}
    for key, value in refused.items():
        if value:
            raise ExportError(f"{flags[key]} ({key}=) with symbolic dimensions (--dim) is not "
                              "built: export without it, or with fixed shapes")
    buckets = dict(buckets or {})
    if batch_sizes is not None:
        if "B" in buckets:
            raise ExportError("--batch-sizes and --buckets B=... both give B's bucket sizes; "
                              "give one")
        buckets["B"] = list(batch_sizes)
        if "B" not in dims:
            raise ExportError("--batch-sizes with symbolic dimensions gives the bucket sizes of "
                              "the dimension B, which has no --dim; add --dim B=MIN..MAX or use "
                              "--buckets")
    return symbolic_mod.plan(inputs, dims, buckets, padding)


def _calling_convention(version: int | None) -> contextlib.AbstractContextManager[Any]:
    """A context in which jax lowers with calling convention `version` (None: jax's default)."""
    if version is None:
        return contextlib.nullcontext()
    from jax import export as jax_export
    from jax._src import config as jax_config  # the flag's own context manager (thread-local)

    low = jax_export.minimum_supported_calling_convention_version
    high = jax_export.maximum_supported_calling_convention_version
    if isinstance(version, bool) or not isinstance(version, int) or not low <= version <= high:
        raise ExportError(
            f"calling convention {version!r} (--calling-convention) is outside the range jax "
            f"{jax.__version__} can export: {low}..{high}; an older consumer needs an older "
            "jax to export for it")
    return jax_config.jax_export_calling_convention_version(version)


def _exported_at() -> str:
    """Now in UTC (manifest `exported_at`), or SOURCE_DATE_EPOCH's time when it is set."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    when = (datetime.datetime.fromtimestamp(int(epoch), datetime.UTC) if epoch.isdigit()
            else datetime.datetime.now(datetime.UTC))
    return when.strftime(manifest_mod.EXPORTED_AT_FORMAT)


def _check_allowed_custom_calls(targets: Sequence[str] | str) -> list[str]:
    """The allowed custom-call target names: a list of distinct non-empty names."""
    if isinstance(targets, str):
        raise ExportError(f"allow_custom_calls must be a list of target names, got the string "
                          f"{targets!r} (write [{targets!r}])")
    names = list(targets)
    for t in names:
        if not isinstance(t, str) or not t.strip() or t != t.strip():
            raise ExportError(f"--allow-custom-call {t!r}: expected a custom-call target name, "
                              "e.g. --allow-custom-call my_ffi_kernel")
    if len(set(names)) != len(names):
        dup = next(t for t in names if names.count(t) > 1)
        raise ExportError(f"--allow-custom-call {dup}: given twice")
    return names


def _step(progress: Progress, batch_size: int, message: str) -> None:
    """Announce a step of one program of a batched export (`... for batch size N`).

    The unbatched program's steps are not announced (its weights' byte progress is): a
    `jaxport export` that fails prints exactly one stderr line, its error, and tracing is where
    most user mistakes surface.
    """
    if batch_size:
        progress.step(f"{message} for batch size {batch_size}")
