"""Golden cases: seeded sample inputs and the outputs JAX computes for them, as `.npy`.

A consumer in any language loads `goldens/<case>/inputs/<name>.npy`, runs the program and
compares with `goldens/<case>/outputs/<name>.npy`. numpy has no bfloat16 descriptor: bf16
arrays are stored as raw 2-byte values (`<V2`); reinterpret them with the manifest dtype
(`load_npy` does that).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from jaxport.artifact.paths import unique_safe_names
from jaxport.protocol import dtypes

__all__ = ["GOLDENS_DIR", "load_npy", "sample_inputs", "save_npy"]

GOLDENS_DIR = "goldens"


def sample_inputs(
    specs: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int
) -> dict[str, np.ndarray]:
    """Deterministic sample inputs: normal floats, integers in [0, 10), random booleans.

    Integers stay small and non-negative so that inputs used as indices or token ids are
    valid for any reasonable table.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in specs.items():
        row = dtypes.by_numpy(dtype)
        kind = np.dtype(row.numpy).kind
        if row.numpy_name == "bool":
            value = rng.random(shape) < 0.5
        elif kind in "iu":
            value = rng.integers(0, 10, size=shape)
        else:
            value = rng.standard_normal(shape)
        out[name] = np.asarray(value).astype(row.numpy)
    return out


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


def write_cases(
    artifact_dir: Path,
    count: int,
    input_specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    compute: Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]],
    output_names: Sequence[str],
    seed: int = 0,
    prefix: str = "",
) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """Write `count` seeded cases; returns (case name, input paths, output paths) per case.

    `compute(inputs)` returns the outputs in `output_names` order.
    """
    cases = []
    for i in range(count):
        case = f"{prefix}case{i}"
        base = artifact_dir / GOLDENS_DIR / case
        (base / "inputs").mkdir(parents=True)
        (base / "outputs").mkdir(parents=True)
        inputs = sample_inputs(input_specs, seed + i)
        outputs = compute(inputs)
        in_paths, out_paths = {}, {}
        in_stems = unique_safe_names(list(inputs))
        out_stems = unique_safe_names(list(output_names))
        for stem, (name, value) in zip(in_stems, inputs.items(), strict=True):
            rel = f"{GOLDENS_DIR}/{case}/inputs/{stem}.npy"
            save_npy(artifact_dir / rel, value)
            in_paths[name] = rel
        for stem, name, value in zip(out_stems, output_names, outputs, strict=True):
            rel = f"{GOLDENS_DIR}/{case}/outputs/{stem}.npy"
            save_npy(artifact_dir / rel, np.asarray(value))
            out_paths[name] = rel
        cases.append((case, in_paths, out_paths))
    return cases
