"""Architecture rule, checked: dependencies point one way, exporter -> artifact <- bridge.

- `jaxport.artifact` imports neither the exporter nor the bridge, anywhere, and not jax (nor
  grpc) at import time: a tool that only reads manifests and weights stays light;
- the bridge imports nothing from `jaxport.exporter`;
- the exporter never imports the bridge.

Checked twice: statically over every import statement in the source (function-level imports
included, so a lazy import cannot sneak around the rule), and at run time in a fresh process.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Folder of each package in the repository (pyproject's package-dir).
FOLDERS = {"artifact": "clients/python/artifact", "exporter": "exporter", "bridge": "bridge"}


def _imports(folder: str) -> list[tuple[str, int, str, bool]]:
    """(file, line, imported module, at module level) for every import under `folder`."""
    found = []
    for path in sorted((REPO / FOLDERS[folder]).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                found.append((path.name, node.lineno, name, id(node) in top))
    assert found, f"no imports found under {FOLDERS[folder]}/"
    return found


def _offending(folder: str, prefixes: tuple[str, ...], *, top_level_only: bool = False
               ) -> list[str]:
    return sorted({
        f"{FOLDERS[folder]}/{file}:{line} imports {name}"
        for file, line, name, top in _imports(folder)
        if (top or not top_level_only)
        and any(name == p or name.startswith(p + ".") for p in prefixes)
    })


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("artifact", ("jaxport.exporter", "jaxport.bridge")),
        ("bridge", ("jaxport.exporter",)),
        ("exporter", ("jaxport.bridge",)),
    ],
)
def test_no_import_points_the_wrong_way(folder: str, forbidden: tuple[str, ...]) -> None:
    assert _offending(folder, forbidden) == []


def test_artifact_imports_neither_jax_nor_grpc_at_module_level() -> None:
    assert _offending("artifact", ("jax", "jaxlib", "grpc"), top_level_only=True) == []


def test_importing_the_artifact_package_loads_no_jax_exporter_bridge_or_grpc() -> None:
    modules = [p.stem for p in sorted((REPO / FOLDERS["artifact"]).glob("*.py"))
               if p.stem != "__init__"]
    assert {"manifest", "weights", "goldens", "paths", "checks", "errors", "reader"} <= set(modules)
    code = (
        "import sys\n"
        "import jaxport.artifact\n"
        + "".join(f"import jaxport.artifact.{m}\n" for m in modules)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'grpc')"
        " or m.startswith(('jaxport.exporter', 'jaxport.bridge')))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_loading_every_bridge_module_loads_no_exporter_module() -> None:
    modules = [p.stem for p in sorted((REPO / "bridge").glob("*.py")) if p.stem != "__init__"]
    code = (
        "import sys\n"
        + "".join(f"import jaxport.bridge.{m}\n" for m in modules)
        + "bad = sorted(m for m in sys.modules if m.startswith('jaxport.exporter'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rule_itself_catches_a_wrong_import(tmp_path: Path, monkeypatch) -> None:
    """The static check is not vacuous: a lazy import of the exporter inside a bridge function
    is found."""
    fake = tmp_path / "bridge"
    fake.mkdir()
    (fake / "x.py").write_text("import os\n\ndef f():\n    from jaxport.exporter import api\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _offending("bridge", ("jaxport.exporter",)) == [
        "bridge/x.py:4 imports jaxport.exporter",
        "bridge/x.py:4 imports jaxport.exporter.api",
    ]
