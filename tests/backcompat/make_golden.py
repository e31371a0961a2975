"""Regenerate a back-compat golden artifact (run by hand, never by the test suite).

Usage (from the repo root): .venv/bin/python tests/backcompat/make_golden.py
It exports tests/models/nested.py into tests/backcompat/<date>_jax-<version>_nested/.
Never overwrite or delete an existing golden: old artifacts are the point.
"""

import datetime
import subprocess
import sys
from pathlib import Path

import jax

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

if __name__ == "__main__":
    out = HERE / f"{datetime.date.today()}_jax-{jax.__version__}_nested"
    cmd = [str(REPO / ".venv" / "bin" / "jaxport"), "export", "nested:predict",
           "--params", "nested:init", "--input", "x:float32[3,4]", "--input", "scale:float32[]",
           "--input", "ids:int32[3]", "--out", str(out), "--name", "nested", "--goldens", "2"]
    sys.exit(subprocess.call(cmd, cwd=REPO / "tests" / "models"))
