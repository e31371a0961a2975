"""checkify runtime checks that survive export.

XLA programs cannot raise, so `jax.experimental.checkify` turns checks into values: an `Error`
pytree of, per *error effect*, a predicate (did any check of this effect fire), a code (which
check fired first) and payload arrays (runtime values the message needs). `Exported.serialize()`
refuses that pytree (its dict keys are `ErrorEffect` objects), so this module:

- producer side (`instrument`, needs jax): wraps the model with `checkify.checkify` and returns a
  function whose results are the model's output leaves followed by the error's leaves as plain
  arrays, in the canonical order below, plus a STATIC error table (`manifest_pb2.Checks`)
  extracted by tracing once: every code the program can report, its kind, message template,
  payload layout and source location;
- the consumer side (the table's layout, `format_failure`, the status per kind) lives in
  `jaxport.artifact.checks`, numpy only: it turns check output values back into the exact text
  `err.get()` gives in JAX, from the manifest alone;
- the goldens of a checked program and the search for inputs that trip each kind
  (`write_check_goldens`, `search_inputs`, `check_golden_coverage`) live in
  `jaxport.exporter.check_search`.

Canonical check-output order (what `Program.results` with role CHECK holds, after the outputs):
effects in ascending `ErrorCode.effect`; for each effect its `predicate` (bool[]), its `code`
(int32[]) then its payload leaves (`payload_size` of them, in order). Effects are numbered by
jax's own ordering of `ErrorEffect` (error class name, then payload shapes/dtypes), so two
traces of the same function give the same table and layout.

Reading a failure (mirrors `Error.get()`): among effects whose predicate is true, take the one
whose code is smallest; look the code up in the table; format its `message_template` with
Python `str.format` semantics where `{N}` is payload leaf N of that effect (a 0-d leaf as a
scalar, else the array as numpy prints it) and `{N[i]}` is element i of leaf N.

Source location: in this jax version `err.get()` does not include one, so messages are exactly
`err.get()`'s text; the location jax recorded is kept in the table as `file.py:LINE (function)`
(file base name only, so artifacts do not depend on the exporting machine's paths).

Limits, refused at export with a one-line ChecksError: `checkify.check` message arguments must
be arrays (not containers) and fields may not use `!r`/`!a` (JAX's repr of an Array cannot be
reproduced without JAX); `check_error` of a multi-check Error is not supported; with batch sizes
every program must have the same table. The user guide is docs/artifact-format.md, "Check
outputs".
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxport.artifact.checks import KINDS
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError, UsageError

__all__ = [
    "KINDS",
    "CheckResult",
    "ChecksError",
    "Instrumented",
    "UnknownCheckError",
    "apply_checks",
    "find_unchecked",
    "instrument",
    "parse_checks",
    "require_checks_enabled",
    "require_same_table",
]

class ChecksError(ExportError):
    """A user mistake about checks (unsupported message, checks not enabled, no tripping golden).

    `str()` is one line saying what is wrong and how to fix it.
    """


class UnknownCheckError(ChecksError, UsageError):
    """`--checks` names a kind that does not exist (usage error, exit code 2)."""


def parse_checks(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """Parse `--checks user,index,nan,div` (or a list of names) into canonical order.

    Empty/None means no checks. Raises ChecksError naming an unknown kind.
    """
    if spec is None:
        return ()
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    chosen = set()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in KINDS:
            raise UnknownCheckError(
                f"unknown check kind {name!r} in --checks; choose from {', '.join(KINDS)}"
            )
        chosen.add(name)
    return tuple(k for k in KINDS if k in chosen)


@dataclass(frozen=True)
class CheckResult:
    """One check output of the exported program (after the model outputs)."""

    name: str
    part: str  # "predicate", "code" or "payload"
    effect: int
    shape: tuple[int, ...]
    dtype: np.dtype

    def leaf(self) -> manifest_pb2.CheckLeaf:
        """The manifest's CheckLeaf for this result."""
        return manifest_pb2.CheckLeaf(part=self.part, effect=self.effect)


@dataclass(frozen=True)
class Instrumented:
    """A model function rewritten so its check errors are plain outputs.

    fn(*args) returns a tuple: the original outputs' leaves (`n_outputs`, in jax flatten order
    of `out_tree`), then the check leaves described by `check_results`.
    """

    fn: Callable[..., tuple[Any, ...]]
    n_outputs: int
    out_tree: Any  # jax PyTreeDef of the original outputs
    check_results: tuple[CheckResult, ...]
    table: manifest_pb2.Checks

    def split(self, results: Sequence[Any]) -> tuple[Any, list[Any]]:
        """(original output pytree, check values) from `fn`'s flat results."""
        import jax

        outs = jax.tree_util.tree_unflatten(self.out_tree, list(results[: self.n_outputs]))
        return outs, list(results[self.n_outputs :])


# ---------------------------------------------------------------------------------------------
# Producer side (jax)


def _error_sets(kinds: Sequence[str]) -> frozenset:
    from jax.experimental import checkify

    sets = {
        "user": checkify.user_checks,
        "index": checkify.index_checks,
        "nan": checkify.nan_checks,
        "div": checkify.div_checks,
    }
    out: frozenset = frozenset()
    for k in kinds:
        out = out | sets[k]
    return out


def _kind_of(error_type: type) -> str:
    from jax._src import checkify as ck

    kinds = {
        ck.FailedCheckError: "user",
        ck.OOBError: "index",
        ck.NaNError: "nan",
        ck.DivisionByZeroError: "div",
    }
    if error_type not in kinds:
        raise ChecksError(f"unsupported checkify error type {error_type.__name__}")
    return kinds[error_type]


def _location(traceback: Any) -> str:
    from jax._src import source_info_util

    frame = source_info_util.user_frame(traceback) if traceback is not None else None
    if frame is None:
        return "unknown"
    return f"{os.path.basename(frame.file_name)}:{frame.start_line} ({frame.function_name})"


_FIELD = re.compile(r"^([^.\[]*)(.*)$", re.S)


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _user_template(fmt: str, args: tuple, kwargs: dict, location: str) -> str:
    """Rewrite a `checkify.check` message so its fields name payload leaves (`{N}`)."""
    where = f"the checkify.check at {location}"
    for leaf in (*args, *kwargs.values()):
        if not isinstance(leaf, int):
            raise ChecksError(
                f"{where}: message arguments must be arrays, not containers; pass each array "
                "as its own argument"
            )
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError as e:
        raise ChecksError(f"{where}: invalid message format {fmt!r}: {e}") from None
    out: list[str] = []
    auto = 0
    for literal, field, spec, conversion in parsed:
        out.append(_escape(literal))
        if field is None:
            continue
        head, rest = _FIELD.match(field).groups()
        if head == "":
            head = str(auto)
            auto += 1
        if head.isdigit():
            if int(head) >= len(args):
                raise ChecksError(f"{where}: message field {{{field}}} has no argument")
            leaf = args[int(head)]
        else:
            if head not in kwargs:
                raise ChecksError(f"{where}: message field {{{field}}} has no argument")
            leaf = kwargs[head]
        if conversion not in (None, "s"):
            raise ChecksError(
                f"{where}: message field {{{field}!{conversion}}} uses a repr conversion that "
                "only JAX can reproduce; use {} instead"
            )
        if spec and ("{" in spec or "}" in spec):
            raise ChecksError(
                f"{where}: nested fields in a format spec ({{{field}:{spec}}}) are not supported"
            )
        out.append(
            "{"
            + str(leaf)
            + rest
            + (f"!{conversion}" if conversion else "")
            + (f":{spec}" if spec else "")
            + "}"
        )
    return "".join(out) + " (`check` failed)"


class _Probe:
    """Formats as the template field `{N}` / `{N[i]}` of payload leaf N."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __getitem__(self, i: int) -> _Probe:
        return _Probe(f"{self._text}[{int(i)}]")

    def __format__(self, spec: str) -> str:
        return "{" + self._text + (f":{spec}" if spec else "") + "}"

    __str__ = __repr__ = lambda self: "{" + self._text + "}"


def _error_code(
    code: int, treedef: Any, effect_index: int, n_payload: int
) -> manifest_pb2.ErrorCode:
    """The table entry of one code, from the metadata treedef jax keeps for it."""
    import jax
    from jax._src import checkify as ck

    exc = jax.tree_util.tree_unflatten(treedef, list(range(treedef.num_leaves)))
    kind = _kind_of(type(exc))
    location = _location(exc.traceback_info)
    if treedef.num_leaves != n_payload:
        raise RuntimeError(f"checkify code {code} ({location}): payload layout mismatch")
    if isinstance(exc, ck.FailedCheckError):
        template = _user_template(exc.fmt_string, exc.args, exc.kwargs, location)
    else:
        probe = jax.tree_util.tree_unflatten(
            treedef, [_Probe(str(i)) for i in range(treedef.num_leaves)]
        )
        template = str(probe)
    return manifest_pb2.ErrorCode(
        code=int(code),
        kind=kind,
        effect=effect_index,
        message_template=template,
        payload_size=n_payload,
        location=location,
    )


def _check_eqns(jaxpr: Any) -> list[Any]:
    """Every `check` equation of a jaxpr, nested jaxprs (jit, cond, scan...) included."""
    from jax._src import checkify as ck
    from jax._src import core

    found: list[Any] = []

    def walk(j: Any) -> None:
        for eqn in j.eqns:
            if eqn.primitive is ck.check_p:
                found.append(eqn)
            for sub in core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr)
    return found


def _user_effects(jaxpr: Any) -> dict[int, Any]:
    """id(exception treedef) -> ErrorEffect, for the user checks staged in `jaxpr`.

    checkify keeps, per code, the treedef of the exception it reports, but not which effect
    (payload signature) it belongs to; the `check` equation that carries that treedef knows.
    """
    import jax
    from jax._src import checkify as ck

    out: dict[int, Any] = {}
    for eqn in _check_eqns(jaxpr):
        err = jax.tree_util.tree_unflatten(eqn.params["err_tree"], [v.aval for v in eqn.invars])
        user = [e for e in err._pred if e.error_type is ck.FailedCheckError]
        for td in err._metadata.values():
            exc = jax.tree_util.tree_unflatten(td, [None] * td.num_leaves)
            if isinstance(exc, ck.FailedCheckError):
                if len(user) != 1:
                    raise ChecksError(
                        f"checkify.check_error of a multi-check Error "
                        f"({_location(exc.traceback_info)}) cannot be exported; "
                        "use checkify.check directly"
                    )
                out[id(td)] = user[0]
    return out


def _flat_error(err: Any) -> tuple[list[Any], list[Any]]:
    """(sorted effects, check leaves in canonical order) of a checkify Error."""
    effects = sorted(err._pred.keys())
    leaves: list[Any] = []
    for eff in effects:
        leaves.append(err._pred[eff])
        leaves.append(err._code[eff])
        leaves.extend(err._payload[eff])
    return effects, leaves


def find_unchecked(fn: Callable[..., Any], example_args: Sequence[Any]) -> list[str]:
    """Locations of `checkify.check` calls (not `debug_check`) that `fn` would stage.

    These cannot be lowered outside `checkify.checkify`; the exporter needs `--checks user`.
    """
    import jax

    closed = jax.make_jaxpr(fn)(*example_args)
    return [
        _location(eqn.source_info.traceback)
        for eqn in _check_eqns(closed.jaxpr)
        if not eqn.params.get("debug", False)
    ]


def require_checks_enabled(
    fn: Callable[..., Any], example_args: Sequence[Any], checks: Sequence[str]
) -> None:
    """Fail with a one-line ChecksError if `fn` has `checkify.check` calls but "user" is off.

    Without checkify they fail to lower; with checkify but without user checks jax drops
    them silently. Either way the user must pass `--checks user`.
    """
    if "user" in checks:
        return
    found = find_unchecked(fn, example_args)
    if found:
        flag = ",".join(parse_checks([*checks, "user"]))
        raise ChecksError(
            f"the function calls checkify.check ({found[0]}"
            + (f" and {len(found) - 1} more" if len(found) > 1 else "")
            + f"), which cannot be exported without checkify; pass --checks {flag} "
            f"(Python API: checks={flag.split(',')!r})"
        )


def instrument(
    fn: Callable[..., Any], checks: Sequence[str], example_args: Sequence[Any]
) -> Instrumented:
    """Wrap `fn` with checkify for `checks` and extract the static error table.

    `example_args` are arrays or `jax.ShapeDtypeStruct`s with the exported shapes. `fn` is
    traced once here, to a jaxpr; `Instrumented.fn` checkifies that jaxpr, so every later
    trace (the export) sees the very same checks and gives the same table and layout. It
    accepts arguments with the same pytree structure and shapes as `example_args`.
    """
    import jax
    from jax._src import core
    from jax.experimental import checkify

    kinds = parse_checks(checks)
    if not kinds:
        raise ChecksError("instrument() needs at least one check kind")
    closed, out_shapes = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    in_tree = jax.tree_util.tree_structure(tuple(example_args))
    out_tree = jax.tree_util.tree_structure(out_shapes)
    if "user" not in kinds:
        require_checks_enabled(fn, example_args, kinds)
    user_effects = _user_effects(closed.jaxpr)
    checked = checkify.checkify(core.jaxpr_as_fun(closed), errors=_error_sets(kinds))
    captured: dict[str, Any] = {}

    def instrumented(*args: Any) -> tuple[Any, ...]:
        leaves, tree = jax.tree_util.tree_flatten(args)
        if tree != in_tree:
            raise ValueError(f"instrumented function expects arguments {in_tree}, got {tree}")
        err, out_leaves = checked(*leaves)
        effects, check_leaves = _flat_error(err)
        if "effects" not in captured:
            captured.update(
                effects=effects,
                payloads=[list(err._payload[e]) for e in effects],
                metadata=dict(err._metadata),
            )
        elif effects != captured["effects"]:
            raise RuntimeError("checkify produced a different error layout on a second trace")
        return (*out_leaves, *check_leaves)

    result_shapes = jax.eval_shape(instrumented, *example_args)
    effects = captured["effects"]
    payloads = captured["payloads"]
    n_outputs = out_tree.num_leaves

    check_results: list[CheckResult] = []
    shapes = iter(result_shapes[n_outputs:])
    for e, eff in enumerate(effects):
        kind = _kind_of(eff.error_type)
        parts = ["predicate", "code"] + ["payload"] * len(payloads[e])
        for k, part in enumerate(parts):
            s = next(shapes)
            name = f"check.{e}.{kind}.{part}" + (f".{k - 2}" if part == "payload" else "")
            check_results.append(CheckResult(name, part, e, tuple(s.shape), np.dtype(s.dtype)))

    codes = []
    for code, treedef in sorted(captured["metadata"].items()):
        if id(treedef) in user_effects:
            eff = user_effects[id(treedef)]
        else:
            exc = jax.tree_util.tree_unflatten(treedef, [None] * treedef.num_leaves)
            candidates = [f for f in effects if f.error_type is type(exc)]
            if len(candidates) != 1:
                raise RuntimeError(f"checkify code {code}: cannot tell which error effect it is")
            eff = candidates[0]
        e = effects.index(eff)
        codes.append(_error_code(int(code), treedef, e, len(payloads[e])))
    table = manifest_pb2.Checks(enabled=list(kinds), codes=codes)
    return Instrumented(
        fn=instrumented,
        n_outputs=n_outputs,
        out_tree=out_tree,
        check_results=tuple(check_results),
        table=table,
    )


# ---------------------------------------------------------------------------------------------
# Exporter integration (called from jaxport.exporter.api.export)


def apply_checks(
    export_fn: Any, fn: Callable[..., Any], params: Any, inputs: Any, checks: Any
) -> Any:
    """Return `export_fn` (trace.ExportFunction) with check outputs added for `checks`.

    No checks: `export_fn` unchanged (the artifact is exactly what it was), after making sure
    `fn` has no `checkify.check` that would need them. Otherwise the exported function is the
    instrumented one: outputs, then check results with role CHECK, and the error table.
    """
    import dataclasses

    import jax
    from jaxport.protocol import dtypes

    kinds = parse_checks(checks)
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    example = [spec, *inputs.values()]
    if not kinds:
        require_checks_enabled(fn, example, ())
        return export_fn
    inst = instrument(fn, kinds, example)
    n_out = len(export_fn.output_names)
    if inst.n_outputs != n_out:
        raise RuntimeError(f"internal: {inst.n_outputs} instrumented outputs, expected {n_out}")
    for r in inst.check_results:
        if r.name in export_fn.output_names:
            raise ChecksError(f"output name {r.name!r} is reserved for a check output; rename it")
        try:
            dtypes.by_numpy(r.dtype)
        except dtypes.UnsupportedDtypeError:
            raise ChecksError(
                f"check output {r.name} has dtype {r.dtype}, which jaxport cannot carry; "
                "pass checkify.check message arguments of a supported dtype"
            ) from None
    inst.fn.__name__ = getattr(export_fn.fn, "__name__", "model")
    result = manifest_pb2.ResultRole
    return dataclasses.replace(
        export_fn,
        fn=inst.fn,
        result_names=[*export_fn.output_names, *(r.name for r in inst.check_results)],
        result_roles=[result.RESULT_ROLE_OUTPUT] * n_out
        + [result.RESULT_ROLE_CHECK] * len(inst.check_results),
        result_checks=[None] * n_out + [r.leaf() for r in inst.check_results],
        checks=inst.table,
        tree_fn=None,  # the check results are extra: model.jaxexport returns the flat tuple
    )


def require_same_table(tables: Sequence[Any], sizes: Sequence[int]) -> None:
    """Batched export: every program must report the same error table (the manifest has one).

    It differs when a message depends on the batch size, e.g. an out-of-bounds index into a
    batched input names that input's shape.
    """
    for table, size in zip(tables[1:], sizes[1:], strict=True):
        if table != tables[0]:
            raise ChecksError(
                f"the check messages at batch size {size} differ from those at {sizes[0]} "
                "(a message names a batch-dependent shape); export one batch size, or check "
                "only unbatched values"
            )
