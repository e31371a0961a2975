"""A small model guarded by checkify: one of each check kind jaxport exports.

`predict(params, x, idx, scale)`:
- a user `checkify.check` on the input `idx` (must be non-negative),
- an out-of-bounds gather `params["table"][idx]` (index check when an idx >= 8),
- a NaN-producing `jnp.log(x)` (nan check when an x < 0),
- a division by `scale` (div check when scale == 0).

`check_goldens()` gives one passing case and one case tripping each kind, in input order
(x: f32[4], idx: i32[3], scale: f32[]). `unchecked_forward` calls `checkify.check` too and is
used to test the export-without-checks error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

INPUTS = {"x": ("float32", (4,)), "idx": ("int32", (3,)), "scale": ("float32", ())}


def init(key: jax.Array) -> dict[str, jax.Array]:
    """Parameters: a lookup table of 8 positive values and a bias."""
    del key
    return {
        "table": jnp.linspace(0.5, 4.0, 8, dtype=jnp.float32),
        "bias": jnp.asarray(1.0, jnp.float32),
    }


def predict(
    params: dict[str, jax.Array], x: jax.Array, idx: jax.Array, scale: jax.Array
) -> dict[str, jax.Array]:
    """Lookup + log-sum, scaled; every step guarded by one check kind."""
    checkify.check(jnp.all(idx >= 0), "index needs to be non-negative, got {}", jnp.min(idx))
    picked = params["table"][idx]
    logx = jnp.log(x)
    y = (logx.sum() + picked.sum() + params["bias"]) / scale
    return {"y": y, "picked": picked}


def unchecked_forward(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Only a user check: exporting it without `--checks user` must fail clearly."""
    checkify.check(jnp.all(x > 0), "x must be positive, got {x}", x=jnp.min(x))
    return x * params["bias"]


def plain_forward(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """No checks at all: exporting with or without --checks changes nothing for it."""
    return jnp.log(x) * params["bias"]


def check_goldens() -> dict[str, tuple[np.ndarray, ...]]:
    """Named inputs (x, idx, scale): one passing case, one tripping each check kind."""
    x = np.array([1.0, 2.0, 0.5, 4.0], np.float32)
    idx = np.array([0, 3, 7], np.int32)
    one = np.float32(2.0)
    return {
        "pass": (x, idx, one),
        "user": (x, np.array([1, -2, 3], np.int32), one),
        "index": (x, np.array([1, 100, 3], np.int32), one),
        "nan": (np.array([1.0, -2.0, 0.5, 4.0], np.float32), idx, one),
        "div": (x, idx, np.float32(0.0)),
    }


#: Row-wise variant for batch sizes: dimension 0 of every input and output is the batch.
BATCHED_INPUTS = {"x": ("float32", (1, 4)), "idx": ("int32", (1, 3)), "scale": ("float32", (1,))}


def predict_batched(
    params: dict[str, jax.Array], x: jax.Array, idx: jax.Array, scale: jax.Array
) -> dict[str, jax.Array]:
    """`predict` for x[B,4], idx[B,3], scale[B]: the same checks, one row per request row."""
    checkify.check(jnp.all(idx >= 0), "index needs to be non-negative, got {}", jnp.min(idx))
    picked = params["table"][idx]
    logx = jnp.log(x)
    y = (logx.sum(axis=1) + picked.sum(axis=1) + params["bias"]) / scale
    return {"y": y, "picked": picked}


def check_goldens_batched() -> dict[str, tuple[np.ndarray, ...]]:
    """`check_goldens` as one-row batches (goes to the batch-size-1 program)."""
    return {k: tuple(np.asarray(a)[None] for a in v) for k, v in check_goldens().items()}
