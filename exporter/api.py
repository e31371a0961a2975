"""`export()`: a JAX function + params pytree -> a jaxport artifact directory.

Pipeline (each step its own function so later features wrap one step, not the whole):
1. `check_inputs` / `check_params`: fixed shapes, supported dtypes, arrays only;
2. `prepare_function`: the function actually exported, returning a flat tuple of results,
   plus each result's name and role (checkify support wraps this step);
3. `lower`: `jax.export` with errors mapped to one-line ExportErrors;
4. `build_program`: the manifest `Program` describing `@main` exactly as lowered;
5. `_write_artifact`: files, weights, goldens and manifest.json into a temporary sibling
   directory, renamed into place only when complete (a crash leaves nothing that looks valid).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export
from jaxport.artifact import goldens as goldens_mod
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import weights as weights_mod
from jaxport.artifact.paths import unique_safe_names
from jaxport.exporter import checks as checks_mod
from jaxport.exporter import module as module_mod
from jaxport.exporter.errors import ExportError
from jaxport.exporter.progress import Progress
from jaxport.protocol import dtypes
from jaxport.protocol.gen.jaxport.v1 import manifest_pb2

__all__ = [
    "ExportFunction", "LeafInfo", "export", "fsync_tree", "leaf_infos", "params_on_device",
    "prepare_function",
]

_ARG = manifest_pb2.ArgumentRole
_RES = manifest_pb2.ResultRole
_KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


@dataclass
class LeafInfo:
    """One pytree leaf of (params, *inputs) in jax's flatten order."""

    leaf_index: int
    kind: str  # "parameter" or "input"
    name: str  # "params.w1" / input name
    key_path: str  # "['w1']" within params; "[i]" (position among inputs) for inputs
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass
class ExportFunction:
    """The function that is lowered, and what its flat results are.

    `fn(params, *inputs)` returns a flat tuple whose order is `@main`'s result order;
    `result_names[i]`, `result_roles[i]` and `result_checks[i]` describe result i. Model
    outputs (role OUTPUT) come first, in `output_names` order.
    """

    fn: Callable[..., tuple[Any, ...]]
    output_names: list[str]
    result_names: list[str]
    result_roles: list[int]
    result_checks: list[manifest_pb2.CheckLeaf | None] = field(default_factory=list)
    # Filled by wrappers that add checks (checkify); exported as manifest.checks.
    checks: manifest_pb2.Checks | None = None


# --------------------------------------------------------------------------------------------
# 1. validation


def _dtype_row(dtype: Any, what: str) -> dtypes.DType:
    try:
        return dtypes.by_numpy(dtype)
    except (dtypes.UnsupportedDtypeError, TypeError) as exc:
        raise ExportError(f"{what}: {exc}") from None


def check_inputs(inputs: Mapping[str, Any]) -> dict[str, jax.ShapeDtypeStruct]:
    """Validate input specs: names, fixed integer shapes, supported dtypes."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise ExportError("inputs must be a non-empty mapping of name -> jax.ShapeDtypeStruct")
    out: dict[str, jax.ShapeDtypeStruct] = {}
    for name, spec in inputs.items():
        if not isinstance(name, str) or not name:
            raise ExportError(f"input name {name!r} must be a non-empty string")
        shape = getattr(spec, "shape", None)
        dtype = getattr(spec, "dtype", None)
        if shape is None or dtype is None:
            raise ExportError(f"input {name!r}: expected a jax.ShapeDtypeStruct, got {spec!r}")
        for d in shape:
            if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
                raise ExportError(
                    f"input {name!r} has symbolic dimension {str(d)!r} in shape {tuple(shape)}; "
                    "jaxport exports fixed shapes only: give every dimension a number"
                )
            if d < 0:
                raise ExportError(f"input {name!r} has a negative dimension in {tuple(shape)}")
        row = _dtype_row(dtype, f"input {name!r}")
        out[name] = jax.ShapeDtypeStruct(tuple(int(d) for d in shape), row.numpy)
    return out


def _param_name(path: tuple[Any, ...]) -> str:
    parts = ["params"]
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.SequenceKey):
            parts.append(str(key.idx))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(key.name)
        else:
            parts.append(str(getattr(key, "key", key)))
    return ".".join(parts)


def check_params(params: Any) -> Any:
    """Params with every leaf an array of a supported dtype, never copied when avoidable.

    A `jax.Array` leaf stays as it is (already on its device: goldens use it in place and its
    bytes are written through a zero-copy host view on CPU); anything else becomes a numpy
    array (a view when it already is one).
    """
    def convert(path: tuple[Any, ...], leaf: Any) -> np.ndarray | jax.Array:
        where = f"params leaf {jax.tree_util.keystr(path) or '(root)'}"
        if isinstance(leaf, jax.ShapeDtypeStruct) or not hasattr(leaf, "dtype"):
            raise ExportError(
                f"{where} is a {type(leaf).__name__}, not an array; params must be a pytree "
                "of arrays (numpy or jax)"
            )
        if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            raise ExportError(f"{where} is a PRNG key array; pass jax.random.key_data(key)")
        row = _dtype_row(leaf.dtype, where)
        if isinstance(leaf, jax.Array) and np.dtype(leaf.dtype) == np.dtype(row.numpy):
            return leaf
        return np.asarray(leaf, dtype=row.numpy)

    return jax.tree_util.tree_map_with_path(convert, params)


def params_on_device(params: Any) -> Any:
    """The params as device arrays, for computing goldens: each leaf transferred at most once.

    jax would otherwise copy every numpy leaf to the device on EVERY call of the jitted function
    (a full extra copy of the parameters per golden case). `jax.Array` leaves are used as they
    are; numpy leaves are put on the device once, zero-copy where the CPU client allows it
    (64-byte aligned buffers) and copied otherwise. Leaves spread over several devices are all
    moved to the default device, so one jitted call can take them.
    """
    leaves, treedef = jax.tree.flatten(params)
    devices = {d for leaf in leaves if isinstance(leaf, jax.Array) for d in leaf.devices()}
    if len(devices) > 1:
        target = jax.devices()[0]
        leaves = [jax.device_put(leaf, target) for leaf in leaves]
    else:
        target = next(iter(devices), None)
        leaves = [leaf if isinstance(leaf, jax.Array) else
                  jax.device_put(leaf, target, may_alias=True) for leaf in leaves]
    return jax.tree.unflatten(treedef, leaves)


def leaf_infos(params: Any, inputs: Mapping[str, jax.ShapeDtypeStruct]) -> list[LeafInfo]:
    """Every leaf of (params, *inputs) in jax's flatten order (= `Exported.in_avals` order)."""
    infos: list[LeafInfo] = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        infos.append(
            LeafInfo(len(infos), "parameter", _param_name(path), jax.tree_util.keystr(path),
                     tuple(leaf.shape), np.dtype(leaf.dtype))
        )
    for i, (name, spec) in enumerate(inputs.items()):
        infos.append(LeafInfo(len(infos), "input", name, f"[{i}]", tuple(spec.shape),
                              np.dtype(spec.dtype)))
    return infos


def needs_x64(infos: Sequence[LeafInfo]) -> bool:
    """Whether any leaf is 64-bit (then JAX must run with jax_enable_x64)."""
    return any(i.dtype.itemsize == 8 for i in infos)


# --------------------------------------------------------------------------------------------
# 2. the exported function


def _output_name(path: tuple[Any, ...]) -> str:
    if not path:
        return "output"
    parts = []
    for n, key in enumerate(path):
        if isinstance(key, jax.tree_util.SequenceKey):
            parts.append(f"output_{key.idx}" if n == 0 else str(key.idx))
        elif isinstance(key, jax.tree_util.DictKey):
            parts.append(str(key.key))
        elif isinstance(key, jax.tree_util.GetAttrKey):
            parts.append(key.name)
        else:
            parts.append(str(key))
    return ".".join(parts)


def _describe_trace_error(exc: BaseException, fn_name: str, params: Any) -> ExportError:
    first = (str(exc).strip().splitlines() or [""])[0]
    not_jittable = (
        jax.errors.ConcretizationTypeError,
        jax.errors.TracerBoolConversionError,
        jax.errors.TracerIntegerConversionError,
        jax.errors.TracerArrayConversionError,
    )
    if isinstance(exc, not_jittable):
        return ExportError(
            f"{fn_name} is not jit-able: {type(exc).__name__}: {first} "
            "(use jnp/lax ops instead of Python control flow or numpy on traced values)"
        )
    if isinstance(exc, KeyError | IndexError | AttributeError):
        top = params if not isinstance(params, dict) else sorted(map(str, params))
        return ExportError(
            f"calling {fn_name}(params, *inputs) failed with {type(exc).__name__}: {first}; "
            f"does the params tree match what the function expects? (params top level: {top})"
        )
    return ExportError(f"tracing {fn_name}(params, *inputs) failed: {type(exc).__name__}: {first}")


def prepare_function(
    fn: Callable[..., Any],
    params: Any,
    inputs: Mapping[str, jax.ShapeDtypeStruct],
    output_names: Sequence[str] | None = None,
    fn_name: str = "",
) -> ExportFunction:
    """Trace `fn` abstractly, name its output leaves, and flatten its results to a tuple."""
    fn_name = fn_name or getattr(fn, "__name__", repr(fn))
    params_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    try:
        out_shape = jax.eval_shape(fn, params_spec, *inputs.values())
    except ExportError:
        raise
    except Exception as exc:
        raise _describe_trace_error(exc, fn_name, params) from None
    paths_leaves = jax.tree_util.tree_flatten_with_path(out_shape)[0]
    if not paths_leaves:
        raise ExportError(
            f"{fn_name} returns no arrays; it must return an array or a pytree of arrays"
        )
    derived = [_output_name(p) for p, _ in paths_leaves]
    if output_names:
        names = list(output_names)
        if len(names) != len(derived):
            raise ExportError(
                f"{len(names)} output names given ({', '.join(names)}) but {fn_name} returns "
                f"{len(derived)} arrays ({', '.join(derived)})"
            )
    else:
        names = derived
    if len(set(names)) != len(names):
        raise ExportError(f"output names must be unique, got {names}")
    for name, (_, leaf) in zip(names, paths_leaves, strict=True):
        _dtype_row(leaf.dtype, f"output {name!r}")

    def flat_fn(p: Any, *xs: Any) -> tuple[Any, ...]:
        return tuple(jax.tree.leaves(fn(p, *xs)))

    flat_fn.__name__ = getattr(fn, "__name__", "model")
    return ExportFunction(
        fn=flat_fn,
        output_names=names,
        result_names=list(names),
        result_roles=[_RES.RESULT_ROLE_OUTPUT] * len(names),
        result_checks=[None] * len(names),
    )


# --------------------------------------------------------------------------------------------
# 3. lowering


def lower(
    export_fn: ExportFunction,
    params: Any,
    inputs: Mapping[str, jax.ShapeDtypeStruct],
    platforms: Sequence[str],
    fn_name: str,
) -> jax_export.Exported:
    """`jax.export.export(jax.jit(fn))` with its failure modes mapped to ExportErrors."""
    params_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    try:
        return jax_export.export(jax.jit(export_fn.fn), platforms=tuple(platforms))(
            params_spec, *inputs.values()
        )
    except NotImplementedError as exc:
        if "host_callbacks" in str(exc):
            raise ExportError(
                f"{fn_name} uses a host callback (jax.pure_callback / io_callback / debug "
                "callback), which cannot be serialized; move it outside the exported function"
            ) from None
        raise ExportError(f"cannot export {fn_name}: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        text = str(exc)
        if "custom calls whose targets have no compatibility guarantees" in text:
            targets = sorted(set(re.findall(r"custom_call @([\w$.\-]+)", text)))
            raise ExportError(
                f"{fn_name} uses custom calls with no compatibility guarantee "
                f"({', '.join(targets) or 'unnamed'}); a consumer's runtime would not have "
                "them: use standard jax ops"
            ) from None
        if "was exported for platforms" in text or "Unknown platform" in text.lower():
            raise ExportError(
                f"cannot lower for platforms {list(platforms)}: {text.splitlines()[0]}"
            ) from None
        raise _describe_trace_error(exc, fn_name, params) from None
    except ExportError:
        raise
    except Exception as exc:
        raise _describe_trace_error(exc, fn_name, params) from None


def serialize(exported: jax_export.Exported) -> bytes:
    """`Exported.serialize()`, explaining a missing flatbuffers install in one line."""
    try:
        return bytes(exported.serialize())
    except ImportError as exc:
        raise ExportError(
            f"cannot write model.jaxexport: {str(exc).splitlines()[0]} "
            "(flatbuffers is not a jax dependency: pip install flatbuffers)"
        ) from None


# --------------------------------------------------------------------------------------------
# 4. manifest program


def _shape_type(shape: Sequence[int], dtype: np.dtype) -> str:
    mlir = dtypes.by_numpy(dtype).mlir
    return "tensor<" + "".join(f"{d}x" for d in shape) + mlir + ">"


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
    exported: jax_export.Exported,
    export_fn: ExportFunction,
    infos: Sequence[LeafInfo],
    info: module_mod.ModuleInfo,
    weight_dirs: Mapping[int, tuple[str, str]],
    *,
    files_prefix: str = "model",
    batch_size: int = 0,
) -> manifest_pb2.Program:
    """Describe `@main` exactly: platform index, tokens, kept leaves; then its results.

    Cross-checks the description against the argument types in the module text, so the
    manifest cannot silently disagree with the program.
    """
    program = manifest_pb2.Program(
        mlirbc_file=f"{files_prefix}.mlirbc",
        mlir_file=f"{files_prefix}.mlir",
        jaxexport_file=f"{files_prefix}.jaxexport",
        batch_size=batch_size,
        custom_call_targets=info.custom_call_targets,
    )
    expected_types: list[str] = []
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
            shape=list(leaf.shape), dtype=manifest_mod.dtype_message(leaf.dtype),
            byte_size=int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize,
        )
        if leaf.kind == "parameter":
            arg.tensorstore_spec_json, arg.sha256 = weight_dirs[leaf_index]
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
    for name, role, check, aval in zip(
        export_fn.result_names, export_fn.result_roles, checks, exported.out_avals, strict=True
    ):
        dt = np.dtype(aval.dtype)
        res = program.results.add(
            index=len(program.results), role=role, name=name, shape=list(aval.shape),
            dtype=manifest_mod.dtype_message(dt),
            byte_size=int(np.prod(aval.shape, dtype=np.int64)) * dt.itemsize,
        )
        if check is not None:
            res.check.CopyFrom(check)
    return program


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
# 5. writing


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot fsync a directory; they give what guarantee they can.
        if not (exc.errno in (errno.EINVAL, errno.ENOTSUP) and path.is_dir()):
            raise
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every file, then every directory (deepest first), under and including `root`.

    The exporter's one durability pass: weights are written without an fsync per chunk file
    (cheaper), and this makes the whole staged artifact durable before it is renamed into
    place, so after a crash the artifact is either complete or absent.
    """
    root = Path(root)
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for filename in filenames:
            _fsync_path(Path(dirpath) / filename)
        _fsync_path(Path(dirpath))


@contextlib.contextmanager
def _staging_dir(out_dir: Path, force: bool) -> Iterator[Path]:
    """A temporary sibling of `out_dir`, moved into place on success and deleted on failure.

    Before the rename everything in it is fsync'd (`fsync_tree`), and after it the parent
    directory, so the rename itself is durable.
    """
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        if out_dir.exists():
            if not force:
                raise ExportError(
                    _exists_message(out_dir)
                )
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.rmdir(old)
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            _fsync_path(out_dir.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
            _fsync_path(out_dir.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _exists_message(out_dir: Path) -> str:
    return f"output directory {out_dir} already exists; pass --force (force=True) to replace it"


def _file_entries(root: Path, pool: ThreadPoolExecutor) -> list[manifest_pb2.FileEntry]:
    """Size and sha256 of every file but the manifest, hashed on `pool`'s threads."""
    paths = [p for p in sorted(root.rglob("*"))
             if p.is_file() and p.relative_to(root).as_posix() != manifest_mod.MANIFEST_FILE]
    return [
        manifest_pb2.FileEntry(path=path.relative_to(root).as_posix(),
                               size_bytes=path.stat().st_size, sha256=digest)
        for path, digest in zip(paths, pool.map(manifest_mod.sha256_file, paths), strict=True)
    ]


def _check_platforms(platforms: Sequence[str]) -> tuple[str, ...]:
    plats = tuple(p.strip().lower() for p in platforms if p.strip())
    if not plats:
        raise ExportError("no platform given; use e.g. --platforms cpu")
    for p in plats:
        if p not in _KNOWN_PLATFORMS:
            raise ExportError(f"unknown platform {p!r}; supported: {', '.join(_KNOWN_PLATFORMS)}")
    if len(set(plats)) != len(plats):
        raise ExportError(f"platform listed twice in {list(plats)}")
    return plats


def export(
    fn: Callable[..., Any],
    params: Any,
    inputs: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    output_names: Sequence[str] | None = None,
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
) -> manifest_pb2.Manifest:
    """Export `fn(params, *inputs)` as a jaxport artifact in `out_dir`; returns its manifest.

    `inputs` maps each input name to a `jax.ShapeDtypeStruct` with a fixed shape, in the
    order `fn` takes them. Raises ExportError (one line) for every user mistake.

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
    trip each check (see jaxport.exporter.checks).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise ExportError(
            _exists_message(out_dir)
        )
    if goldens < 0:
        raise ExportError(f"goldens must be >= 0, got {goldens}")
    plats = _check_platforms(platforms)
    fn_name = source_function or getattr(fn, "__name__", "function")
    progress = Progress(quiet=quiet)
    input_specs = check_inputs(inputs)
    sizes = _check_batch_sizes(batch_sizes, input_specs)
    if sizes:
        return _export_batched(fn, params, input_specs, out_dir, sizes, output_names=output_names,
                               goldens=goldens, platforms=plats, force=force, name=name,
                               progress=progress, source_function=source_function,
                               fn_name=fn_name, max_constant_bytes=max_constant_bytes, seed=seed,
                               checks=checks, check_goldens=check_goldens)
    host_params = check_params(params)
    infos = leaf_infos(host_params, input_specs)
    # 64-bit leaves need x64 for tracing, lowering AND computing goldens; scoped, so the
    # caller's process keeps its own setting.
    with jax.enable_x64(True) if needs_x64(infos) else contextlib.nullcontext():
        export_fn = prepare_function(fn, host_params, input_specs, output_names, fn_name)
        export_fn = checks_mod.apply_checks(export_fn, fn, host_params, input_specs, checks)
        exported = lower(export_fn, host_params, input_specs, plats, fn_name)
        text = exported.mlir_module()
        info = module_mod.inspect_module(text, what=fn_name, max_constant_bytes=max_constant_bytes)
        blob = serialize(exported)
        manifest = manifest_pb2.Manifest(
            schema_version=manifest_mod.SCHEMA_VERSION,
            name=name or (out_dir.parent.name if out_dir.name.isdigit() else out_dir.name),
            source_function=source_function,
            versions=_versions(exported),
            platforms=list(exported.platforms),
            nr_devices=exported.nr_devices,
        )
        if export_fn.checks is not None:
            manifest.checks.CopyFrom(export_fn.checks)
        kept = set(exported.module_kept_var_idx)
        for leaf in infos:
            if leaf.leaf_index not in kept:
                manifest.dropped_leaves.add(leaf_index=leaf.leaf_index, key_path=leaf.key_path,
                                            name=leaf.name, kind=leaf.kind)
        for in_name, spec in input_specs.items():
            manifest.inputs.add(name=in_name, shape=list(spec.shape),
                                dtype=manifest_mod.dtype_message(spec.dtype))
        out_avals = dict(zip(export_fn.result_names, exported.out_avals, strict=True))
        for out_name in export_fn.output_names:
            aval = out_avals[out_name]
            manifest.outputs.add(name=out_name, shape=list(aval.shape),
                                 dtype=manifest_mod.dtype_message(aval.dtype))

        with _staging_dir(out_dir, force) as tmp, _background() as pool:
            (tmp / "model.mlirbc").write_bytes(exported.mlir_module_serialized)
            (tmp / "model.mlir").write_text(text, encoding="utf-8")
            (tmp / "model.jaxexport").write_bytes(blob)
            weight_dirs = _write_weights(tmp, infos, host_params, kept, progress, pool)
            # The weights reach the disk while goldens are computed; the final pass is cheap.
            weights_synced = pool.submit(fsync_tree, tmp / weights_mod.WEIGHTS_DIR)
            manifest.programs.append(
                build_program(exported, export_fn, infos, info, weight_dirs)
            )
            # Goldens run the function: params go to the device once, for every case.
            device_params = params_on_device(host_params) if goldens or check_goldens \
                else host_params
            if goldens:
                _write_goldens(tmp, manifest, export_fn, device_params, input_specs, goldens, seed)
            checks_mod.write_check_goldens(
                tmp, manifest, export_fn, fn, device_params, input_specs, check_goldens
            )
            del device_params
            manifest.files.extend(_file_entries(tmp, pool))
            manifest_mod.write(manifest, tmp)
            weights_synced.result()
    return manifest


def _background() -> ThreadPoolExecutor:
    """Threads for work that overlaps the export's own: checksums, early fsyncs (hashlib and
    fsync release the GIL). Leaving its `with` waits for everything submitted."""
    return ThreadPoolExecutor(max_workers=min(8, max(2, os.cpu_count() or 1)),
                              thread_name_prefix="jaxport-export")


def _write_weights(
    root: Path,
    infos: Sequence[LeafInfo],
    params: Any,
    kept: set[int],
    progress: Progress,
    pool: ThreadPoolExecutor,
) -> dict[int, tuple[str, str]]:
    """Write every kept parameter; returns leaf index -> (tensorstore spec JSON, sha256)."""
    leaves = jax.tree.leaves(params)
    todo = [i for i in infos if i.kind == "parameter" and i.leaf_index in kept]
    stems = unique_safe_names([i.name for i in todo])
    total = sum(leaves[i.leaf_index].nbytes for i in todo)
    progress.start_bytes(f"writing {len(todo)} parameter(s)", total)
    out: dict[int, tuple[str, str]] = {}
    for leaf, stem in zip(todo, stems, strict=True):
        # Zero-copy for numpy leaves and for jax.Arrays on CPU (one leaf at a time elsewhere).
        array = np.asarray(leaves[leaf.leaf_index])
        digest = pool.submit(weights_mod.array_sha256, array)  # while TensorStore writes it
        spec = weights_mod.write_parameter(
            root, f"{weights_mod.WEIGHTS_DIR}/{stem}", array, progress
        )
        out[leaf.leaf_index] = (json.dumps(spec, sort_keys=True), digest.result())
    progress.finish_bytes()
    return out


def _write_goldens(
    root: Path,
    manifest: manifest_pb2.Manifest,
    export_fn: ExportFunction,
    params: Any,
    input_specs: Mapping[str, jax.ShapeDtypeStruct],
    count: int,
    seed: int,
    batch_size: int = 0,
) -> None:
    """Golden cases computed by JAX itself (the jitted function, not the exported program).

    With `batch_size`, cases are named `b<N>_case<i>` and marked for that program.
    """
    jitted = jax.jit(export_fn.fn)
    n_out = len(export_fn.output_names)

    def compute(values: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = jitted(params, *(values[k] for k in input_specs))
        return [np.asarray(r) for r in results[:n_out]]

    specs = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in input_specs.items()}
    for case, ins, outs in goldens_mod.write_cases(
        root, count, specs, compute, export_fn.output_names, seed,
        prefix=f"b{batch_size}_" if batch_size else "",
    ):
        manifest.goldens.add(name=case, inputs=ins, outputs=outs, batch_size=batch_size)


# --------------------------------------------------------------------------------------------
# batching: one fixed-shape program per batch size


def _check_batch_sizes(
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


def _export_batched(
    fn: Callable[..., Any],
    params: Any,
    input_specs: Mapping[str, jax.ShapeDtypeStruct],
    out_dir: Path,
    sizes: Sequence[int],
    *,
    output_names: Sequence[str] | None,
    goldens: int,
    platforms: Sequence[str],
    force: bool,
    name: str | None,
    progress: Progress,
    source_function: str,
    fn_name: str,
    max_constant_bytes: int,
    seed: int,
    checks: Sequence[str] | str | None = None,
    check_goldens: Mapping[str, Any] | None = None,
) -> manifest_pb2.Manifest:
    """`export()` with one program per batch size (dimension 0 of every input and output)."""
    host_params = check_params(params)
    first_infos = leaf_infos(host_params, input_specs)
    lowered = []
    with jax.enable_x64(True) if needs_x64(first_infos) else contextlib.nullcontext():
        for b in sizes:
            specs = {k: jax.ShapeDtypeStruct((b, *v.shape[1:]), v.dtype)
                     for k, v in input_specs.items()}
            progress.step(f"tracing and lowering {fn_name} for batch size {b}")
            export_fn = prepare_function(fn, host_params, specs, output_names, fn_name)
            export_fn = checks_mod.apply_checks(export_fn, fn, host_params, specs, checks)
            exported = lower(export_fn, host_params, specs, platforms, fn_name)
            text = exported.mlir_module()
            info = module_mod.inspect_module(text, what=f"{fn_name} (batch size {b})",
                                             max_constant_bytes=max_constant_bytes)
            lowered.append((b, specs, leaf_infos(host_params, specs), export_fn, exported,
                            text, info, serialize(exported)))

        _, _, infos0, fn0, exp0, _, _, _ = lowered[0]
        checks_mod.require_same_table([low[3].checks for low in lowered], sizes)
        kept = set(exp0.module_kept_var_idx)
        out_shapes: dict[str, tuple[int, ...]] = {}
        for b, _, _, export_fn, exported, _, _, _ in lowered:
            if set(exported.module_kept_var_idx) != kept:
                raise ExportError(
                    f"{fn_name} uses different parameters at batch size {b} than at "
                    f"{sizes[0]}; batched programs must share one set of weights"
                )
            avals = dict(zip(export_fn.result_names, exported.out_avals, strict=True))
            for out_name in export_fn.output_names:
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

        manifest = manifest_pb2.Manifest(
            schema_version=manifest_mod.SCHEMA_VERSION,
            name=name or (out_dir.parent.name if out_dir.name.isdigit() else out_dir.name),
            source_function=source_function,
            versions=_versions(exp0),
            platforms=list(exp0.platforms),
            nr_devices=exp0.nr_devices,
        )
        if fn0.checks is not None:
            manifest.checks.CopyFrom(fn0.checks)
        for leaf in infos0:
            if leaf.leaf_index not in kept:
                manifest.dropped_leaves.add(leaf_index=leaf.leaf_index, key_path=leaf.key_path,
                                            name=leaf.name, kind=leaf.kind)
        for in_name, spec in input_specs.items():
            manifest.inputs.add(name=in_name, shape=[-1, *spec.shape[1:]],
                                dtype=manifest_mod.dtype_message(spec.dtype))
        out_avals = dict(zip(fn0.result_names, exp0.out_avals, strict=True))
        for out_name in fn0.output_names:
            manifest.outputs.add(name=out_name, shape=[-1, *out_shapes[out_name]],
                                 dtype=manifest_mod.dtype_message(out_avals[out_name].dtype))
        manifest.batching.CopyFrom(manifest_pb2.Batching(
            batch_sizes=list(sizes), batched_inputs=list(input_specs),
            batched_outputs=list(fn0.output_names)))

        with _staging_dir(out_dir, force) as tmp, _background() as pool:
            weight_dirs = _write_weights(tmp, infos0, host_params, kept, progress, pool)
            weights_synced = pool.submit(fsync_tree, tmp / weights_mod.WEIGHTS_DIR)
            device_params = params_on_device(host_params) if goldens or check_goldens \
                else host_params
            for b, specs, infos, export_fn, exported, text, info, blob in lowered:
                prefix = f"model.b{b}"
                (tmp / f"{prefix}.mlirbc").write_bytes(exported.mlir_module_serialized)
                (tmp / f"{prefix}.mlir").write_text(text, encoding="utf-8")
                (tmp / f"{prefix}.jaxexport").write_bytes(blob)
                manifest.programs.append(build_program(
                    exported, export_fn, infos, info, weight_dirs, files_prefix=prefix,
                    batch_size=b))
                if goldens:
                    progress.step(f"computing {goldens} golden case(s) for batch size {b}")
                    _write_goldens(tmp, manifest, export_fn, device_params, specs, goldens,
                                   seed, batch_size=b)
                checks_mod.write_check_goldens(tmp, manifest, export_fn, fn, device_params,
                                               specs, check_goldens, batch_size=b)
            del device_params
            checks_mod.check_golden_coverage(manifest)
            manifest.files.extend(_file_entries(tmp, pool))
            manifest_mod.write(manifest, tmp)
            weights_synced.result()
    return manifest
