"""From the user's function to a lowered `jax.export.Exported`.

- validation: `check_inputs` (fixed shapes, supported dtypes), `check_params` (arrays only),
  `check_platforms`; `leaf_infos` lists every leaf of `(params, *inputs)` in jax's flatten order
  and `needs_x64` says whether tracing needs 64-bit mode;
- `prepare_function`: the function actually exported, returning a flat tuple of results, plus
  each result's name and role (checkify support, `jaxport.exporter.checks.apply_checks`, wraps
  this step);
- `lower` / `serialize`: `jax.export` with its failure modes mapped to one-line ExportErrors
  (`describe_trace_error` words a failed trace).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax import export as jax_export
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError
from jaxport.protocol import dtypes

__all__ = [
    "ExportFunction",
    "LeafInfo",
    "check_inputs",
    "check_params",
    "check_platforms",
    "describe_trace_error",
    "leaf_infos",
    "lower",
    "needs_x64",
    "prepare_function",
    "resolve_output_names",
    "serialize",
    "user_location",
]

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
    # `fn` returning the function's own output pytree (a dict, a single array...), which
    # `lower` exports so the deserialized `model.jaxexport` returns what the function returned;
    # its leaves are `fn`'s results in the same order. None when jax cannot serialize that tree
    # (a custom node such as a ModelOutput) or results were added (checks): then the flat tuple.
    tree_fn: Callable[..., Any] | None = None


# --------------------------------------------------------------------------------------------
# validation


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
                    "without dims= (--dim) jaxport exports fixed shapes: give every dimension a "
                    "number (for a batch dimension: dimension 0 and batch_sizes= / "
                    "--batch-sizes 1,8,32), or name it in a (shape, dtype) input and declare "
                    "its sizes with dims= (--dim)"
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
        row = _dtype_row(leaf.dtype, where)
        if isinstance(leaf, jax.Array) and np.dtype(leaf.dtype) == np.dtype(row.numpy):
            return leaf
        return np.asarray(leaf, dtype=row.numpy)

    return jax.tree_util.tree_map_with_path(convert, params)


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


def check_platforms(platforms: Sequence[str]) -> tuple[str, ...]:
    """The platforms to lower for: known names, lower case, each once."""
    plats = tuple(p.strip().lower() for p in platforms if p.strip())
    if not plats:
        raise ExportError("no platform given; use e.g. --platforms cpu")
    for p in plats:
        if p not in _KNOWN_PLATFORMS:
            raise ExportError(f"unknown platform {p!r}; supported: {', '.join(_KNOWN_PLATFORMS)}")
    if len(set(plats)) != len(plats):
        raise ExportError(f"platform listed twice in {list(plats)}")
    return plats


# --------------------------------------------------------------------------------------------
# the exported function


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



def _keyed(path: tuple[Any, ...]) -> bool:
    """Whether an output leaf is named by a key or field (dict, NamedTuple, dataclass)."""
    return any(isinstance(k, jax.tree_util.DictKey | jax.tree_util.GetAttrKey) for k in path)


def resolve_output_names(
    output_names: Sequence[str] | Mapping[str, str] | None,
    derived: list[str],
    paths_leaves: Sequence[tuple[Any, Any]],
    fn_name: str,
) -> list[str]:
    """The output names, in flatten order, from what the caller gave.

    - None: the derived names (dict keys / NamedTuple and dataclass fields, joined by `.`;
      `output_<i>` for tuple positions; `output` for a single array);
    - a mapping `{derived name: new name}`: renames those outputs, the others keep theirs;
    - a sequence: one name per output in FLATTEN order (jax sorts dict keys). Giving a keyed
      output's own key at another position would silently mislabel it (e.g. `score, probs,
      logits` for `{"logits", "probs", "score"}`), so that is refused, naming both orders.
    """
    if output_names is None:
        return list(derived)
    if isinstance(output_names, Mapping):
        unknown = [k for k in output_names if k not in derived]
        if unknown:
            raise ExportError(
                f"output rename {unknown[0]}={output_names[unknown[0]]}: {fn_name} has no output "
                f"{unknown[0]!r}; its outputs are {', '.join(derived)}"
            )
        for new in output_names.values():
            if not isinstance(new, str) or not new:
                raise ExportError(f"output names must be non-empty strings, got {new!r}")
        return [output_names.get(d, d) for d in derived]
    names = list(output_names)
    if not names:
        return list(derived)
    if any(not isinstance(n, str) or not n for n in names):
        raise ExportError(f"output names must be non-empty strings, got {names}")
    if len(names) != len(derived):
        raise ExportError(
            f"{len(names)} output names given ({', '.join(names)}) but {fn_name} returns "
            f"{len(derived)} arrays ({', '.join(derived)})"
        )
    keyed = {d: i for i, (d, (path, _)) in enumerate(zip(derived, paths_leaves, strict=True))
             if _keyed(path)}
    moved = [n for i, n in enumerate(names) if n in keyed and keyed[n] != i]
    if moved:
        raise ExportError(
            f"output names {', '.join(names)} would mislabel {fn_name}'s outputs: they are "
            f"named by key, in the order {', '.join(derived)} (jax sorts dict keys), and "
            f"{moved[0]!r} is not at its position; omit --output (outputs are named by their "
            f"keys) or rename with --output KEY=NAME (output_names={{key: name}})"
        )
    return names


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    import jaxport.artifact

    here = Path(__file__).resolve().parent
    dirs = {str(here), str(Path(jaxport.artifact.__file__).resolve().parent),
            str(Path(jax.__file__).resolve().parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError):
            dirs.add(str(Path(sysconfig.get_paths()[key]).resolve()))
    return tuple(d + os.sep for d in dirs)


def user_location(exc: BaseException) -> str | None:
    """`file:line` of the innermost traceback frame in the user's own code, if any.

    Frames of jax, jaxport, the standard library and installed packages (site-packages:
    flax, optax...) are skipped: what is left is the model's source.
    """
    libs = _library_dirs()
    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<"):
            resolved = str(Path(filename).resolve())
            if not resolved.startswith(libs) and "site-packages" not in resolved:
                found = (resolved, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    path, line = found
    with contextlib.suppress(ValueError):
        path = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    return f"{path}:{line}"


def describe_trace_error(exc: BaseException, fn_name: str, params: Any) -> ExportError:
    """A failed trace or lowering of `fn_name` as one line, with the likely fix.

    The line ends with the user's file:line where the error was raised (`user_location`);
    `jaxport export --verbose` prints the whole traceback too.
    """
    where = user_location(exc)
    error = _describe_trace_error(exc, fn_name, params)
    if where:
        error = ExportError(f"{error} (raised at {where})")
    return error


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
    if type(exc).__name__ == "ScopeCollectionNotFound":  # flax.errors, without importing flax
        m = re.search(r'from collection "([^"]+)"', first)
        top = params if not isinstance(params, dict) else sorted(map(str, params))
        return ExportError(
            f"calling {fn_name}(params, *inputs) failed: the Linen variables have no "
            f"{m.group(1) if m else '?'!r} collection (params top level: {top}); model.apply "
            "takes {'params': ..., 'batch_stats': ...}: from a TrainState checkpoint pass "
            "--params-path params,batch_stats (one path per collection), or give only params "
            "and call model.apply({'params': params}, x) in the function"
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
    output_names: Sequence[str] | Mapping[str, str] | None = None,
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
        raise describe_trace_error(exc, fn_name, params) from None
    paths_leaves = jax.tree_util.tree_flatten_with_path(out_shape)[0]
    if not paths_leaves:
        raise ExportError(
            f"{fn_name} returns no arrays; it must return an array or a pytree of arrays"
        )
    derived = [_output_name(p) for p, _ in paths_leaves]
    names = resolve_output_names(output_names, derived, paths_leaves, fn_name)
    if len(set(names)) != len(names):
        raise ExportError(f"output names must be unique, got {names}")
    for name, (_, leaf) in zip(names, paths_leaves, strict=True):
        _dtype_row(leaf.dtype, f"output {name!r}")

    def flat_fn(p: Any, *xs: Any) -> tuple[Any, ...]:
        return tuple(jax.tree.leaves(fn(p, *xs)))

    flat_fn.__name__ = getattr(fn, "__name__", "model")
    out_tree = jax.tree_util.tree_structure(out_shape)
    return ExportFunction(
        tree_fn=fn if _serializable(out_tree) else None,
        fn=flat_fn,
        output_names=names,
        result_names=list(names),
        result_roles=[_RES.RESULT_ROLE_OUTPUT] * len(names),
        result_checks=[None] * len(names),
    )


def _serializable(treedef: Any) -> bool:
    """Whether `Exported.serialize` can store this output tree: None, tuples, lists, dicts
    with string keys and nodes registered with `jax.export.register_pytree_node_serialization`."""
    from jax._src.export import _export

    node = treedef.node_data()
    if node is not None:
        kind = node[0]
        if kind is dict:
            if not all(isinstance(k, str) for k in node[1]):
                return False
        elif kind not in (type(None), tuple, list) and kind not in _export.serialization_registry:
            return False
    return all(_serializable(c) for c in treedef.children())


# --------------------------------------------------------------------------------------------
# lowering


def lower(
    export_fn: ExportFunction,
    params: Any,
    inputs: Mapping[str, jax.ShapeDtypeStruct],
    platforms: Sequence[str],
    fn_name: str,
    allow_custom_calls: Sequence[str] = (),
    shardings: tuple[Any, Any] | None = None,
) -> jax_export.Exported:
    """`jax.export.export(jax.jit(fn))` with its failure modes mapped to ExportErrors.

    `allow_custom_calls` names custom-call targets outside jax's guaranteed-stable list that
    may be exported anyway (`DisabledSafetyCheck.custom_call`). `shardings` is jit's
    `(in_shardings, out_shardings)` of a sharded export (`jaxport.exporter.sharding`)."""
    params_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    disabled = [jax_export.DisabledSafetyCheck.custom_call(t) for t in allow_custom_calls]
    jit_kwargs = {} if shardings is None else {"in_shardings": shardings[0],
                                                 "out_shardings": shardings[1]}
    # The function's own output tree when it has one jax can serialize (same results, same
    # order); sharded programs keep the flat tuple their out_shardings describe.
    fn = export_fn.tree_fn if export_fn.tree_fn is not None and shardings is None \
        else export_fn.fn
    try:
        return jax_export.export(jax.jit(fn, **jit_kwargs), platforms=tuple(platforms),
                                 disabled_checks=disabled)(params_spec, *inputs.values())
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
            flags = " ".join(f"--allow-custom-call {t}" for t in targets) or \
                "--allow-custom-call TARGET"
            raise ExportError(
                f"{fn_name} uses custom call target(s) {', '.join(targets) or '(unnamed)'} "
                "outside jax's compatibility guarantee; a consumer's runtime must register the "
                f"same kernel to run it: if yours will, pass {flags} "
                "(allow_custom_calls=), else use standard jax ops"
            ) from None
        if "was exported for platforms" in text or "Unknown platform" in text.lower():
            raise ExportError(
                f"cannot lower for platforms {list(platforms)}: {text.splitlines()[0]}"
            ) from None
        raise describe_trace_error(exc, fn_name, params) from None
    except ExportError:
        raise
    except Exception as exc:
        raise describe_trace_error(exc, fn_name, params) from None


def serialize(exported: jax_export.Exported, vjp_order: int = 0) -> bytes:
    """`Exported.serialize(vjp_order)`, explaining a missing flatbuffers install and a function
    jax cannot differentiate in one line each."""
    try:
        return bytes(exported.serialize(vjp_order=vjp_order))
    except ImportError as exc:
        raise ExportError(
            f"cannot write model.jaxexport: {str(exc).splitlines()[0]} "
            "(flatbuffers is not a jax dependency: pip install flatbuffers)"
        ) from None
    except Exception as exc:
        if not vjp_order:
            raise
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ExportError(
            f"cannot serialize with vjp_order {vjp_order} (--vjp-order): jax could not export "
            f"the derivative: {type(exc).__name__}: {first}"
        ) from None
