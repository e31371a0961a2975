"""The batch-size rule: which program of an artifact exported with several batch sizes runs a
request of `rows` rows, and how the rows are padded onto it (docs/artifact-format.md,
"Batching": the rule the server serves by, stated once there).

- Any number of rows from 1 to the largest exported size is accepted (Triton's
  `max_batch_size` contract); more is refused naming the sizes ("split the request").
- The program is the smallest exported batch size that holds the rows.
- Every batched input is padded up to that size with copies of its LAST real row (never zeros:
  a row-wise runtime check then trips on padding only if it trips on a real row, and padding
  can make no NaN or division by zero of its own); unbatched inputs are passed as given.
- Every batched output is cut back to the request's rows; padding rows never reach a caller.

`Artifact.call` runs requests by it; the server (bridge/front) and the C++ library
(clients/cpp) implement the same rule in their languages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from jaxport.artifact.errors import ArtifactError

__all__ = ["batch_rows", "pad_rows", "program_size"]


def batch_rows(arrays: Mapping[str, np.ndarray], batched: Sequence[str], label: str) -> int:
    """The rows of a request: the leading dimension every batched input shares. ArtifactError
    naming the inputs when they disagree or one has no leading dimension."""
    sizes = sorted({int(arrays[n].shape[0]) if np.ndim(arrays[n]) else -1 for n in batched})
    if -1 in sizes:
        scalars = [n for n in batched if not np.ndim(arrays[n])]
        raise ArtifactError(f"{label}: batched input {scalars[0]!r} is a scalar but needs a "
                            "leading batch dimension")
    if len(sizes) != 1:
        raise ArtifactError(f"{label}: batched inputs {list(batched)} disagree on the batch "
                            f"size: {sizes}")
    return sizes[0]


def program_size(rows: int, exported: Sequence[int], label: str) -> int:
    """The smallest exported batch size holding `rows` rows. ArtifactError for no rows or more
    than the largest size, naming the exported sizes."""
    sizes = sorted(exported)
    if rows < 1:
        raise ArtifactError(f"{label}: batch size {rows}: a request needs at least 1 row "
                            f"(exported batch sizes {sizes})")
    if rows > sizes[-1]:
        raise ArtifactError(f"batch size {rows} exceeds max_batch_size {sizes[-1]} of {label} "
                            f"(exported batch sizes {sizes}); split the request")
    return next(size for size in sizes if size >= rows)


def pad_rows(array: np.ndarray, size: int) -> np.ndarray:
    """`array` (>= 1 row) extended to `size` rows with copies of its last row; itself when it
    has them already."""
    rows = array.shape[0]
    if rows == size:
        return array
    out = np.empty((size, *array.shape[1:]), dtype=array.dtype)
    out[:rows] = array
    out[rows:] = array[rows - 1]
    return out
