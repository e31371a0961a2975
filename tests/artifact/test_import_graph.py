"""Architecture rule, checked: dependencies point one way, exporter -> artifact <- bridge.

- `jaxport.artifact` imports neither the exporter nor the bridge, anywhere, and not jax (nor
  grpc) at import time: a tool that only reads manifests and weights stays light;
- the bridge imports nothing from `jaxport.exporter`;
- the exporter never imports the bridge;
- the server is the Go front (bridge/front); what stays Python in the bridge has one job each:
  `jaxport serve` (`cli`) only finds and execs the front, and `jaxport pjrt install` (`pjrt`)
  only fetches a pinned plugin, so both import nothing but the standard library; the
  execution worker (`worker`, `frames`, `connection`, `engines`, `loading`, `logs`) executes
  what the front validated and speaks frames (docs/frames.md), so it reaches no gRPC and no
  generated protocol stubs; the Ray application (`ray`) supervises
  a front per replica and forwards Serve's proxy calls, so it reaches neither the worker nor
  jax;
- the client distribution (`jaxport-client`, its wheel built here as `make client-wheel` builds
  it) carries no bridge or exporter module and no manifest schema (the artifact package's
  `jaxport.artifact.gen`).

Checked twice: statically over every import statement in the source (function-level imports
included, so a lazy import cannot sneak around the rule; for the worker, `jaxport serve` and
the Ray app over every bridge module they reach), and at run time in a fresh process.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from support.client_wheel import build_client_dist  # noqa: E402

# Folder of each package in the repository (pyproject's package-dir).
FOLDERS = {"artifact": "clients/python/artifact", "exporter": "exporter", "bridge": "bridge"}


def _imports(folder: str) -> list[tuple[str, int, str, bool]]:
    """(file, line, imported module, at module level) for every import under `folder`, its
    subpackages included (e.g. exporter/verify/); `file` is the path relative to `folder`.
    bridge/front/ is the Go front and its wheel build script, not part of the package."""
    found = []
    root = REPO / FOLDERS[folder]
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "front":
            continue
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
                found.append((path.relative_to(root).as_posix(), node.lineno, name,
                              id(node) in top))
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


# --- what stays Python in the bridge has one job each ----------------------------------------

#: The execution worker's modules: what a worker process runs.
WORKER = ("worker", "frames", "connection", "engines", "loading", "logs")
#: What each Python entry point must not reach (prefixes), and why.
FORBIDDEN_REACH = {
    ("worker",): (("grpc", "jaxport.protocol.gen"), "the worker speaks frames, not gRPC"),
    ("ray",): (("jax", "jaxlib", "jaxport.bridge.worker", "jaxport.bridge.engines",
                "jaxport.bridge.loading"), "a replica only runs a front and forwards to it"),
}


def _bridge_file(module: str) -> Path | None:
    """The source file of a bridge module (`jaxport.bridge` is its __init__), else None."""
    if module == "jaxport.bridge":
        return REPO / "bridge/__init__.py"
    stem = module.removeprefix("jaxport.bridge.")
    path = REPO / "bridge" / f"{stem}.py"
    return path if stem != module and "." not in stem and path.is_file() else None


def _bridge_reach(starts: tuple[str, ...]) -> dict[str, list[str]]:
    """Every module the bridge modules `starts` import, directly or through other bridge
    modules, at any level (function-level imports too): module -> the import chain to it."""
    imports = _imports("bridge")
    chains = {f"jaxport.bridge.{m}": [f"bridge/{m}.py"] for m in starts}
    todo = list(chains)
    while todo:
        module = todo.pop()
        path = _bridge_file(module)
        assert path is not None, f"{module}: no such file under bridge/"
        for file, line, name, _ in imports:
            if file == path.name and name not in chains:
                chains[name] = [*chains[module], f"{file}:{line} imports {name}"]
                if _bridge_file(name) is not None:
                    todo.append(name)
    return chains


def _reach_violations(starts: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(" -> ".join(chain) for name, chain in _bridge_reach(starts).items()
                  if any(name == f or name.startswith(f + ".") for f in forbidden))


def test_the_bridge_holds_only_the_expected_python_modules() -> None:
    """The protocol layer is the Go front's: nothing of it is left in Python."""
    modules = {p.stem for p in (REPO / "bridge").glob("*.py")} - {"__init__"}
    assert modules == {"cli", "pjrt", "ray", *WORKER}, sorted(modules)


@pytest.mark.parametrize("starts", list(FORBIDDEN_REACH), ids=lambda s: s[0])
def test_each_entry_point_reaches_only_what_its_job_needs(starts: tuple[str, ...]) -> None:
    forbidden, why = FORBIDDEN_REACH[starts]
    bad = _reach_violations(starts, forbidden)
    assert not bad, why + ":\n" + "\n".join(bad)


@pytest.mark.parametrize("file", ["cli.py", "pjrt.py"])
def test_jaxport_serve_imports_only_the_standard_library(file: str) -> None:
    """`jaxport serve` finds the front and execs it, `jaxport pjrt install` fetches a plugin:
    every module they import, at any level, is the standard library's (no jaxport module, no
    numpy, jax or grpc)."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = sorted(f"bridge/{file}:{line} imports {name}" for f, line, name, _ in
                 _imports("bridge") if f == file and name.split(".")[0] not in stdlib)
    assert not bad, bad


@pytest.mark.parametrize(("module", "forbidden"), [
    ("jaxport.bridge.cli", ("jax", "jaxlib", "grpc", "numpy", "jaxport.protocol")),
    ("jaxport.bridge.worker", ("grpc", "jaxport.protocol.gen")),
])
def test_loading_an_entry_point_loads_none_of_what_it_must_not_reach(
        module: str, forbidden: tuple[str, ...]) -> None:
    """At run time, in a fresh process, with the modules it reaches lazily loaded as well."""
    stem = module.rpartition(".")[2]
    starts = WORKER if stem == "worker" else (stem,)
    modules = sorted(name for name in _bridge_reach(starts) if _bridge_file(name) is not None)
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r} or "
        f"m.startswith({tuple(f + '.' for f in forbidden)!r}))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_reach_follows_lazy_imports_through_other_bridge_modules(
    tmp_path: Path, monkeypatch
) -> None:
    """Not vacuous: the worker importing, inside a function, a module that imports grpc inside
    a function is caught, with the chain; so is a standard-library-only cli that is not."""
    fake = tmp_path / "bridge"
    fake.mkdir()
    for name, text in {
        "worker.py": "def run():\n    from jaxport.bridge import helper\n",
        "frames.py": "", "connection.py": "", "engines.py": "", "loading.py": "", "logs.py": "",
        "helper.py": "import os\n\ndef f():\n    import grpc\n",
        "cli.py": "import os\nimport numpy\n",
    }.items():
        (fake / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _bridge_reach(WORKER)["grpc"] == [
        "bridge/worker.py", "worker.py:2 imports jaxport.bridge.helper",
        "helper.py:4 imports grpc"]
    with pytest.raises(AssertionError, match=r"helper\.py:4 imports grpc"):
        test_each_entry_point_reaches_only_what_its_job_needs(("worker",))
    with pytest.raises(AssertionError, match=r"bridge/cli\.py:2 imports numpy"):
        test_jaxport_serve_imports_only_the_standard_library("cli.py")


# --- what the client wheel carries ------------------------------------------------------------


def _defined_names(source: str) -> set[str]:
    """Top-level functions, classes and assigned names of a module's source."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.slow
def test_client_wheel_carries_no_bridge_server_codec_or_manifest_schema(tmp_path: Path) -> None:
    wheel = build_client_dist(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        codecs_source = z.read("jaxport/protocol/codecs.py").decode()
    assert "jaxport/client/inference.py" in names  # the wheel is the client's
    assert [n for n in names if n.startswith(("jaxport/bridge", "jaxport/exporter"))] == []
    assert [n for n in names if n.startswith("jaxport/artifact") or "manifest" in n] == []
    # The client's codecs are the client's half only: request building, response decoding.
    assert {"build_infer_request", "decode_infer_response"} <= _defined_names(codecs_source)
