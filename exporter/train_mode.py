"""Catch a model exported in training mode (or returning its hidden state), before it is served.

A model left in training mode traces fine and verifies (the goldens come from the same
function), but serves wrong answers:

- dropout (or any random sampling) runs with a key fixed at export: every request gets the
  same mask. Found by tracing once: a `random_bits` draw whose key does not come from an input
  (a key the caller passes in is sampling on purpose), or an RNG state leaf (an NNX
  `nnx.Rngs` / `nnx.Dropout(rngs=...)`) that the program reads;
- BatchNorm normalises with the batch's own statistics, so a row's answer depends on the other
  rows of the request: its running statistics (NNX `BatchStat` variables, Linen's
  `batch_stats` collection) are then not read by the program (jax drops them), or the function
  returns their updated values (Linen `mutable=['batch_stats']`).

Each finding is refused in one line naming the layer and how to export in eval mode, unless
the caller opts in (`allow_train_mode=True`, `--allow-train-mode`); the manifest's
`droppedState` then records what was left out and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError

__all__ = ["Finding", "check", "random_layers", "record"]

# Primitives that draw random bits from a key (jax.random.*, lax.rng_bit_generator).
_RANDOM = frozenset({"random_bits", "rng_bit_generator", "rng_uniform", "threefry2x32"})
_EVAL_HINT = {
    "rng": "NNX: call model.eval() before exporting; Linen: deterministic=True / train=False",
    "running_statistics": "NNX: call model.eval() before exporting; Linen: "
                          "use_running_average=True / train=False, without mutable=",
}


@dataclass
class Finding:
    """One layer that runs in training mode."""

    layer: str
    kind: str  # "rng" or "running_statistics"
    leaves: list[str]
    reason: str


def _fixed_draws(jaxpr: Any, from_inputs: set[Any], outer: tuple[str, Any] = ("", None)
                 ) -> Iterator[tuple[str, Any]]:
    """The random draws whose key does not come from the inputs (a key fixed at export), each
    with its full name stack and the innermost traceback that has a user frame (a nested
    equation's own are relative to the call holding it). `from_inputs`: the variables that
    depend on an input (a key a request passes in is a model that samples on purpose)."""
    from jax._src import core, source_info_util

    for eqn in jaxpr.eqns:
        stack = "/".join(s for s in (outer[0], str(eqn.source_info.name_stack)) if s)
        tb = eqn.source_info.traceback
        if tb is None or source_info_util.user_frame(tb) is None:
            tb = outer[1]
        tainted = [isinstance(v, core.Var) and v in from_inputs for v in eqn.invars]
        if eqn.primitive.name in _RANDOM and not tainted[0]:
            yield stack, tb
        for sub in core.jaxprs_in_params(eqn.params):
            # jit, scan, custom_jvp...: operands map one to one onto the inner invars; else
            # (cond, while) every inner variable depends on the inputs if any operand does.
            inner = ({v for v, t in zip(sub.invars, tainted, strict=True) if t}
                     if len(sub.invars) == len(eqn.invars)
                     else set(sub.invars) if any(tainted) else set())
            yield from _fixed_draws(sub, inner, (stack, tb))
        if any(tainted):
            from_inputs.update(eqn.outvars)


def _where(stack: str, traceback: Any) -> str:
    """A traced equation's Linen module path (`Model/Dropout_0`), else the user's file:line."""
    from jax._src import source_info_util

    if stack:
        return stack
    frame = source_info_util.user_frame(traceback) if traceback is not None else None
    if frame is None:
        return "(unknown location)"
    return f"at {frame.file_name.rsplit('/', 1)[-1]}:{frame.start_line} ({frame.function_name})"


def _layer_of(path: str, collection_parts: Sequence[str]) -> str:
    """`drop` for `drop.rngs.key`, `BatchNorm_0` for `batch_stats.BatchNorm_0.mean`."""
    parts = path.split(".")
    parts = parts[:parts.index("rngs")] if "rngs" in parts else parts[:-1]
    parts = [p for p in parts if p not in collection_parts]
    return ".".join(parts) or "(the model's top level)"


def random_layers(fn_with_rng: Callable[..., Any], rng_paths: Sequence[str],
                  rng_values: Sequence[Any], params: Any,
                  inputs: Mapping[str, jax.ShapeDtypeStruct]) -> list[Finding]:
    """The layers that draw random numbers with a key fixed at export when `fn` is traced: the
    owners of the RNG leaves the program reads, and where each other draw from a key that is
    not an input is (Linen module path, or the user's file:line). A model sampling from a key
    its caller passes in is not in training mode."""
    from jax._src.interpreters import partial_eval as pe

    params_spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    try:
        closed = jax.make_jaxpr(fn_with_rng)(list(rng_values), params_spec, *inputs.values())
    except Exception:
        return []  # the export's own trace reports the error, with its file:line
    findings: dict[str, Finding] = {}
    if rng_paths:
        jaxpr = pe.convert_constvars_jaxpr(closed.jaxpr)
        _, used = pe.dce_jaxpr(jaxpr, [True] * len(jaxpr.outvars))
        used_rng = used[len(closed.jaxpr.constvars):][:len(rng_paths)]
        for path, read in zip(rng_paths, used_rng, strict=True):
            if read:
                layer = _layer_of(path, ())
                found = findings.setdefault(layer, Finding(layer, "rng", [], ""))
                found.leaves.append(path)
    from_inputs = set(closed.jaxpr.invars[len(closed.jaxpr.invars) - len(inputs):])
    draws = list(_fixed_draws(closed.jaxpr, from_inputs))
    if draws and not findings:
        for stack, tb in draws:
            layer = _where(stack, tb)
            findings.setdefault(layer, Finding(layer, "rng", [], ""))
    for f in findings.values():
        f.reason = (f"layer {f.layer} draws random numbers (dropout active: training mode) "
                    "with a key fixed at export, so every request gets the same mask")
    return list(findings.values())


def _is_running_stat(name: str, names: set[str]) -> bool:
    """A BatchNorm `mean`/`var` in plain params (NNX state restored from a checkpoint:
    `bn.mean.value`), known by the `scale` or `bias` beside it."""
    parts = name.split(".")
    suffix = [parts.pop()] if parts[-1] == "value" else []
    if len(parts) < 2 or parts[-1] not in ("mean", "var"):
        return False
    return any(".".join([*parts[:-1], sibling, *suffix]) in names for sibling in ("scale", "bias"))


def stats_layers(dropped: Sequence[str], running_stats: Sequence[str],
                 output_names: Sequence[str], param_names: Sequence[str] = ()) -> list[Finding]:
    """BatchNorm layers in training mode: running statistics the program does not read
    (`dropped`, manifest names of the parameters jax dropped, among all `param_names`), or
    outputs that are updated `batch_stats`."""
    stats = {f"params.{p}" for p in running_stats}
    names = set(param_names)
    findings: dict[str, Finding] = {}
    for name in dropped:
        if name in stats or ".batch_stats." in f".{name}." or _is_running_stat(name, names):
            layer = _layer_of(name.removesuffix(".value"), ("params", "batch_stats"))
            found = findings.setdefault(layer, Finding(
                layer, "running_statistics", [],
                f"BatchNorm layer {layer} runs in training mode: it normalises with the "
                "batch's statistics and its running statistics are not read, so a row's "
                "answer depends on the other rows of the request"))
            found.leaves.append(name)
    for name in output_names:
        if ".batch_stats." in f".{name}.":
            layer = _layer_of(name.split("batch_stats.", 1)[1], ())
            found = findings.setdefault(layer, Finding(
                layer, "running_statistics", [],
                f"the function returns updated BatchNorm statistics of layer {layer} (output "
                f"{name}: a training step, mutable=['batch_stats']), so it normalises with the "
                "batch's statistics"))
            found.leaves.append(name)
    return list(findings.values())


def check(findings: Sequence[Finding], fn_name: str, allow: bool) -> list[str]:
    """Refuse (one line naming the first layer and how to export in eval mode) unless
    `allow`; with it, the warnings to print."""
    if not findings:
        return []
    if not allow:
        first = findings[0]
        more = f" ({len(findings) - 1} more layer(s) too)" if len(findings) > 1 else ""
        raise ExportError(
            f"{fn_name} runs in training mode: {first.reason}{more}; export in eval mode "
            f"({_EVAL_HINT[first.kind]}), or pass --allow-train-mode (allow_train_mode=True) "
            "if you mean it")
    return [f"{fn_name}: {f.reason} (exported anyway: --allow-train-mode; recorded in the "
            "manifest's droppedState)" for f in findings]


def record(manifest: manifest_pb2.Manifest, findings: Sequence[Finding]) -> None:
    """`manifest.dropped_state`: each layer's left-out state and why."""
    for f in findings:
        manifest.dropped_state.add(layer=f.layer, kind=f.kind, leaves=f.leaves,
                                   reason=f.reason)
