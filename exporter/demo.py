"""`make demo`: export the bundled example, verify it like a consumer would, show the result."""

from __future__ import annotations

import sys
from pathlib import Path

from jaxport.exporter.cli import export_main, verify_main

OUT = Path("demo-out/example/1")
SOURCE = "jaxport.exporter.examples"


def _table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join("  " + line for line in lines)


def show(artifact_dir: Path) -> None:
    """Print the artifact's files with sizes and the manifest's @main argument/result tables."""
    from jaxport.artifact import manifest as manifest_mod
    from jaxport.artifact.gen import manifest_pb2

    m = manifest_mod.load(artifact_dir)
    files = [("file", "bytes")]
    files += [(str(f.path), f"{f.size_bytes:,}") for f in m.files]
    manifest_path = artifact_dir / manifest_mod.MANIFEST_FILE
    files.append((manifest_mod.MANIFEST_FILE, f"{manifest_path.stat().st_size:,}"))
    print(f"\nartifact {artifact_dir}/ ({len(files) - 1} files)")
    print(_table(files))
    program = m.programs[0]
    args = [("index", "role", "name", "shape", "dtype", "bytes")]
    for a in program.arguments:
        role = manifest_pb2.ArgumentRole.Name(a.role).removeprefix("ARGUMENT_ROLE_").lower()
        args.append((str(a.index), role, a.name, str(list(a.shape)), a.dtype.numpy,
                     f"{a.byte_size:,}"))
    print(f"\n@main arguments of {program.mlirbc_file} (pass them in this order):")
    print(_table(args))
    results = [("index", "name", "shape", "dtype")]
    results += [(str(r.index), r.name, str(list(r.shape)), r.dtype.numpy) for r in program.results]
    print("\n@main results:")
    print(_table(results))
    print(f"\nplatforms {list(m.platforms)}, jax {m.versions.jax}, StableHLO target "
          f"{m.versions.stablehlo_target}, {len(m.goldens)} golden cases; "
          "see docs/artifact-format.md")


def main() -> int:
    """Export, verify, show; returns the process exit code."""
    rc = export_main([
        f"{SOURCE}:predict", "--params", f"{SOURCE}:init", "--input", "x:float32[4,16]",
        "--out", str(OUT), "--name", "example", "--force",
    ])
    if rc:
        return rc
    print(f"\n$ jaxport verify {OUT}")
    rc = verify_main([str(OUT)])
    show(OUT)
    return rc


if __name__ == "__main__":
    sys.exit(main())
