"""An import that fails inside the user's module names the user's file:line, as a failed trace
does: an exception raised at import time, a missing dependency, a syntax error."""

from __future__ import annotations

from pathlib import Path

import pytest
from jaxport.exporter import cli

CASES = [
    ("imp_raises", "import numpy\n\nW = numpy.ones(3)\nraise RuntimeError('no weights file')\n",
     ["importing 'imp_raises' failed: RuntimeError: no weights file",
      "(raised at imp_raises.py:4)"]),
    ("imp_missing", "\n\nimport not_a_module_jaxport_knows\n",
     ["importing 'imp_missing' failed: No module named 'not_a_module_jaxport_knows'",
      "(raised at imp_missing.py:3)"]),
    ("imp_syntax", "def predict(p, x):\n    return x +\n",
     ["importing 'imp_syntax' failed: SyntaxError", "(raised at imp_syntax.py:2)"]),
]


@pytest.mark.parametrize(("module", "source", "needles"), CASES, ids=[c[0] for c in CASES])
def test_import_error_names_the_users_file_and_line(tmp_path: Path, monkeypatch, capsys,
                                                    module: str, source: str,
                                                    needles: list[str]) -> None:
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = cli.export_main([f"{module}:predict", "--params", f"{module}:init", "--input",
                            "x:float32[2]", "--out", str(tmp_path / "o")])
    assert code == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("jaxport export: error: MODULE:FUNCTION: "), line
    for needle in needles:
        assert needle in line, line
