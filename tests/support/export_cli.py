#!/usr/bin/env python3
"""Export several `jaxport export` command lines in ONE process, through the shared export
cache (support.exports): what the Go tests that need artifacts run (bridge/front/workers), so a
run imports JAX once instead of once per artifact, and a later run reuses every artifact whose
sources did not change.

    python tests/support/export_cli.py < '{"mlp": ["mlp:predict", "--params", "mlp:init", ...]}'

Standard input: a JSON object, name -> the `jaxport export` arguments without `--out` (the
modules they name are found on PYTHONPATH). Standard output: a JSON object, name -> the
exported artifact's directory (read-only: copy it to change it). The key of each entry covers
its arguments and every Python file in the PYTHONPATH directories, besides what
support.exports always covers (the exporter, the artifact writer, the versions). Command lines
with `--mesh` run first: they set this process's CPU device count before JAX starts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support.*

from support.exports import exported


def main() -> int:
    lines: dict[str, list[str]] = json.load(sys.stdin)
    dirs = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for d in dirs:
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))
    sources = sorted(p for d in dirs if d.is_dir() for p in d.glob("*.py"))
    from jaxport.exporter.cli import export_main

    out: dict[str, str] = {}
    for name in sorted(lines, key=lambda n: "--mesh" not in lines[n]):
        args = lines[name]

        def export(dest: Path, args: list[str] = args) -> None:
            if export_main([*args, "--out", str(dest), "--quiet"]) != 0:
                raise SystemExit(f"export_cli: jaxport export {' '.join(args)} failed")

        out[name] = str(exported(f"cli-{name}", export, sources=sources,
                                 options={"args": args}))
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
