"""Golden cases on disk: inputs and the outputs JAX computed for them, as `.npy`.

A consumer in any language loads `goldens/<case>/inputs/<name>.npy`, runs the program and
compares with `goldens/<case>/outputs/<name>.npy`. numpy has no bfloat16 descriptor: bf16
arrays are stored as raw 2-byte values (`<V2`); reinterpret them with the manifest dtype
(`load_npy` does that).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from jaxport.artifact.paths import unique_safe_names
from jaxport.protocol import dtypes

__all__ = ["GOLDENS_DIR", "load_npy", "save_npy", "write_arrays"]

GOLDENS_DIR = "goldens"


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Save an array as `.npy` in little-endian C order (bf16 as raw `<V2`)."""
    row = dtypes.by_numpy(array.dtype)
    np.save(path, np.asarray(array, dtype=row.numpy, order="C"), allow_pickle=False)


def load_npy(path: str | os.PathLike[str], dtype: np.dtype) -> np.ndarray:
    """Load a golden `.npy`, reinterpreting raw 2-byte values as `dtype` (bf16)."""
    array = np.load(path, allow_pickle=False)
    if array.dtype.kind == "V" and array.dtype.itemsize == np.dtype(dtype).itemsize:
        array = array.view(dtype)
    return array


def write_arrays(
    artifact_dir: str | os.PathLike[str], case: str, kind: str, arrays: Mapping[str, np.ndarray]
) -> dict[str, str]:
    """Save one case's arrays as `goldens/<case>/<kind>/<stem>.npy`; returns name -> that path
    relative to the artifact (what `GoldenCase.inputs` / `outputs` / `check_outputs` hold).

    `kind` is `inputs`, `outputs` or `checks`; each stem is the name made file-safe
    (`paths.unique_safe_names`).
    """
    rel_dir = f"{GOLDENS_DIR}/{case}/{kind}"
    (Path(artifact_dir) / rel_dir).mkdir(parents=True, exist_ok=True)
    paths = {}
    for stem, (name, value) in zip(unique_safe_names(list(arrays)), arrays.items(), strict=True):
        rel = f"{rel_dir}/{stem}.npy"
        save_npy(Path(artifact_dir) / rel, np.asarray(value))
        paths[name] = rel
    return paths
