"""Params as the artifact stores them: plain nested dicts, whatever the model was given.

A model's params arrive as whatever its framework uses: plain dicts and lists, a Flax
`FrozenDict`, an NNX module or `nnx.State` (whose leaves are `nnx.Variable`s), a dataclass
or any other registered pytree. The exported program must not depend on those Python types (a
C++ consumer, the bridge and `jax.export.deserialize` have none of them; jax cannot even
serialize a treedef holding `nnx.Param`), so `normalize` turns them into plain nested dicts
keyed by each leaf's key path (`{"lin": {"kernel": ...}}`), and wraps the function so it is
still called with the structure it expects, rebuilt from those dicts inside the trace.

RNG state (an NNX module's `nnx.Rngs`, `nnx.Dropout(rngs=...)`, or any PRNG key array, with
the `count` beside a stream's `key` in NNX state restored from Orbax as plain dicts) is not a
weight: it is dropped from the artifact with a note, and restored, as the values it had, for
the call (a model that reads it is in training mode: jaxport.exporter.train_mode).

Params that are already plain (dicts with string keys, lists, tuples, arrays) are used as
they are, so their manifest names and key paths do not change.

`select` picks a subtree (`--params-path params` of a TrainState checkpoint); `load_msgpack`
reads a `flax.serialization` file (e.g. Hugging Face's `flax_model.msgpack`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jaxport.exporter.errors import ExportError

__all__ = ["Normalized", "load_msgpack", "normalize", "select"]


@dataclass
class Normalized:
    """`params` as the artifact stores them and `fn` called with the caller's structure."""

    params: Any
    fn: Callable[..., Any]
    notes: list[str] = field(default_factory=list)
    # The RNG state leaves left out of `params` (dotted key paths) and their values.
    rng_paths: list[str] = field(default_factory=list)
    rng_values: list[Any] = field(default_factory=list)
    # `fn_with_rng(rng_values, params, *inputs)`: `fn` with the RNG leaves as arguments, so a
    # trace can tell whether they are read (jaxport.exporter.train_mode).
    fn_with_rng: Callable[..., Any] | None = None
    # Dotted key paths (in `params`) of NNX `BatchStat` variables: running statistics.
    running_stats: list[str] = field(default_factory=list)


def _is_plain(tree: Any) -> bool:
    if isinstance(tree, dict) and type(tree) is dict:
        return all(isinstance(k, str) for k in tree) and all(map(_is_plain, tree.values()))
    if type(tree) in (list, tuple):
        return all(map(_is_plain, tree))
    if tree is None:
        return True
    # Anything jax treats as a leaf is plain; any other registered node (FrozenDict, NNX
    # module/state/Variable, dataclass, NamedTuple...) needs normalising.
    leaves = jax.tree_util.tree_leaves(tree)
    return len(leaves) == 1 and leaves[0] is tree


def _nnx() -> Any:
    """`flax.nnx` if the caller's process already imported it (never imported here)."""
    if "flax.nnx" not in sys.modules:
        return None
    return sys.modules["flax.nnx"]


def _key_str(key: Any) -> str:
    if isinstance(key, jax.tree_util.DictKey):
        return str(key.key)
    if isinstance(key, jax.tree_util.SequenceKey):
        return str(key.idx)
    if isinstance(key, jax.tree_util.GetAttrKey):
        return key.name
    if isinstance(key, jax.tree_util.FlattenedIndexKey):
        return str(key.key)
    return str(getattr(key, "key", key))


def _is_rng(leaf: Any, variable: Any, nnx: Any) -> bool:
    if nnx is not None and variable is not None and isinstance(variable, nnx.RngState):
        return True
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def normalize(params: Any, fn: Callable[..., Any]) -> Normalized:
    """Plain nested-dict params for the artifact, and `fn` wrapped to take them.

    The wrapped function rebuilds the original pytree (same treedef, the RNG leaves put back
    as the values they had) and calls `fn(original_params, *inputs)`.
    """
    if _is_plain(params) and not any(_is_rng(leaf, None, None)
                                     for leaf in jax.tree_util.tree_leaves(params)):
        return Normalized(params, fn)
    nnx = _nnx()
    is_var = (lambda x: isinstance(x, nnx.Variable)) if nnx is not None else None
    # Names come from the tree with each NNX Variable as one node (so `lin.kernel`, not
    # `lin.kernel.value`); the leaves from the full flatten, which is what unflatten takes.
    flat, treedef = jax.tree_util.tree_flatten(params)
    named: list[tuple[tuple[str, ...], Any, Any]] = []  # (path, leaf, owning Variable or None)
    for path, node in jax.tree_util.tree_flatten_with_path(params, is_leaf=is_var)[0]:
        base = tuple(_key_str(k) for k in path)
        sub = jax.tree_util.tree_flatten_with_path(node)[0] if node is not None else []
        variable = node if is_var is not None and is_var(node) else None
        if len(sub) == 1:
            named.append((base, sub[0][1], variable))
        else:
            named.extend((base + tuple(_key_str(k) for k in p), leaf, variable)
                         for p, leaf in sub)
    if len(named) != len(flat):
        raise ExportError(f"internal: cannot name the leaves of a {type(params).__name__} "
                          "params pytree")
    # An RNG stream restored from a checkpoint of NNX state (`nnx.split` + Orbax) is plain
    # dicts: its `key` is a PRNG key array, and the `count` beside it is RNG state too.
    streams = {path[:path.index("key")] for path, leaf, variable in named
               if "key" in path and _is_rng(leaf, variable, nnx)}
    plain: dict[str, Any] = {}
    kept: list[tuple[int, tuple[str, ...]]] = []
    fixed: dict[int, Any] = {}
    dropped: list[str] = []
    stats: list[str] = []
    batch_stat = getattr(nnx, "BatchStat", None) if nnx is not None else None
    seen: dict[tuple[str, ...], int] = {}
    for i, (path, leaf, variable) in enumerate(named):
        if _is_rng(leaf, variable, nnx) or ("count" in path
                                            and path[:path.index("count")] in streams):
            fixed[i] = leaf
            dropped.append(".".join(path) or "(root)")
            continue
        if not path:
            path = ("params",)
        if path in seen:
            raise ExportError(f"params leaves {seen[path]} and {i} of the "
                              f"{type(params).__name__} both map to key path {'.'.join(path)}")
        seen[path] = i
        node = plain
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ExportError(f"params key path {'.'.join(path)} runs through a leaf")
            node = child
        if path[-1] in node:
            raise ExportError(f"params key path {'.'.join(path)} is both a leaf and a subtree")
        node[path[-1]] = leaf
        kept.append((i, path))
        if batch_stat is not None and isinstance(variable, batch_stat):
            stats.append(".".join(path))

    def rebuild(p: Any, rng: Sequence[Any] | None = None) -> Any:
        values = dict(zip(fixed, rng, strict=True)) if rng is not None else fixed
        leaves = list(values.get(i) for i in range(len(flat)))
        for i, path in kept:
            value = p
            for part in path:
                value = value[part]
            leaves[i] = value
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def call(p: Any, *inputs: Any) -> Any:
        return fn(rebuild(p), *inputs)

    def call_with_rng(rng: Sequence[Any], p: Any, *inputs: Any) -> Any:
        return fn(rebuild(p, rng), *inputs)

    call.__name__ = call_with_rng.__name__ = getattr(fn, "__name__", "model")
    notes = []
    if dropped:
        shown = ", ".join(dropped[:4]) + (f" and {len(dropped) - 4} more" if len(dropped) > 4
                                          else "")
        notes.append(
            f"params: {len(dropped)} RNG state leaf(s) ({shown}) are not weights: not stored in "
            "the artifact; the exported program uses their current values as constants"
        )
    return Normalized(plain, call, notes, rng_paths=dropped, rng_values=list(fixed.values()),
                      fn_with_rng=call_with_rng, running_stats=stats)


def select(tree: Any, path: str, what: str = "--params-path") -> Any:
    """The subtree at dotted `path` (`params`, `state.params`, `layers.0`) of any checkpoint.

    Each part is a mapping key, an attribute (a TrainState's `params`) or a sequence index.
    Several comma-separated paths give a dict of the subtrees keyed by each path's last part:
    `params,batch_stats` of a TrainState with BatchNorm statistics is the variables dict
    Linen's `model.apply` takes.
    """
    if "," in path:
        paths = path.split(",")
        keys = [p.rpartition(".")[2] for p in paths]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None or not all(keys):
            raise ExportError(f"{what} {path!r}: the paths of a list must end in distinct "
                              f"names (they key the dict the function gets)"
                              + (f"; {dup!r} is there twice" if dup else ""))
        return {k: select(tree, p, what) for k, p in zip(keys, paths, strict=True)}
    node = tree
    done: list[str] = []
    for part in (p for p in path.split(".")):
        if not part:
            raise ExportError(f"{what} {path!r}: empty part; expected e.g. params or a.b")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif (isinstance(node, Sequence) and not isinstance(node, str) and part.isdigit()
              and int(part) < len(node)):
            node = node[int(part)]
        elif not isinstance(node, Mapping | Sequence) and hasattr(node, part) \
                and not part.startswith("_"):
            node = getattr(node, part)
        else:
            where = ".".join(done) or "the top level"
            raise ExportError(f"{what} {path!r}: no {part!r} at {where}; it has "
                              f"{_children(node)}")
        done.append(part)
    return node


def _children(node: Any) -> str:
    if isinstance(node, Mapping):
        keys = [str(k) for k in node]
    elif isinstance(node, Sequence) and not isinstance(node, str):
        keys = [f"0..{len(node) - 1}"] if node else []
    else:
        keys = [_key_str(p[0]) for p in
                jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]
                if p]
    if not keys:
        return f"no children (a {type(node).__name__})"
    shown = ", ".join(sorted(set(keys))[:20])
    return f"keys {shown}" + (" ..." if len(set(keys)) > 20 else "")


def load_msgpack(path: Path, flag: str = "--params") -> Any:
    """A `flax.serialization` msgpack file (HF `flax_model.msgpack`) as nested dicts."""
    try:
        from flax import serialization
    except ImportError:
        raise ExportError(
            f"{flag} {path}: reading .msgpack checkpoints needs flax (pip install flax)"
        ) from None
    try:
        return serialization.msgpack_restore(path.read_bytes())
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ExportError(f"{flag} {path}: not a flax.serialization msgpack file "
                          f"({type(exc).__name__}: {first})") from None
