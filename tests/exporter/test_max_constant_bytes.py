"""`--max-constant-bytes N`: named in the refusal of a baked-in table, with its cost; raising
it exports the table inside the program."""

from __future__ import annotations

from pathlib import Path

from exporter_helpers import run_cli
from jaxport.artifact import manifest

TABLE_BYTES = 128 * 128 * 4  # tests/models/broken.py's _TABLE


def _args(out: Path, *extra: str) -> list[str]:
    return ["export", "broken:baked", "--params", "broken:init", "--input", "x:float32[4,16]",
            "--out", str(out), "--quiet", "--goldens", "1", *extra]


def test_refusal_names_the_flag_and_the_cost(tmp_path: Path) -> None:
    proc = run_cli(_args(tmp_path / "o"), tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    line = lines[0]
    assert f"({TABLE_BYTES} bytes > 16384, the --max-constant-bytes limit" in line, line
    assert f"--max-constant-bytes {TABLE_BYTES}" in line
    assert "copied into model.mlirbc, model.mlir and model.jaxexport" in line
    assert not (tmp_path / "o").exists()


def test_raised_limit_exports_the_constant(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = run_cli(_args(out, "--max-constant-bytes", str(TABLE_BYTES)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    # The table now lives in the program: the bytecode is at least as large as the table.
    assert (out / "model.mlirbc").stat().st_size >= TABLE_BYTES
    assert len(m.goldens) == 1


def test_negative_limit_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(_args(tmp_path / "o", "--max-constant-bytes", "-1"), tmp_path)
    assert proc.returncode == 2 and "--max-constant-bytes must be >= 0" in proc.stderr
