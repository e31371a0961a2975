"""The Python example in docs/artifact-format.md runs as written, in a fresh `python -I` process,
against a golden artifact: the committed back-compat one and a checked one (whose goldens trip
each check kind)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "artifact-format.md"
BACKCOMPAT = sorted(p for p in (REPO / "tests" / "backcompat").iterdir()
                    if (p / "manifest.json").is_file())


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- runnable: [^>]*-->\n```python\n(.*?)```", text, re.S)
    assert match, "docs/artifact-format.md lost its runnable Python example"
    return match.group(1)


def _run(art: Path, tmp_path: Path) -> str:
    script = tmp_path / "example.py"
    script.write_text(_example(), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", str(script), str(art)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("art", BACKCOMPAT, ids=lambda p: p.name)
def test_doc_example_on_the_backcompat_artifact(art: Path, tmp_path: Path) -> None:
    out = _run(art, tmp_path)
    assert out.splitlines()[-1] == "ok"
    assert out.startswith("nested ['x', 'scale', 'ids']")


def test_doc_example_on_a_checked_artifact(tmp_path: Path) -> None:
    import jax
    import numpy as np
    from jaxport.exporter import export

    sys.path.insert(0, str(REPO / "tests" / "models"))
    import checked

    inputs = {k: jax.ShapeDtypeStruct(s, np.dtype(d)) for k, (d, s) in checked.INPUTS.items()}
    out_dir = tmp_path / "checked" / "1"
    export(checked.predict, checked.init(jax.random.key(0)), inputs, out_dir, quiet=True,
           goldens=1, checks=["user", "index", "nan", "div"],
           check_goldens=checked.check_goldens(), source_function="checked:predict")
    out = _run(out_dir, tmp_path)
    assert out.splitlines()[-1] == "ok"
