"""The `pjrt-c-api` check: every fixed-shape program run through the PJRT C API with no Python
on the execution path, the way a C++ or Go consumer runs the artifact.

The program is `jaxport-native-goldens` (bridge/front/cmd/jaxport-native-goldens, built next
to the venv's python by `make setup` / `make front`): the native engine the front serves
models with (bridge/front/engine, docs/native-engine.md). It reads `manifest.json`, checks the
StableHLO target against the plugin's window, reads every parameter from its zarr3 array and
checks it against the manifest's sha256, compiles each `.mlirbc` with JAX's semantics (fast
min/max off), binds the arguments in manifest order, runs every golden case and writes each raw
result (`--results`). The results are compared here with verify's one rule (`tolerances`: the
per-dtype bounds, the float32 reference of bf16/f16 programs, `--atol/--rtol`), as the `iree`
check compares IREE's.

Skipped, naming what to run, when the program is not built or it finds no PJRT plugin (exit 3:
`make pjrt-plugin`, or `JAXPORT_PJRT_PLUGIN`); skipped with the engine's reason for a model it
does not run (sharded, custom calls, polymorphic only: `jaxport serve` serves those on its
Python workers). Any other refusal (a weight or program whose sha256 is not the manifest's, a
StableHLO target outside the window, a compile error) fails with the engine's one line.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import jaxport.artifact
import numpy as np
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify import cases
from jaxport.exporter.verify.reference import f32_reference
from jaxport.exporter.verify.results import CheckResult, result
from jaxport.exporter.verify.tolerances import Comparison

__all__ = ["BINARY", "NAME", "check"]

NAME = "pjrt-c-api"
#: The native engine's goldens command, found next to this interpreter or on PATH.
BINARY = "jaxport-native-goldens"
#: Its exit status when there is no plugin to load (none found, or a CGO_ENABLED=0 build).
_NO_PLUGIN = 3


def check(art: jaxport.artifact.Artifact, timeout: float = 900.0) -> CheckResult:
    """Run every golden case through the native engine; compare its results here."""
    m = art.manifest
    binary = cases.find_tool(BINARY)
    if binary is None:
        return CheckResult(NAME, "skip", f"{BINARY} (the native engine's goldens program) is "
                           "not built: run `make front` (or `make setup`) in a jaxport checkout")
    programs = cases.fixed_programs(m)
    if not programs:
        return cases.polymorphic_skip(NAME)
    root = Path(art.path).resolve()
    with tempfile.TemporaryDirectory(prefix="jaxport-pjrt-c-api-") as out:
        try:
            proc = subprocess.run([binary, "--results", out, str(root)], capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return CheckResult(NAME, "fail", f"{BINARY} timed out after {timeout:.0f}s")
        line = _last_line(proc.stderr)
        if proc.returncode == _NO_PLUGIN:
            return CheckResult(NAME, "skip", line + _what_to_run(line))
        not_native = [row["not_native"] for row in _rows(proc.stdout)
                      if "not_native" in row and "case" not in row]
        if not_native:
            return CheckResult(NAME, "skip", "the native engine does not run this model "
                               f"(jaxport serve serves it on the Python workers): {not_native[0]}")
        if proc.returncode not in (0, 1):  # 1: its own rule saw a miss; verify's rule decides
            return CheckResult(NAME, "fail", line or f"{BINARY} exited {proc.returncode}")
        comps: dict[str, Comparison] = {}
        results_dir = Path(out) / root.name
        goldens = art.goldens()
        for program in programs:
            golden_cases = cases.program_cases(goldens, program)
            refs = f32_reference(art, program, golden_cases)
            for case in golden_cases:
                outs = _read_results(results_dir / case.name, program)
                if outs is None:
                    return CheckResult(NAME, "fail", f"{BINARY} wrote no results for golden "
                                       f"case {case.name} ({program.mlirbc_file})")
                cases.compare_case(program, outs, cases.expected(case), comps,
                                   refs.get(case.name))
    return result(NAME, comps, cases.detail(goldens, m, programs)
                  + ", native engine (PJRT C API, no Python)")


def _read_results(case_dir: Path, program: manifest_pb2.Program) -> list[np.ndarray] | None:
    """One case's results as the program's result dtypes and shapes, None when missing."""
    outs = []
    for i, res in enumerate(program.results):
        path = case_dir / f"{i}.bin"
        if not path.is_file():
            return None
        raw = np.fromfile(path, dtype=manifest_mod.numpy_dtype(res.dtype))
        outs.append(raw.reshape(tuple(res.shape)))
    return outs


def _rows(stdout: str) -> list[dict[str, object]]:
    """The program's JSON lines (a line that is not one is ignored: its stderr tells)."""
    rows = []
    for text in stdout.splitlines():
        try:
            row = json.loads(text)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _what_to_run(line: str) -> str:
    """What the skip of a program without a plugin adds when its line does not say it."""
    if "cgo" in line:
        return "; `make front` on a machine with a C compiler builds it with cgo"
    if "make pjrt-plugin" in line:
        return ""
    return "; `make pjrt-plugin` installs the pinned CPU plugin"


def _last_line(stderr: str) -> str:
    return (stderr.strip().splitlines() or [""])[-1].strip()[:500]
