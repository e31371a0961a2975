"""Helpers shared by the exporter tests (test models, exporting them, running the real CLI).

A module of its own (not conftest) so `from exporter_helpers import ...` is unambiguous when
pytest collects several test directories that each have a conftest.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "tests" / "models"
JAXPORT = REPO / ".venv" / "bin" / "jaxport"
if str(MODELS_DIR) not in sys.path:
    sys.path.insert(0, str(MODELS_DIR))


def model_module(name: str):
    """Import a test model from tests/models."""
    return importlib.import_module(name)


def input_specs(mod) -> dict[str, jax.ShapeDtypeStruct]:
    """The model's INPUTS table as ShapeDtypeStructs."""
    return {k: jax.ShapeDtypeStruct(shape, np.dtype(dt) if dt != "bfloat16" else jax.numpy.bfloat16)
            for k, (dt, shape) in mod.INPUTS.items()}


def export_model(name: str, out_dir: Path, **kwargs) -> manifest_pb2.Manifest:
    """Export tests/models/<name>.py (init(key(0)) + predict) to out_dir."""
    mod = model_module(name)
    params = mod.init(jax.random.key(0))
    return api.export(mod.predict, params, input_specs(mod), out_dir, quiet=True,
                      source_function=f"{name}:predict", **kwargs)


def run_cli(args: list[str], cwd: Path, *, pythonpath: tuple[Path, ...] = (MODELS_DIR,),
            timeout: float = 600, fresh_process: bool = False
            ) -> subprocess.CompletedProcess[str]:
    """`jaxport ARGS` with the test models importable: the console script's `main` in this
    process (`support.inprocess.run_jaxport`), or with `fresh_process` the console script in
    a process of its own (what a test of the process itself needs: `--mesh`, which configures
    jax's devices before jax starts; the script's own start)."""
    if not fresh_process and "--mesh" not in args:  # --mesh: devices before jax starts
        from support.inprocess import run_jaxport

        return run_jaxport(args, cwd, pythonpath)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    env["JAX_PLATFORMS"] = "cpu"
    return subprocess.run([str(JAXPORT), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def model_cli_args(name: str, out: Path, *extra: str) -> list[str]:
    """`jaxport export` arguments for tests/models/<name>.py with MODULE:init params."""
    mod = model_module(name)
    inputs = []
    for k, (dt, shape) in mod.INPUTS.items():
        inputs += ["--input", f"{k}:{dt}[{','.join(map(str, shape))}]"]
    return ["export", f"{name}:predict", "--params", f"{name}:init", *inputs, "--out", str(out),
            "--quiet", *extra]
