"""What the execution checks share (worker side): the golden cases of a program and a run's
results compared with a case's expected ones. A program's arguments are bound from the
manifest by `jaxport.artifact.binding`."""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import jaxport.artifact
import numpy as np
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify.results import CheckResult
from jaxport.exporter.verify.tolerances import Comparison, compare

_RES = manifest_pb2.ResultRole


def find_tool(name: str) -> str | None:
    """A program an execution check runs (IREE's, jaxport-native-goldens): next to this
    interpreter (the venv) first, then on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def program_cases(
    goldens: Sequence[jaxport.artifact.Golden], program: manifest_pb2.Program
) -> list[jaxport.artifact.Golden]:
    """The golden cases of `program` that have something to compare against: of its batch
    size; for a bucket program, those at its sizes (the polymorphic program runs them all)."""
    return [g for g in goldens
            if g.batch_size == program.batch_size and (g.outputs or g.check_outputs)
            and (not program.dims or dict(g.dims) == dict(program.dims))]


def expected(case: jaxport.artifact.Golden) -> dict[str, np.ndarray]:
    """What a case's results must be: its outputs and its raw check outputs, by result name."""
    return {**case.outputs, **case.check_outputs}


def compare_case(program: manifest_pb2.Program, results: Sequence[np.ndarray],
                 expected: dict[str, np.ndarray], comps: dict[str, Comparison],
                 reference: dict[str, np.ndarray] | None = None) -> None:
    """Fold one run's results (every non-token result, in order) into `comps`: outputs by the
    tolerance rule (against the f32 `reference` where there is one), check outputs bit for
    bit."""
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


def fixed_programs(m: manifest_pb2.Manifest) -> list[manifest_pb2.Program]:
    """The programs a consumer without jax runs: all but a shape-polymorphic one (its
    `.mlirbc` has dynamic shapes and shape assertions only jax resolves)."""
    return [p for p in m.programs if not p.polymorphic]


def polymorphic_skip(check: str) -> CheckResult:
    """The skipped row of a check that runs fixed-shape programs only, when there are none."""
    return CheckResult(check, "skip", "the only program is shape-polymorphic (dynamic shapes "
                       "only jax runs); export with --buckets for fixed-shape programs")


def detail(goldens: Sequence[jaxport.artifact.Golden], m: manifest_pb2.Manifest,
                 programs: Sequence[manifest_pb2.Program] | None = None) -> str:
    """How many cases ran over which programs, for a check's detail line."""
    programs = list(m.programs) if programs is None else list(programs)
    n = sum(len(program_cases(goldens, p)) for p in programs)
    if len(programs) == 1:
        return f"{n} golden case(s)"
    if m.dimensions:
        what = ", ".join("polymorphic" if p.polymorphic else  # dims in declaration order
                         ".".join(f"{d.name}{p.dims[d.name]}" for d in m.dimensions)
                         for p in programs)
        return f"{n} golden case(s) over {len(programs)} programs ({what})"
    sizes = ",".join(str(p.batch_size) for p in programs)
    return f"{n} golden case(s) over {len(programs)} programs (batch sizes {sizes})"


def where(m: manifest_pb2.Manifest, platform: str) -> str:
    """Where a platform check ran, for its detail line (a sharded program: its mesh)."""
    if not m.HasField("mesh"):
        return f", on {platform}"
    return (f", on {m.nr_devices} {platform} devices (mesh "
            f"{sharding_io.describe_mesh(m.mesh)})")
