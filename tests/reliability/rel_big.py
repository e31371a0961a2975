"""A model with large weights (4 x 64 MiB FP32) so `jaxport export` spends seconds writing them:
the exporter-crash test kills it in the middle of that."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

ROWS, COLS, COUNT = 4096, 4096, 4


def init(key: jax.Array) -> dict[str, np.ndarray]:
    """Incompressible random weights (zeros would compress to nothing and write instantly)."""
    del key
    rng = np.random.default_rng(0)
    return {f"w{i}": rng.standard_normal((ROWS, COLS), dtype=np.float32) for i in range(COUNT)}


def forward(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """Sum of x @ w_i over all weights (every parameter is used, so every one is written)."""
    return sum(x @ params[f"w{i}"] for i in range(COUNT))
