"""`jaxport verify DIR`: the consumer-side proof that an artifact does what its manifest says.

Each check runs in a fresh `python -I` process (isolated: no current directory, no
PYTHONPATH), so the model's source cannot be imported; the worker reports whether the source
module is importable and fails if it was imported. Checks:

1. `checksums` - every file and every parameter matches its sha256 in the manifest;
2. `jaxexport`  - `jax.export.deserialize(model.jaxexport)` agrees with the manifest (argument
   order, kept leaves, shapes, dtypes) and `.call(params, *golden inputs)` equals the goldens;
3. `pjrt`       - the raw `model.mlirbc` compiled by the PJRT client (no jax.export) and run
   with arguments bound purely from the manifest order equals the goldens;
4. `iree`       - `iree-compile` + `iree-run-module` (C runtime CLI) with every argument in
   manifest order equals the goldens (skipped when IREE is not installed).

Platforms: `jaxexport` and `pjrt` run on every platform the artifact lists that is present
here (`present_platforms`: what jax finds in a fresh process with the caller's environment,
JAX_PLATFORMS included), once per platform. IREE compiles for llvm-cpu, so it runs when the
artifact lists `cpu`. An artifact none of whose platforms is present cannot be executed here:
`run_checks` refuses it (one line naming the listed and the present platforms) unless
`allow_unexecuted=True`, which runs the checksums only.

Trust model: `jaxexport` deserializes the artifact; run verify only on artifacts you trust.
Checksums establish integrity, not authenticity.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jaxport.artifact
import numpy as np
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.errors import ArtifactError
from jaxport.exporter import module as module_mod
from jaxport.exporter.errors import ExportError
from jaxport.protocol.gen.jaxport.v1 import manifest_pb2

__all__ = [
    "CHECKS",
    "TOLERANCES",
    "CheckResult",
    "compare",
    "f32_module_text",
    "f32_reference",
    "find_iree_tool",
    "format_table",
    "iree_compile_command",
    "manifest_warnings",
    "present_platforms",
    "run_checks",
    "set_override",
    "ulp",
]

CHECKS = ("checksums", "jaxexport", "pjrt", "iree")
# The checks that execute the program with jax's runtime on a platform (IREE is llvm-cpu).
PLATFORM_CHECKS = ("jaxexport", "pjrt")
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")

# (atol, rtol) per dtype: pass when |actual - expected| <= atol + rtol * |expected|.
# Floating point differs between compilers (XLA vs IREE codegen: different tanh/exp
# approximations and reduction orders), so the tolerance is a few units in the last place of
# each type. bf16 keeps only 8 significand bits (ulp 2^-7 relative = 0.78%), so a single
# rounding flip in an intermediate shows up as ~1% error: it gets 2 ulp relative plus an
# absolute floor for values near zero. Integers and booleans must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-10),
    "float32": (1e-5, 1e-4),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
}
EXACT = (0.0, 0.0)

_ARG = manifest_pb2.ArgumentRole
_RES = manifest_pb2.ResultRole


# Low-precision floats: significand bits (ulp of x is 2^(floor(log2|x|) - bits)) and the
# smallest normal. Their outputs are judged against a float32 evaluation of the same program
# (`f32_reference`), not only against JAX's own low-precision result: see `compare`.
LOW_PRECISION: dict[str, tuple[int, float]] = {"bfloat16": (7, 2.0 ** -126),
                                               "float16": (10, 2.0 ** -14)}
# The f32-reference rule: an element also passes when BOTH the consumer's value and JAX's
# golden are within REFERENCE_ULPS ulps of the output's scale (its largest |f32 value|) of the
# float32 evaluation: room for intermediates rounded to bf16 one op at a time (IREE) instead of
# once (XLA's excess precision), which cancellation magnifies. 8 ulps are 6.25% of the
# output's scale for bf16 and 0.8% for f16; a wrong weight moves results by the order of the
# values themselves. Requiring the golden to be close too keeps a wrong golden from widening
# the bound.
REFERENCE_ULPS = 8

# `--atol/--rtol` of this run: replaces the rules above for every float output when set.
_OVERRIDE: tuple[float, float] | None = None


def set_override(atol: float | None, rtol: float | None) -> None:
    """Use `|a - e| <= atol + rtol*|e|` for every float output of this process's checks."""
    global _OVERRIDE
    if atol is None and rtol is None:
        _OVERRIDE = None
        return
    _OVERRIDE = (atol or 0.0, rtol or 0.0)


def _tolerance(dtype: str) -> tuple[float, float]:
    if _OVERRIDE is not None and dtype in TOLERANCES:
        return _OVERRIDE
    return TOLERANCES.get(dtype, EXACT)


@dataclass
class Comparison:
    """Error of one output of one check, over all golden cases."""

    output: str
    dtype: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    passed: bool = True
    rule: str = ""

    @property
    def tolerance(self) -> str:
        if self.rule:
            return self.rule
        atol, rtol = _tolerance(self.dtype)
        return "exact" if (atol, rtol) == EXACT else f"{atol:g}+{rtol:g}*|x|"


@dataclass
class CheckResult:
    """Outcome of one check: status is "pass", "fail" or "skip"."""

    check: str
    status: str
    detail: str = ""
    comparisons: list[Comparison] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        comps = [Comparison(**c) for c in data.get("comparisons", [])]
        return cls(data["check"], data["status"], data.get("detail", ""), comps)


def ulp(x: np.ndarray, dtype: str) -> np.ndarray:
    """One unit in the last place of `dtype` at |x| (subnormals: the smallest normal's)."""
    bits, tiny = LOW_PRECISION[dtype]
    mag = np.maximum(np.abs(x.astype(np.float64)), tiny)
    return np.exp2(np.floor(np.log2(mag)) - bits)


def compare(
    name: str, actual: np.ndarray, expected: np.ndarray, into: dict[str, Comparison],
    reference: np.ndarray | None = None,
) -> None:
    """Fold the error of `actual` vs `expected` for output `name` into `into[name]`.

    Every element passes when `|actual - expected| <= atol + rtol*|expected|` (TOLERANCES, or
    this run's --atol/--rtol). A bfloat16/float16 output with a float32 `reference` (the same
    program evaluated in float32, `f32_reference`) also passes an element when both the
    consumer's value and JAX's are within bf16/f16 rounding of that reference:
    `|actual - ref| <= 8 ulp(max|ref|)` and `|expected - ref| <= 8 ulp(max|ref|)` (max over the
    output): two compilers rounding differently both stay close to the f32 value, while a
    wrong result (a swapped weight) is far from it.
    """
    dtype = expected.dtype.name
    comp = into.setdefault(name, Comparison(name, dtype))
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        comp.passed = False
        comp.max_abs = math.inf
        return
    atol, rtol = _tolerance(dtype)
    if not comp.rule:  # the worker's rule (with this run's --atol/--rtol) for the table
        comp.rule = "exact" if (atol, rtol) == EXACT else f"{atol:g}+{rtol:g}*|x|"
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    err = np.where(both_nan, 0.0, np.abs(a - e))
    err = np.where(np.isnan(err), np.inf, err)
    if not err.size:
        return
    comp.max_abs = max(comp.max_abs, float(err.max()))
    comp.max_rel = max(comp.max_rel, float((err / np.maximum(np.abs(e), 1e-30)).max()))
    ok = err <= atol + rtol * np.abs(e)
    if reference is not None and dtype in LOW_PRECISION and _OVERRIDE is None \
            and reference.shape == expected.shape:
        comp.rule = f"{atol:g}+{rtol:g}*|x| or both within {REFERENCE_ULPS}ulp(scale) of f32"
        r = reference.astype(np.float64)
        finite = np.isfinite(r) & np.isfinite(e) & np.isfinite(a)
        scale = np.asarray(np.abs(r[finite]).max() if finite.any() else 0.0)
        bound = REFERENCE_ULPS * float(ulp(scale, dtype))
        ok = ok | (finite & (np.abs(a - r) <= bound) & (np.abs(e - r) <= bound))
    if not bool(np.all(ok)):
        comp.passed = False


# --------------------------------------------------------------------------------------------
# float32 reference of low-precision programs

_HEX_LOW = re.compile(r'dense<"0x([0-9A-Fa-f]+)">(\s*:\s*tensor<(?:[0-9]+x)*)(bf16|f16)>')
_LOW_TYPE = re.compile(r"(?<=[<x\s(,])b?f16(?!\w)")


def f32_module_text(text: str) -> str:
    """The StableHLO text with every bf16/f16 type (and constant) widened to f32."""
    import ml_dtypes

    def widen(m: re.Match[str]) -> str:
        src = ml_dtypes.bfloat16 if m.group(3) == "bf16" else np.float16
        data = np.frombuffer(bytes.fromhex(m.group(1)), src).astype("<f4")
        return f'dense<"0x{data.tobytes().hex().upper()}">{m.group(2)}f32>'

    return _LOW_TYPE.sub("f32", _HEX_LOW.sub(widen, text))


def _low_precision_results(program: manifest_pb2.Program) -> bool:
    return any(r.dtype.numpy in LOW_PRECISION for r in program.results)


def f32_reference(art: jaxport.artifact.Artifact, program: manifest_pb2.Program,
                  cases: Sequence[jaxport.artifact.Golden]) -> dict[str, dict[str, np.ndarray]]:
    """{case: {result: float32 array}}: the program's text with bf16/f16 widened to f32,
    compiled by PJRT and run on the case (low-precision arguments widened exactly).

    Empty when the program has no low-precision result, cannot be widened or is sharded (then
    the plain tolerance applies).
    """
    if not _low_precision_results(program) or program.polymorphic \
            or "cpu" not in art.manifest.platforms \
            or _OVERRIDE is not None or art.manifest.nr_devices > 1:  # one device only
        return {}
    import jax
    from jax.extend import backend as jex_backend

    client = jex_backend.get_backend("cpu")
    device = client.local_devices()[0]
    try:
        text = f32_module_text((art.path / program.mlir_file).read_text())
        executable = client.compile_and_load(
            text.encode(), [device],
            jex_backend.get_compile_options(num_replicas=1, num_partitions=1))
    except Exception:  # e.g. a bitcast of bf16 bits: no f32 twin; plain tolerance applies
        return {}
    params = art.parameters()
    refs: dict[str, dict[str, np.ndarray]] = {}
    names = [r.name for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    for case in cases:
        values = []
        for arg, v in zip(program.arguments,
                          _argument_values(art.manifest, program, case, params), strict=True):
            v = np.asarray(v)
            values.append(v.astype(np.float32) if arg.dtype.numpy in LOW_PRECISION else v)
        out = executable.execute_sharded([jax.device_put(v, device) for v in values]) \
            .disassemble_into_single_device_arrays()
        refs[case.name] = {n: np.asarray(o[0]) for n, o in zip(names, out, strict=True)}
    return refs


# --------------------------------------------------------------------------------------------
# parent side


def run_checks(
    artifact_dir: str | os.PathLike[str],
    *,
    checks: Sequence[str] = CHECKS,
    timeout: float = 900.0,
    parallel: int = 2,
    atol: float | None = None,
    rtol: float | None = None,
    allow_unexecuted: bool = False,
) -> list[CheckResult]:
    """Run each check in its own fresh `python -I` process (`parallel` at a time).

    `jaxexport` and `pjrt` run once per platform of the artifact that is present here
    (`present_platforms`); their results are named `jaxexport@cuda` etc. when there are
    several. An artifact none of whose platforms is present raises ExportError naming both
    lists, unless `allow_unexecuted` (then only `checksums` runs and the execution checks are
    reported skipped). `atol`/`rtol` replace the tolerance rules for every float output
    (docs/artifact-format.md "Tolerances"). Returns the results in `checks` order.
    """
    for flag, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ExportError(f"--{flag} must be a finite number >= 0, got {value}")
    root = Path(artifact_dir).resolve()
    m = manifest_mod.load(root)  # a clear one-line error before spawning anything
    for check in checks:
        if check not in CHECKS:
            raise ExportError(f"unknown check {check!r}; choose from {', '.join(CHECKS)}")
    listed = list(m.platforms)
    executing = [c for c in checks if c in PLATFORM_CHECKS]
    here = present_platforms(timeout) if executing else []
    runnable = [p for p in listed if p in here]
    skipped: dict[str, CheckResult] = {}
    if executing and not runnable:
        message = (f"none of the artifact's platforms ({', '.join(listed)}) is available here "
                   f"(present: {', '.join(here) or 'none'}), so nothing can execute the program")
        if not allow_unexecuted:
            raise ExportError(f"{message}; run verify on a machine with one of them, or pass "
                              "--allow-unexecuted to check the checksums only")
        skipped = {c: CheckResult(c, "skip", message) for c in checks if c != "checksums"}
    tasks: list[tuple[str, str]] = []
    for check in checks:
        if check in skipped:
            continue
        if check in PLATFORM_CHECKS:
            tasks += [(check, p) for p in runnable]
        else:
            tasks.append((check, "cpu"))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        done = list(pool.map(
            lambda t: _run_worker(t[0], root, timeout, (atol, rtol), t[1]), tasks))
    if len(runnable) > 1:
        for (check, platform), result in zip(tasks, done, strict=True):
            if check in PLATFORM_CHECKS:
                result.check = f"{check}@{platform}"
    by_check: dict[str, list[CheckResult]] = {}
    for (check, _), result in zip(tasks, done, strict=True):
        by_check.setdefault(check, []).append(result)
    return [r for c in checks for r in (by_check.get(c) or [skipped[c]])]


def manifest_warnings(m: manifest_pb2.Manifest) -> list[str]:
    """One line per thing about the artifact a consumer must know before running it."""
    out = manifest_mod.compatibility_warnings(m)
    if m.allowed_custom_calls:
        out.append("verify's workers register no custom-call kernel, so their execution "
                   f"checks fail on {', '.join(m.allowed_custom_calls)}")
    return out


# Run with the caller's environment in a fresh isolated process: what a worker will find.
_PROBE = (
    "import json, jax\n"
    "found = []\n"
    f"for p in {KNOWN_PLATFORMS!r}:\n"
    "    try:\n"
    "        if jax.devices(p):\n"
    "            found.append(p)\n"
    "    except RuntimeError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


def present_platforms(timeout: float = 300.0) -> list[str]:
    """The jax platforms (cpu, cuda, rocm, tpu) with a device here, as a verify worker sees
    them: probed in a fresh `python -I` process with this process's environment (so
    JAX_PLATFORMS=cpu limits it to cpu)."""
    with tempfile.TemporaryDirectory(prefix="jaxport-verify-") as cwd:
        proc = subprocess.run([sys.executable, "-I", "-c", _PROBE], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, env=_worker_env())
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExportError(f"cannot list the platforms present here: jax failed to start "
                          f"(exit {proc.returncode}): {tail}") from None
    return [str(p) for p in found]


def _run_worker(check: str, root: Path, timeout: float,
                tolerance: tuple[float | None, float | None] = (None, None),
                platform: str = "cpu") -> CheckResult:
    cmd = [sys.executable, "-I", "-m", "jaxport.exporter.verify", "--worker", check, str(root),
           "--platform", platform]
    atol, rtol = tolerance
    if atol is not None:
        cmd += ["--atol", repr(float(atol))]
    if rtol is not None:
        cmd += ["--rtol", repr(float(rtol))]
    with tempfile.TemporaryDirectory(prefix="jaxport-verify-") as cwd:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd, env=_worker_env())
        except subprocess.TimeoutExpired:
            return CheckResult(check, "fail", f"timed out after {timeout:.0f}s")
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        return CheckResult.from_json(json.loads(last[0]))
    except (ValueError, KeyError, TypeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult(check, "fail", f"worker crashed (exit {proc.returncode}): {tail}")


def _worker_env() -> dict[str, str]:
    """The caller's environment (JAX_PLATFORMS included: it says which platforms verify may
    use), without PYTHONPATH."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # -I ignores it anyway; make the intent explicit
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def format_table(results: Sequence[CheckResult]) -> str:
    """Table of check, output, max abs/rel error, tolerance, result; then details."""
    rows = [("check", "output", "max abs err", "max rel err", "tolerance", "result")]
    for r in results:
        if not r.comparisons:
            rows.append((r.check, "-", "-", "-", "-", r.status.upper()))
        for c in r.comparisons:
            rows.append((r.check, c.output, f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", c.tolerance,
                         "PASS" if c.passed else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.detail:
            lines.append(f"{r.check}: {r.status}: {r.detail}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# worker side (runs inside `python -I`)


def find_iree_tool(name: str) -> str | None:
    """An IREE binary next to this interpreter (the venv) first, then on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def _uses_x64(m: manifest_pb2.Manifest) -> bool:
    return any(
        a.dtype.itemsize == 8 for p in m.programs for a in [*p.arguments, *p.results]
    )


def _cases(
    goldens: Sequence[jaxport.artifact.Golden], program: manifest_pb2.Program
) -> list[jaxport.artifact.Golden]:
    """The golden cases of `program` that have something to compare against: of its batch
    size; for a bucket program, those at its sizes (the polymorphic program runs them all)."""
    return [g for g in goldens
            if g.batch_size == program.batch_size and (g.outputs or g.check_outputs)
            and (not program.dims or dict(g.dims) == dict(program.dims))]


def _argument_values(m: manifest_pb2.Manifest, program: manifest_pb2.Program,
                     case: jaxport.artifact.Golden, params: dict[str, np.ndarray],
                     platform: str = "cpu") -> list[Any]:
    """Every @main argument for one golden case, bound purely from the manifest order (the
    platform index is `platform`'s position in the manifest's platforms)."""
    values: list[Any] = []
    for arg in program.arguments:
        if arg.role == _ARG.ARGUMENT_ROLE_PARAMETER:
            values.append(params[arg.name])
        elif arg.role == _ARG.ARGUMENT_ROLE_INPUT:
            values.append(case.inputs[arg.name])
        elif arg.role == _ARG.ARGUMENT_ROLE_PLATFORM_INDEX:
            # The manifest's dtype (int32, or int64 when lowered under jax_enable_x64).
            values.append(np.asarray(list(m.platforms).index(platform),
                                     manifest_mod.numpy_dtype(arg.dtype)))
        else:
            raise ArtifactError(
                f"argument {arg.name!r}: tokens (ordered effects) are not supported"
            )
    return values


def _expected(case: jaxport.artifact.Golden) -> dict[str, np.ndarray]:
    """What a case's results must be: its outputs and its raw check outputs, by result name."""
    return {**case.outputs, **case.check_outputs}


def _compare_case(program: manifest_pb2.Program, results: Sequence[np.ndarray],
                  expected: dict[str, np.ndarray], comps: dict[str, Comparison],
                  reference: dict[str, np.ndarray] | None = None) -> None:
    array_results = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    if len(results) != len(array_results):
        raise ArtifactError(f"program returned {len(results)} results, manifest lists "
                            f"{len(array_results)}")
    for res, value in zip(array_results, results, strict=True):
        if res.name in expected and res.role == _RES.RESULT_ROLE_CHECK:
            _compare_check_bits(np.asarray(value), expected[res.name], comps)
        elif res.name in expected:
            actual = np.asarray(value)
            compare(res.name, actual, expected[res.name], comps,
                    (reference or {}).get(res.name))


def _compare_check_bits(actual: np.ndarray, expected: np.ndarray,
                        comps: dict[str, Comparison]) -> None:
    """checkify check outputs (flags, codes, payloads) must match bit for bit: one row."""
    comp = comps.setdefault("check outputs", Comparison("check outputs", "bit-exact"))
    if actual.shape != expected.shape or actual.dtype != expected.dtype or \
            actual.tobytes() != expected.tobytes():
        comp.passed = False
        comp.max_abs = math.inf


def _check_checksums(art: jaxport.artifact.Artifact) -> CheckResult:
    m = art.manifest
    manifest_mod.verify_files(art.path, m)
    n_params = sum(a.role == _ARG.ARGUMENT_ROLE_PARAMETER for p in m.programs for a in p.arguments)
    return CheckResult("checksums", "pass", f"{len(m.files)} files, {n_params} parameters")


def _check_manifest_matches(exp: Any, m: manifest_pb2.Manifest,
                            program: manifest_pb2.Program, mesh: Any = None) -> None:
    """The manifest's argument list (and a sharded program's layouts) is exactly what jax
    recorded for the program."""
    import jax

    if tuple(exp.platforms) != tuple(m.platforms):
        raise ArtifactError(f"manifest platforms {list(m.platforms)} != program {exp.platforms}")
    if exp.nr_devices != max(1, m.nr_devices):
        raise ArtifactError(f"manifest nr_devices {m.nr_devices} != the program's "
                            f"{exp.nr_devices}")
    if mesh is not None:
        recorded = exp.in_shardings_jax(mesh)
        laid_out = [(f"argument {a.index}", a, recorded[a.leaf_index])
                    for a in program.arguments if a.leaf_index >= 0]
        results = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
        laid_out += [(f"result {r.index}", r, s)
                     for r, s in zip(results, exp.out_shardings_jax(mesh), strict=True)]
        for what, entry, sharding in laid_out:
            want = sharding_io.spec_strings(sharding.spec, len(entry.shape))
            if list(entry.sharding.spec) != want:
                raise ArtifactError(
                    f"manifest {what} ({entry.name}) sharding {list(entry.sharding.spec)} != "
                    f"the program's {want}: the manifest was edited or is stale")
    n = exp.in_tree.num_leaves
    paths = [jax.tree_util.keystr(p) for p, _ in
             jax.tree_util.tree_flatten_with_path(exp.in_tree.unflatten(list(range(n))))[0]]
    leaf_args = [a for a in program.arguments
                 if a.role in (_ARG.ARGUMENT_ROLE_PARAMETER, _ARG.ARGUMENT_ROLE_INPUT)]
    kept = [a.leaf_index for a in leaf_args]
    if kept != list(exp.module_kept_var_idx):
        raise ArtifactError(
            f"manifest argument order (leaves {kept}) does not match the program's "
            f"(leaves {list(exp.module_kept_var_idx)}): the manifest was edited or is stale"
        )
    declared = module_mod.main_signature(exp.mlir_module())
    described = ["!stablehlo.token" if a.role == _ARG.ARGUMENT_ROLE_TOKEN else
                 "tensor<" + "".join("?x" if d < 0 else f"{d}x" for d in a.shape)
                 + a.dtype.mlir + ">"
                 for a in program.arguments]
    if declared != described:
        raise ArtifactError(
            f"{program.mlirbc_file}: @main takes {declared}, the manifest describes "
            f"{described}: the manifest was edited or is stale"
        )
    inputs = [i.name for i in m.inputs]
    expressions = {d.name: d.expression for d in m.dimensions}
    for arg in leaf_args:
        aval = exp.in_avals[arg.leaf_index]
        if arg.role == _ARG.ARGUMENT_ROLE_PARAMETER:
            want_path = "[0][0]" + arg.key_path
        else:
            want_path = f"[0][{inputs.index(arg.name) + 1}]"
        # A symbolic axis (-1, named) is the dimension's expression in jax's aval (`8*T_8`).
        want_shape = [expressions.get(n, "?") if n else str(d)
                      for d, n in zip(arg.shape, list(arg.dim_names) or [""] * len(arg.shape),
                                      strict=True)]
        if paths[arg.leaf_index] != want_path or [str(d) for d in aval.shape] != want_shape or \
                np.dtype(aval.dtype) != manifest_mod.numpy_dtype(arg.dtype):
            raise ArtifactError(
                f"manifest argument {arg.index} ({arg.name}) says {arg.dtype.numpy}"
                f"{list(arg.shape)} at {want_path}, the program has {aval.dtype}"
                f"{list(aval.shape)} at {paths[arg.leaf_index]}"
            )


def _check_jaxexport(art: jaxport.artifact.Artifact, platform: str) -> CheckResult:
    import jax

    m = art.manifest
    goldens = art.goldens()
    comps: dict[str, Comparison] = {}
    device = jax.devices(platform)[0]
    mesh = art.mesh()  # a sharded program runs on its nr_devices devices
    for program in m.programs:  # every batch size's program (one when unbatched)
        exp = art.exported(program.batch_size, dims=dict(program.dims) or None)
        _check_manifest_matches(exp, m, program, mesh)
        refs = f32_reference(art, program, _cases(goldens, program))
        # A sharded program: each leaf laid out as its manifest sharding says (once per program).
        shardings = None if mesh is None else art.leaf_shardings(mesh, program.batch_size)
        for case in _cases(goldens, program):
            # Stored parameters and the case's inputs in the exported pytree; zeros for
            # leaves jax dropped (any value of the right type).
            args, kwargs = art.call_arguments(case.inputs, program.batch_size,
                                              dims=dict(program.dims) or None)
            if shardings is None:
                args, kwargs = jax.device_put((args, kwargs), device)
            else:
                leaves, tree = jax.tree.flatten((args, kwargs))
                args, kwargs = jax.tree.unflatten(tree, jax.device_put(leaves, shardings))
            results = jax.tree.leaves(exp.call(*args, **kwargs))
            _compare_case(program, results, _expected(case), comps, refs.get(case.name))
            if case.gradients:
                _compare_gradients(exp, program, case, args, comps)
    return _result("jaxexport", comps, _cases_detail(goldens, m) + _where(m, platform))


def _compare_gradients(exp: Any, program: manifest_pb2.Program,
                       case: jaxport.artifact.Golden, args: Sequence[Any],
                       comps: dict[str, Comparison]) -> None:
    """`jax.vjp` of the loaded program (its serialized VJP, vjp_order >= 1) with the case's
    output cotangents equals the gradients `jax.vjp` of the original gave: one row per
    argument, `grad <name>`."""
    import jax

    results, vjp_fn = jax.vjp(exp.call, *args)
    leaves, tree = jax.tree.flatten(results)
    names = [r.name for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    cts = [case.output_cotangents[n] if n in case.output_cotangents else
           np.zeros(v.shape, jax.dtypes.float0 if not np.issubdtype(v.dtype, np.inexact)
                    else v.dtype)
           for n, v in zip(names, leaves, strict=True)]
    grads = jax.tree.leaves(vjp_fn(jax.tree.unflatten(tree, cts)))
    by_name = {a.name: a.leaf_index for a in program.arguments}
    for name, want in case.gradients.items():
        compare(f"grad {name}", np.asarray(grads[by_name[name]]), want, comps)


def _check_pjrt(art: jaxport.artifact.Artifact, platform: str) -> CheckResult:
    import jax
    from jax.extend import backend as jex_backend

    m = art.manifest
    client = jex_backend.get_backend(platform)
    device = client.local_devices()[0]
    mesh = art.mesh()
    # A sharded program: one replica, nr_devices partitions (SPMD), logical device i = the
    # mesh's i-th device, every argument laid out as the manifest's sharding says.
    devices = [device] if mesh is None else list(mesh.devices.flat)
    goldens = art.goldens()
    comps: dict[str, Comparison] = {}
    if not _fixed_programs(m):
        return _polymorphic_skip("pjrt")
    for program in _fixed_programs(m):  # every batch size's or bucket's program
        bytecode = (art.path / program.mlirbc_file).read_bytes()
        try:
            executable = client.compile_and_load(
                bytecode, devices,
                jex_backend.get_compile_options(
                    num_replicas=1, num_partitions=len(devices),
                    device_assignment=np.array([[d.id for d in devices]])),
            )
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            return CheckResult("pjrt", "fail",
                               f"PJRT cannot compile {program.mlirbc_file}: {first}")
        params = art.parameters()
        refs = f32_reference(art, program, _cases(goldens, program))
        # Where each argument goes: the device, or its manifest sharding on the mesh.
        places = [device if mesh is None else sharding_io.named_sharding(mesh, a.sharding)
                  for a in program.arguments]
        for case in _cases(goldens, program):
            values = _argument_values(m, program, case, params, platform)
            buffers = [jax.device_put(v, place)
                       for v, place in zip(values, places, strict=True)]
            out = executable.execute_sharded(buffers).disassemble_into_single_device_arrays()
            if mesh is None:
                results = [np.asarray(o[0]) for o in out]
            else:  # each result's shards, assembled as its manifest sharding says
                plain = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
                results = [np.asarray(jax.make_array_from_single_device_arrays(
                    tuple(r.shape), sharding_io.named_sharding(mesh, r.sharding), shards))
                    for r, shards in zip(plain, out, strict=True)]
            _compare_case(program, results, _expected(case), comps, refs.get(case.name))
    detail = _cases_detail(goldens, m, _fixed_programs(m))
    return _result("pjrt", comps, detail + _where(m, platform))


def _where(m: manifest_pb2.Manifest, platform: str) -> str:
    if not m.HasField("mesh"):
        return f", on {platform}"
    return (f", on {m.nr_devices} {platform} devices (mesh "
            f"{sharding_io.describe_mesh(m.mesh)})")


def _iree_type(shape: Sequence[int], dtype: manifest_pb2.DType) -> str:
    return "".join(f"{d}x" for d in shape) + dtype.mlir


def iree_compile_command(compiler: str, mlirbc: Path, vmfb: Path,
                         program: manifest_pb2.Program) -> list[str]:
    """The iree-compile command line for llvm-cpu (see docs/artifact-format.md).

    IREE demotes f64 to f32 by default; a program with f64 values must keep them.
    """
    cmd = [compiler, "--iree-input-type=stablehlo", "--iree-hal-target-device=local",
           "--iree-hal-local-target-device-backends=llvm-cpu"]
    if any(v.dtype.numpy == "float64" for v in [*program.arguments, *program.results]):
        cmd.append("--iree-input-demote-f64-to-f32=false")
    return [*cmd, str(mlirbc), "-o", str(vmfb)]


def _check_iree(art: jaxport.artifact.Artifact) -> CheckResult:
    m = art.manifest
    compiler, runner = find_iree_tool("iree-compile"), find_iree_tool("iree-run-module")
    if not compiler or not runner:
        return CheckResult("iree", "skip", "IREE not installed "
                           "(pip install iree-base-compiler iree-base-runtime)")
    if "cpu" not in m.platforms:
        return CheckResult("iree", "skip", "IREE compiles for llvm-cpu and the artifact is not "
                           f"exported for cpu ({', '.join(m.platforms)})")
    if m.nr_devices > 1:
        return CheckResult("iree", "skip", not_run_on_iree(m))
    goldens = art.goldens()
    comps: dict[str, Comparison] = {}
    if not _fixed_programs(m):
        return _polymorphic_skip("iree")
    for program in _fixed_programs(m):  # every batch size's or bucket's program
        failed = _check_iree_program(art, program, _cases(goldens, program), compiler, runner,
                                     comps)
        if failed is not None:
            return failed
    return _result("iree", comps, _cases_detail(goldens, m, _fixed_programs(m)) + ", llvm-cpu")


def _fixed_programs(m: manifest_pb2.Manifest) -> list[manifest_pb2.Program]:
    """The programs a consumer without jax runs: all but a shape-polymorphic one (its
    `.mlirbc` has dynamic shapes and shape assertions only jax resolves)."""
    return [p for p in m.programs if not p.polymorphic]


def _polymorphic_skip(check: str) -> CheckResult:
    return CheckResult(check, "skip", "the only program is shape-polymorphic (dynamic shapes "
                       "only jax runs); export with --buckets for fixed-shape programs")


def not_run_on_iree(m: manifest_pb2.Manifest) -> str:
    """Why verify does not run IREE on a sharded program (its `iree` row says so)."""
    return (f"not run: the program is sharded over {m.nr_devices} devices (mesh "
            f"{sharding_io.describe_mesh(m.mesh)}) and IREE runs single-device programs; "
            "jaxexport and pjrt ran it on that many devices")


def _cases_detail(goldens: Sequence[jaxport.artifact.Golden], m: manifest_pb2.Manifest,
                  programs: Sequence[manifest_pb2.Program] | None = None) -> str:
    programs = list(m.programs) if programs is None else list(programs)
    n = sum(len(_cases(goldens, p)) for p in programs)
    if len(programs) == 1:
        return f"{n} golden case(s)"
    if m.dimensions:
        what = ", ".join("polymorphic" if p.polymorphic else  # dims in declaration order
                         ".".join(f"{d.name}{p.dims[d.name]}" for d in m.dimensions)
                         for p in programs)
        return f"{n} golden case(s) over {len(programs)} programs ({what})"
    sizes = ",".join(str(p.batch_size) for p in programs)
    return f"{n} golden case(s) over {len(programs)} programs (batch sizes {sizes})"


def _check_iree_program(art: jaxport.artifact.Artifact, program: manifest_pb2.Program,
                        cases: Sequence[jaxport.artifact.Golden], compiler: str, runner: str,
                        comps: dict[str, Comparison]) -> CheckResult | None:
    """Compile and run one program with IREE; a failing CheckResult, or None (compared)."""
    params = art.parameters()
    refs = f32_reference(art, program, cases)
    with tempfile.TemporaryDirectory(prefix="jaxport-iree-") as tmp_name:
        tmp = Path(tmp_name)
        vmfb = tmp / "model.vmfb"
        proc = subprocess.run(
            iree_compile_command(compiler, art.path / program.mlirbc_file, vmfb, program),
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            return CheckResult("iree", "fail", "iree-compile failed: " + _first_error(proc.stderr))
        results_meta = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
        for case in cases:
            cmd = [runner, f"--module={vmfb}", "--device=local-task", "--function=main"]
            values = _argument_values(art.manifest, program, case, params)
            for arg, value in zip(program.arguments, values, strict=True):
                cmd.append(_iree_input(tmp, arg, np.asarray(value)))
            for i in range(len(results_meta)):
                cmd.append(f"--output=@{tmp / f'out{i}.bin'}")
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                return CheckResult("iree", "fail",
                                   f"iree-run-module failed on {case.name}: "
                                   + _first_error(proc.stderr))
            outs = []
            for i, res in enumerate(results_meta):
                raw = np.fromfile(tmp / f"out{i}.bin", dtype=manifest_mod.numpy_dtype(res.dtype))
                outs.append(raw.reshape(tuple(res.shape)))
            _compare_case(program, outs, _expected(case), comps, refs.get(case.name))
    return None


def _iree_input(tmp: Path, arg: manifest_pb2.Argument, value: np.ndarray) -> str:
    """`--input=` for one argument: .npy where numpy has a descriptor, raw bytes for bf16.

    numpy has no bfloat16 descriptor (ml_dtypes saves it as `<V2`), so bf16 goes as a raw
    little-endian file with an explicit IREE type: `--input=2x3xbf16=@argN.bin`.
    """
    if arg.dtype.numpy == "bfloat16":
        path = tmp / f"arg{arg.index}.bin"
        np.asarray(value, order="C").tofile(path)
        return f"--input={_iree_type(arg.shape, arg.dtype)}=@{path}"
    path = tmp / f"arg{arg.index}.npy"
    np.save(path, np.asarray(value, order="C"))
    return f"--input=@{path}"


def _first_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "error" in ln.lower()] or stderr.splitlines()
    return (lines or ["no output"])[0].strip()[:300]


def _result(check: str, comps: dict[str, Comparison], detail: str) -> CheckResult:
    if not comps:
        return CheckResult(check, "fail", "no golden cases to compare against")
    ok = all(c.passed for c in comps.values())
    return CheckResult(check, "pass" if ok else "fail", detail, list(comps.values()))


def _worker(check: str, artifact_dir: str, platform: str = "cpu") -> CheckResult:
    # Checksums are a check of their own: the others read the artifact without hashing it.
    art = jaxport.artifact.open(artifact_dir, verify_checksums=False)
    m = art.manifest
    source_module = m.source_function.split(":", 1)[0] if ":" in m.source_function else ""
    if _uses_x64(m):
        import jax

        jax.config.update("jax_enable_x64", True)
    if check in PLATFORM_CHECKS and m.nr_devices > 1:
        art.mesh()  # a sharded program's devices, before anything starts jax's backend
    if check in PLATFORM_CHECKS:
        result = {"jaxexport": _check_jaxexport, "pjrt": _check_pjrt}[check](art, platform)
    else:
        result = {"checksums": _check_checksums, "iree": _check_iree}[check](art)
    if source_module and source_module in sys.modules:
        return CheckResult(check, "fail", f"the model's module {source_module!r} was imported")
    if source_module and importlib.util.find_spec(source_module.split(".")[0]) is None:
        result.detail += f"; model module {source_module!r} not importable here"
    return result


def _worker_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="jaxport verify worker")
    parser.add_argument("--worker", choices=CHECKS, required=True)
    parser.add_argument("artifact_dir")
    parser.add_argument("--atol", type=float)
    parser.add_argument("--rtol", type=float)
    parser.add_argument("--platform", default="cpu", choices=KNOWN_PLATFORMS)
    ns = parser.parse_args(argv)
    set_override(ns.atol, ns.rtol)
    try:
        result = _worker(ns.worker, ns.artifact_dir, ns.platform)
    except ExportError as exc:
        result = CheckResult(ns.worker, "fail", str(exc))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        result = CheckResult(ns.worker, "fail", f"{type(exc).__name__}: {first}"[:500])
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
