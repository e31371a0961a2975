"""Check goldens: golden cases of a checked program (`--checks`) and the search for inputs that
trip each kind.

- `write_check_goldens` completes one program's goldens: every case gets its raw check outputs,
  a case that trips a check its `expected_check` / `expected_error` (JAX's own `err.get()`);
  the caller's cases (`--check-goldens`) are added; kinds no case trips yet are searched for;
- `search_inputs`: deterministic probes from a passing base, at most `SEARCH_BUDGET` program
  runs per program;
- `check_golden_coverage`: records the kinds some golden trips (`checks.goldenKinds`) and warns
  (or, with `--require-check-goldens`, fails) for the others.

The instrumentation that makes checks survive export (the check outputs and the error table)
is `jaxport.exporter.checks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jaxport.artifact.checks import KINDS, format_failure
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.checks import ChecksError, _error_sets

__all__ = ["SEARCH_BUDGET", "check_golden_coverage", "search_inputs", "write_check_goldens"]

#: Most program runs the search for tripping inputs makes per program (see `search_inputs`).
SEARCH_BUDGET = 64


def write_check_goldens(
    root: Any,
    manifest: manifest_pb2.Manifest,
    export_fn: Any,
    fn: Callable[..., Any],
    params: Any,
    inputs: Any,
    cases: Any = None,
    batch_size: int = 0,
    search_seed: int | None = None,
) -> None:
    """Complete the goldens of one checked program (no-op without checks).

    Every case of the program gets its raw check outputs (`check_outputs`); a case that trips a
    check gets `expected_check` / `expected_error` (JAX's own `err.get()`) and no `outputs`.
    `cases` (name -> inputs in input order, or name -> {input name: array}) adds the caller's
    cases, typically ones that trip each check; with batch sizes each goes to the program of
    its leading dimension.

    With `search_seed`, kinds of the table that no golden case trips yet (nor a passing case,
    when none passes) are searched for (`search_inputs`) and each one found is written as a
    case `search_<kind>` (`search_pass`). The export calls `check_golden_coverage` once, after
    its last program.
    """
    from pathlib import Path

    import jax
    from jax.experimental import checkify
    from jaxport.artifact import goldens as goldens_mod
    from jaxport.artifact.paths import unique_safe_names

    root = Path(root)
    table = export_fn.checks
    if table is None:
        if cases:
            raise ChecksError("check golden cases were given but no --checks; pass --checks")
        return
    n_out = len(export_fn.output_names)
    check_names = list(export_fn.result_names[n_out:])
    jitted = jax.jit(export_fn.fn)
    reference = jax.jit(checkify.checkify(fn, errors=_error_sets(table.enabled)))

    def run(case: manifest_pb2.GoldenCase, values: list[np.ndarray]) -> list[np.ndarray]:
        results = [np.asarray(r) for r in jitted(params, *values)]
        checks_out = results[n_out:]
        failure = format_failure(table, checks_out)
        expected = reference(params, *values)[0].get()
        if (failure[1] if failure else None) != expected:
            raise RuntimeError(
                f"internal: golden {case.name}: check outputs read {failure!r} but JAX "
                f"says {expected!r}"
            )
        case.check_outputs.update(goldens_mod.write_arrays(
            root, case.name, "checks", dict(zip(check_names, checks_out, strict=True))))
        if failure:
            case.expected_check, case.expected_error = failure
            for rel in case.outputs.values():
                (root / rel).unlink()
            case.outputs.clear()
        return results[:n_out]

    def add(stem: str, values: list[np.ndarray]) -> None:
        case = manifest.goldens.add(name=stem, batch_size=batch_size)
        case.inputs.update(goldens_mod.write_arrays(
            root, stem, "inputs", dict(zip(inputs, values, strict=True))))
        outs = run(case, values)
        if not case.expected_check:
            case.outputs.update(goldens_mod.write_arrays(
                root, stem, "outputs", dict(zip(export_fn.output_names, outs, strict=True))))

    dtypes_by_name = {k: np.dtype(v.dtype) for k, v in inputs.items()}
    for case in manifest.goldens:
        if case.batch_size == batch_size:
            values = [
                goldens_mod.load_npy(root / case.inputs[k], dtypes_by_name[k]) for k in inputs
            ]
            run(case, values)

    names = [n for n in (cases or {}) if _case_batch(n, cases[n], manifest) == batch_size]
    prefix = f"b{batch_size}_check_" if batch_size else "check_"
    for stem, name in zip(unique_safe_names([prefix + n for n in names]), names, strict=True):
        add(stem, _case_inputs(name, cases[name], inputs))

    if search_seed is None:
        return
    tripped = {g.expected_check for g in manifest.goldens}
    wanted = [k for k in _table_kinds(table) if k not in tripped]
    if "" not in tripped:
        wanted.insert(0, "")
    if not wanted:
        return

    def kind_of(values: list[np.ndarray]) -> str:
        failure = format_failure(table, [np.asarray(r) for r in
                                         jitted(params, *values)[n_out:]])
        return failure[0] if failure else ""

    found = search_inputs(kind_of, {k: (tuple(v.shape), np.dtype(v.dtype))
                                    for k, v in inputs.items()}, wanted, search_seed)
    taken = {g.name for g in manifest.goldens}
    prefix = f"b{batch_size}_search_" if batch_size else "search_"
    for kind, values in found.items():
        stem = prefix + (kind or "pass")
        if stem not in taken:
            add(stem, values)


def search_inputs(
    kind_of: Callable[[list[np.ndarray]], str],
    specs: dict[str, tuple[tuple[int, ...], np.dtype]],
    wanted: Sequence[str],
    seed: int,
    budget: int = SEARCH_BUDGET,
) -> dict[str, list[np.ndarray]]:
    """Inputs (in input order) that make the program report each kind in `wanted` ("" = a
    case that passes every check), found with at most `budget` runs (`kind_of(values)` runs
    the program once and names the check that fired first, "" for none).

    Deterministic. First a passing base: the golden sampler's inputs for `seed`, then the same
    with floats made positive (|x| + 0.5), then also integers 0, then floats 1 as well. Then,
    from that base, one input at a time, first a single element (the first) and then the
    whole input is set to each probe value: for signed integers -1, the dtype's max and min
    (negative, and out-of-range indices wherever they index); unsigned, the max; floats NaN,
    -1, 0, +inf, -inf (NaN propagation, log/sqrt of a negative, division by zero, inf - inf);
    booleans are flipped. Checks are reported first-fired-wins, so each probe changes one
    input of a passing case. A kind no probe reaches within the budget is not returned.
    """
    from jaxport.exporter.goldens import sample_inputs

    todo = list(dict.fromkeys(wanted))
    found: dict[str, list[np.ndarray]] = {}
    runs = 0

    def probe(values: list[np.ndarray]) -> str | None:
        nonlocal runs
        if runs >= budget:
            return None
        runs += 1
        kind = kind_of(values)
        if kind in todo:
            todo.remove(kind)
            found[kind] = values
        return kind

    names = list(specs)
    sample = sample_inputs(specs, seed)

    def variant(floats: str, ints: str) -> list[np.ndarray]:
        out = []
        for n in names:
            a = sample[n]
            if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
                a = {"sample": a, "positive": (np.abs(a.astype(np.float32)) + 0.5),
                     "one": np.ones(a.shape, np.float32)}[floats].astype(a.dtype)
            elif a.dtype.kind in "iu" and ints == "zero":
                a = np.zeros_like(a)
            out.append(np.asarray(a))
        return out

    base = None
    for floats, ints in (("sample", "sample"), ("positive", "sample"), ("positive", "zero"),
                         ("one", "zero")):
        values = variant(floats, ints)
        kind = probe(values)
        if kind is None or not todo:
            return found
        if kind == "":
            base = values
            break
    if base is None:
        base = variant("sample", "sample")

    def probes(dtype: np.dtype) -> list[Any]:
        if dtype == np.bool_:
            return ["flip"]
        if dtype.kind == "i":
            info = np.iinfo(dtype)
            return [-1, info.max, info.min]
        if dtype.kind == "u":
            return [np.iinfo(dtype).max]
        return [np.nan, -1.0, 0.0, np.inf, -np.inf]

    for whole in (False, True):
        for i in range(len(names)):
            a = base[i]
            if whole and a.size <= 1:
                continue  # the single-element probe was the whole input
            for value in probes(a.dtype):
                changed = np.array(a, copy=True)
                target = changed if whole or changed.ndim == 0 else changed.reshape(-1)[:1]
                if isinstance(value, str):  # "flip"
                    target[...] = ~target
                else:
                    target[...] = np.asarray(value).astype(a.dtype)
                if probe([*base[:i], changed.reshape(a.shape), *base[i + 1:]]) is None:
                    return found
                if not todo:
                    return found
    return found


def _table_kinds(table: manifest_pb2.Checks) -> list[str]:
    """Kinds the program can report (enabled and with at least one check in the program)."""
    return [k for k in KINDS if any(c.kind == k for c in table.codes)]


def check_golden_coverage(manifest: manifest_pb2.Manifest, warn: Callable[[str], None],
                          require: bool = False) -> None:
    """Record in `checks.golden_kinds` the kinds some golden case trips; each kind of the table
    none trips (and a missing passing case) is a one-line warning, or with `require`
    (`--require-check-goldens`) an error.

    No goldens at all (`--goldens 0` and no check goldens) is an explicit opt-out.
    """
    table = manifest.checks
    if not manifest.goldens or not table.enabled:
        return
    tripped = {g.expected_check for g in manifest.goldens}
    del table.golden_kinds[:]
    table.golden_kinds.extend(k for k in KINDS if k in tripped)
    missing = [k for k in _table_kinds(table) if k not in tripped]
    problems = ([] if "" in tripped else ["passes every check"]) + [
        f"trips the {k!r} check" for k in missing
    ]
    how = ("pass --check-goldens MODULE:FUNCTION (API: check_goldens=) returning {case name: "
           "inputs} with such inputs")
    if require and problems:
        raise ChecksError(
            f"no golden case {' and none '.join(problems)} (--require-check-goldens; the "
            f"search of up to {SEARCH_BUDGET} inputs found none); {how}, or --goldens 0 to "
            "write no goldens"
        )
    for problem in problems:
        warn(f"no golden case {problem}: the search of up to {SEARCH_BUDGET} inputs found "
             f"none, so consumers cannot test it; {how} (--require-check-goldens makes this "
             "an error)")


def _case_batch(name: str, case: Any, manifest: manifest_pb2.Manifest) -> int:
    """The program (batch size, 0 = unbatched) a caller-given golden case belongs to."""
    if not manifest.HasField("batching"):
        return 0
    from collections.abc import Mapping

    first = next(iter(case.values() if isinstance(case, Mapping) else case), None)
    rows = np.shape(first)[0] if np.ndim(first) else None
    if rows not in manifest.batching.batch_sizes:
        raise ChecksError(
            f"check golden {name!r} has batch size {rows}; exported batch sizes are "
            f"{list(manifest.batching.batch_sizes)}"
        )
    return int(rows)


def _case_inputs(name: str, case: Any, inputs: Any) -> list[np.ndarray]:
    """One caller-given golden case as arrays in input order, checked against the specs."""
    from collections.abc import Mapping

    if isinstance(case, Mapping):
        unknown = sorted(set(case) - set(inputs))
        if unknown or len(case) != len(inputs):
            raise ChecksError(
                f"check golden {name!r} has inputs {sorted(case)}; expected {list(inputs)}"
            )
        case = [case[k] for k in inputs]
    case = list(case)
    if len(case) != len(inputs):
        raise ChecksError(
            f"check golden {name!r} has {len(case)} inputs; expected {len(inputs)} "
            f"({', '.join(inputs)})"
        )
    out = []
    for (in_name, spec), value in zip(inputs.items(), case, strict=True):
        arr = np.asarray(value)
        if arr.shape != tuple(spec.shape):
            raise ChecksError(
                f"check golden {name!r}: input {in_name!r} has shape {arr.shape}; "
                f"expected {tuple(spec.shape)}"
            )
        out.append(arr.astype(np.dtype(spec.dtype), copy=False))
    return out
