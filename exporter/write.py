"""Writing an artifact to disk: a staging directory renamed into place only when complete,
one fsync pass over it, the program files, the weights, and the manifest's file entries.

A crash leaves nothing that looks valid: everything is written into a temporary sibling of the
output directory (`staging_dir`), made durable (`fsync_tree`) and only then renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxport.artifact import index as index_mod
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import weights as weights_mod
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.paths import unique_safe_names
from jaxport.exporter.errors import ExportError
from jaxport.exporter.program import Lowered
from jaxport.exporter.progress import Progress
from jaxport.exporter.trace import LeafInfo

__all__ = [
    "background",
    "exists_message",
    "file_entries",
    "fsync_tree",
    "refresh_indices",
    "staging_dir",
    "write_program_files",
    "write_weights",
]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems cannot fsync a directory; they give what guarantee they can.
        if not (exc.errno in (errno.EINVAL, errno.ENOTSUP) and path.is_dir()):
            raise
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """fsync every file, then every directory (deepest first), under and including `root`.

    The exporter's one durability pass: weights are written without an fsync per chunk file
    (cheaper), and this makes the whole staged artifact durable before it is renamed into
    place, so after a crash the artifact is either complete or absent.
    """
    root = Path(root)
    for dirpath, _, filenames in os.walk(root, topdown=False):
        for filename in filenames:
            _fsync_path(Path(dirpath) / filename)
        _fsync_path(Path(dirpath))


@contextlib.contextmanager
def staging_dir(out_dir: Path, force: bool) -> Iterator[Path]:
    """A temporary sibling of `out_dir`, moved into place on success and deleted on failure.

    Before the rename everything in it is fsync'd (`fsync_tree`), and after it the parent
    directory, so the rename itself is durable. A failed export leaves nothing behind: the
    parent directories it had to create (`repo/<model>/` for `repo/<model>/1`) are removed
    again when still empty.
    """
    created = [d for d in (out_dir.parent, *out_dir.parent.parents) if not d.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        yield tmp
        fsync_tree(tmp)
        if out_dir.exists():
            if not force:
                raise ExportError(exists_message(out_dir))
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
            os.rmdir(old)
            os.replace(out_dir, old)
            os.replace(tmp, out_dir)
            _fsync_path(out_dir.parent)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
            _fsync_path(out_dir.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not out_dir.exists():
            for d in created:  # deepest first
                try:
                    d.rmdir()
                except OSError:  # not empty (another export put something there) or gone
                    break


def refresh_indices(out_dir: Path) -> list[Path]:
    """Rewrite the jaxport `index.json` of the model directory and of the repository that hold
    a freshly written `out_dir`, where there is one: a repository served by URL is listed
    through them (`jaxport.artifact.index`), and a version left out of a stale index is
    invisible there. None is created where there was none; a file of that name that is not a
    jaxport index is left alone. The paths rewritten."""
    out: list[Path] = []
    for root in (out_dir.parent, out_dir.parent.parent):
        try:
            if index_mod.read(root) is None:
                continue
        except ArtifactError:
            continue  # not ours, or damaged: not this export's to overwrite
        out.append(index_mod.write(root))
    return out


def exists_message(out_dir: Path) -> str:
    """The one error for an output directory that exists without `force`."""
    return f"output directory {out_dir} already exists; pass --force (force=True) to replace it"


def file_entries(root: Path, pool: ThreadPoolExecutor) -> list[manifest_pb2.FileEntry]:
    """Size and sha256 of every file but the manifest, hashed on `pool`'s threads."""
    paths = [p for p in sorted(root.rglob("*"))
             if p.is_file() and p.relative_to(root).as_posix() != manifest_mod.MANIFEST_FILE]
    return [
        manifest_pb2.FileEntry(path=path.relative_to(root).as_posix(),
                               size_bytes=path.stat().st_size, sha256=digest)
        for path, digest in zip(paths, pool.map(manifest_mod.sha256_file, paths), strict=True)
    ]


def background() -> ThreadPoolExecutor:
    """Threads for work that overlaps the export's own: checksums, early fsyncs (hashlib and
    fsync release the GIL). Leaving its `with` waits for everything submitted."""
    return ThreadPoolExecutor(max_workers=min(8, max(2, os.cpu_count() or 1)),
                              thread_name_prefix="jaxport-export")


def write_weights(
    root: Path,
    infos: Sequence[LeafInfo],
    params: Any,
    kept: set[int],
    progress: Progress,
    pool: ThreadPoolExecutor,
    shards: dict[int, list[int]] | None = None,
) -> dict[int, tuple[str, str]]:
    """Write every kept parameter; returns leaf index -> (tensorstore spec JSON, sha256).

    `shards` (sharded exports): leaf index -> one device's shard shape of a split parameter,
    which its zarr3 chunks follow along the split axes (each shard is whole chunks)."""
    leaves = jax.tree.leaves(params)
    todo = [i for i in infos if i.kind == "parameter" and i.leaf_index in kept]
    stems = unique_safe_names([i.name for i in todo])
    total = sum(leaves[i.leaf_index].nbytes for i in todo)
    progress.start_bytes(f"writing {len(todo)} parameter(s)", total)
    out: dict[int, tuple[str, str]] = {}
    for leaf, stem in zip(todo, stems, strict=True):
        # Zero-copy for numpy leaves and for jax.Arrays on CPU (one leaf at a time elsewhere).
        array = np.asarray(leaves[leaf.leaf_index])
        digest = pool.submit(weights_mod.array_sha256, array)  # while TensorStore writes it
        spec = weights_mod.write_parameter(
            root, f"{weights_mod.WEIGHTS_DIR}/{stem}", array, progress,
            shard=(shards or {}).get(leaf.leaf_index),
        )
        out[leaf.leaf_index] = (json.dumps(spec, sort_keys=True), digest.result())
    progress.finish_bytes()
    return out


def write_program_files(root: Path, lowered: Lowered) -> None:
    """`<prefix>.mlirbc` (portable bytecode), `.mlir` (its text) and `.jaxexport` of a program."""
    prefix = lowered.files_prefix
    (root / f"{prefix}.mlirbc").write_bytes(lowered.exported.mlir_module_serialized)
    (root / f"{prefix}.mlir").write_text(lowered.text, encoding="utf-8")
    (root / f"{prefix}.jaxexport").write_bytes(lowered.serialized)
