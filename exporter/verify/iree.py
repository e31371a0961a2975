"""The `iree` check: `iree-compile` + `iree-run-module` (IREE's C runtime CLI, llvm-cpu) on every
fixed-shape program with every argument in manifest order equals the goldens (skipped when
IREE is not installed, the artifact is not exported for cpu, or its program is sharded)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import jaxport.artifact
import numpy as np
from jaxport.artifact import binding
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify import cases
from jaxport.exporter.verify.reference import f32_reference
from jaxport.exporter.verify.results import CheckResult, result
from jaxport.exporter.verify.tolerances import Comparison

__all__ = ["check", "iree_compile_command", "not_run_on_iree"]

_RES = manifest_pb2.ResultRole


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


def not_run_on_iree(m: manifest_pb2.Manifest) -> str:
    """Why verify does not run IREE on a sharded program (its `iree` row says so)."""
    return (f"not run: the program is sharded over {m.nr_devices} devices (mesh "
            f"{sharding_io.describe_mesh(m.mesh)}) and IREE runs single-device programs; "
            "jaxexport and pjrt ran it on that many devices")


def check(art: jaxport.artifact.Artifact) -> CheckResult:
    """Compile and run every fixed-shape program with IREE on its cases."""
    m = art.manifest
    compiler, runner = cases.find_tool("iree-compile"), cases.find_tool("iree-run-module")
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
    if not cases.fixed_programs(m):
        return cases.polymorphic_skip("iree")
    for program in cases.fixed_programs(m):  # every batch size's or bucket's program
        failed = _check_program(art, program, cases.program_cases(goldens, program), compiler,
                                runner, comps)
        if failed is not None:
            return failed
    return result("iree", comps, cases.detail(goldens, m, cases.fixed_programs(m)) + ", llvm-cpu")


def _check_program(art: jaxport.artifact.Artifact, program: manifest_pb2.Program,
                   golden_cases: Sequence[jaxport.artifact.Golden], compiler: str,
                   runner: str,
                   comps: dict[str, Comparison]) -> CheckResult | None:
    """Compile and run one program with IREE; a failing CheckResult, or None (compared)."""
    params = art.parameters()
    refs = f32_reference(art, program, golden_cases)
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
        for case in golden_cases:
            cmd = [runner, f"--module={vmfb}", "--device=local-task", "--function=main"]
            values = binding.main_arguments(art.manifest, program, params, case.inputs, "cpu")
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
            cases.compare_case(program, outs, cases.expected(case), comps, refs.get(case.name))
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
