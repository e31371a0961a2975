"""Parameters on disk: one plain TensorStore zarr3 array per parameter under `weights/`.

Plain zarr3 (not an OCDBT-packed Orbax checkpoint) so any zarr v3 reader, C++ TensorStore or
a Go/Java zarr library, opens an array with no Orbax. The manifest stores each array's
TensorStore spec with its kvstore path RELATIVE to the artifact directory; a consumer joins
it with the artifact directory before opening. Arrays are stored uncompressed, little-endian
(`bytes` codec), chunked, so a reader needs no codec beyond the zarr3 core.

Durability: `write_parameter` does not fsync (TensorStore's per-chunk-file `file_io_sync` is
off). `export` writes the whole artifact into a temporary directory and fsyncs every file and
directory in ONE pass before the atomic rename (`jaxport.exporter.write.fsync_tree`), which
costs less than an fsync per chunk file and gives the same guarantee: after a crash the
artifact is whole or absent.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tensorstore as ts
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.location import Location, locate
from jaxport.artifact.manifest import numpy_dtype
from jaxport.protocol import dtypes

__all__ = [
    "WEIGHTS_DIR",
    "array_sha256",
    "chunk_shape",
    "read_parameter",
    "read_parameters",
    "write_parameter",
]

WEIGHTS_DIR = "weights"
# Chunks of about this many bytes: few files per array (each file costs TensorStore a create,
# write and rename), still small enough for partial reads. Measured: see docs/performance.md.
CHUNK_BYTES = 16 << 20
# Arrays above this size are written in chunk-aligned slabs so the progress display moves.
_SLAB_BYTES = 128 << 20
# No fsync per chunk file: `export` syncs the finished artifact once, before its rename.
_CONTEXT_SPEC = {"file_io_sync": False}


class ByteProgress(Protocol):
    """What `write_parameter` reports progress to (the exporter's `Progress`)."""

    def advance(self, nbytes: int) -> None:
        """`nbytes` more bytes are done."""


def _c_bytes(array: np.ndarray) -> np.ndarray:
    """The array's little-endian C-order bytes as a flat uint8 view (a copy only if needed)."""
    row = dtypes.by_numpy(array.dtype)
    return np.asarray(array, dtype=row.numpy, order="C").reshape(-1).view(np.uint8)


def array_sha256(array: np.ndarray) -> str:
    """sha256 of an array's raw little-endian C-order bytes (the manifest's argument digest).

    Hashes the array's own buffer when it is already C-contiguous little-endian (no copy of a
    possibly huge parameter).
    """
    return hashlib.sha256(_c_bytes(np.asarray(array))).hexdigest()


def chunk_shape(shape: tuple[int, ...], itemsize: int, target: int = CHUNK_BYTES,
                shard: Sequence[int] | None = None) -> list[int]:
    """Chunk shape of about `target` bytes, splitting leading dimensions first.

    `shard` (a parameter split across devices): one device's shard shape. The chunk is then
    exactly the shard along its split axes (those where it is smaller than `shape`), so every
    shard is whole chunks and a device's part can be read alone; only unsplit axes are cut
    further to approach `target`."""
    chunk = [max(1, d) for d in (shard if shard is not None else shape)]
    split = {a for a, (s, d) in enumerate(zip(chunk, shape, strict=True)) if s != d}
    for axis in range(len(shape)):
        if axis in split:
            continue
        rest = itemsize * math.prod(chunk[axis + 1 :])
        if rest * chunk[axis] <= target:
            break
        chunk[axis] = max(1, target // rest)
    return chunk


def _spec(rel_path: str, numpy_name: str) -> dict[str, Any]:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": rel_path}, "dtype": numpy_name}


def _absolute(spec: dict[str, Any], artifact_dir: str | os.PathLike[str] | Location
              ) -> dict[str, Any]:
    """The spec with its kvstore made absolute: the artifact directory's own kvstore (a local
    `file` path, or `http` for an artifact read by URL) at the manifest's relative path.

    Trust boundary: a manifest may only point at zarr3 arrays in a `file` kvstore inside the
    artifact (no other drivers, no absolute paths, no `..`); where the artifact itself lives
    decides the kvstore that is actually opened.
    """
    spec = json.loads(json.dumps(spec))
    kvstore = spec.get("kvstore")
    if spec.get("driver") != "zarr3" or not isinstance(kvstore, dict) or \
            kvstore.get("driver") != "file" or not isinstance(kvstore.get("path"), str):
        raise ArtifactError(
            f"tensorstore spec {json.dumps(spec)} must use the zarr3 driver on a file kvstore"
        )
    spec["kvstore"] = locate(artifact_dir).kvstore(kvstore["path"])
    return spec


def write_parameter(
    artifact_dir: str | os.PathLike[str],
    rel_dir: str,
    array: np.ndarray,
    progress: ByteProgress | None = None,
    shard: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Write `array` as a zarr3 array at `<artifact_dir>/<rel_dir>/`; returns its relative spec.
    `shard`: the shape of one device's shard of a split parameter (see `chunk_shape`).

    Files are not fsync'd here (see the module docstring). TensorStore references `array`'s
    buffer instead of copying it, so the array must not change while this call runs.
    """
    row = dtypes.by_numpy(array.dtype)
    array = np.asarray(array, dtype=row.numpy, order="C")
    rel_path = rel_dir.rstrip("/") + "/"
    chunks = chunk_shape(array.shape, row.itemsize, shard=shard)
    create = _absolute(_spec(rel_path, row.numpy_name), Path(artifact_dir))
    create["metadata"] = {
        "shape": list(array.shape),
        "data_type": row.numpy_name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    }
    # Write every chunk, even all-zero ones, so each byte on disk is covered by a file checksum
    # and readers need no missing-chunk logic.
    create["store_data_equal_to_fill_value"] = True
    store = ts.open(create, create=True, context=ts.Context(_CONTEXT_SPEC)).result()
    if array.ndim == 0 or array.nbytes <= _SLAB_BYTES:
        store.write(array, can_reference_source_data_indefinitely=True).result()
        if progress:
            progress.advance(array.nbytes)
    else:
        row_bytes = array.nbytes // max(1, array.shape[0])
        step = max(chunks[0], (_SLAB_BYTES // max(1, row_bytes)) // chunks[0] * chunks[0])
        for start in range(0, array.shape[0], step):
            slab = array[start : start + step]
            store[start : start + slab.shape[0]].write(
                slab, can_reference_source_data_indefinitely=True
            ).result()
            if progress:
                progress.advance(slab.nbytes)
    return _spec(rel_path, row.numpy_name)


def read_parameter(
    artifact_dir: str | os.PathLike[str] | Location, argument: manifest_pb2.Argument
) -> np.ndarray:
    """Open one parameter's zarr3 array from its manifest spec and check shape and dtype.
    `artifact_dir`: a local directory, or a Location (`location.locate`) of one by URL."""
    root = locate(artifact_dir)
    try:
        spec = json.loads(argument.tensorstore_spec_json)
        store = ts.open(_absolute(spec, root), open=True).result()
        array = np.asarray(store.read().result())
    except (ValueError, KeyError, TypeError) as exc:
        raise ArtifactError(
            f"{root}: cannot open parameter {argument.name!r}: {str(exc).splitlines()[0]}"
        ) from None
    expected = numpy_dtype(argument.dtype)
    if array.dtype != expected or list(array.shape) != list(argument.shape):
        raise ArtifactError(
            f"{root}: parameter {argument.name!r} on disk is {array.dtype}{list(array.shape)}, "
            f"manifest says {expected}{list(argument.shape)}"
        )
    return array


def read_parameters(
    artifact_dir: str | os.PathLike[str] | Location,
    program: manifest_pb2.Program,
) -> list[np.ndarray]:
    """Every PARAMETER argument of `program`, in `@main` argument order.

    Only parameters are returned (not inputs, platform index or tokens); zip them with
    `[a for a in program.arguments if a.role == ARGUMENT_ROLE_PARAMETER]`.
    """
    return [
        read_parameter(artifact_dir, arg)
        for arg in program.arguments
        if arg.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER
    ]
