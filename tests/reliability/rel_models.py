"""The two models the reliability tests serve.

- `fuzzy`: y = where(flag, x * w, x + b) with x FP32[2,3], flag BOOL[2] — two datatypes and a
  rank-2 and a rank-1 input give the fuzzer something to get wrong.
- `slow`: `iters` (INT32 scalar) rounds of tanh(h @ w) on a 128x128 FP32 state. Tests that
  need one of its requests to keep running (holding a slot, queueing behind it, running into
  a deadline, in flight during a drain) hold it at the bridge's test gate (`support.gate`),
  never by asking for many rounds: how long rounds take depends on how busy the machine is.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SLOW_N = 128
FUZZ_MODEL = "fuzzy"
SLOW_MODEL = "slow"


def fuzzy(params: dict[str, Any], x: jax.Array, flag: jax.Array) -> dict[str, jax.Array]:
    """Row-wise select between a scaled and a shifted copy of `x`."""
    return {"y": jnp.where(flag[:, None], x * params["w"], x + params["b"])}


def slow(params: dict[str, Any], x: jax.Array, iters: jax.Array) -> dict[str, jax.Array]:
    """`iters` dependent matmul rounds (a while loop: the trip count is a runtime input)."""
    return {"y": jax.lax.fori_loop(0, iters, lambda _, h: jnp.tanh(h @ params["w"]), x)}


MODELS = {
    "fuzzy": (
        fuzzy,
        {"w": np.arange(3, dtype=np.float32) + 1, "b": np.full(3, 0.5, np.float32)},
        {
            "x": jax.ShapeDtypeStruct((2, 3), jnp.float32),
            "flag": jax.ShapeDtypeStruct((2,), jnp.bool_),
        },
    ),
    "slow": (
        slow,
        {"w": np.eye(SLOW_N, dtype=np.float32) * 0.9},
        {
            "x": jax.ShapeDtypeStruct((SLOW_N, SLOW_N), jnp.float32),
            "iters": jax.ShapeDtypeStruct((), jnp.int32),
        },
    ),
}


def fuzzy_expected(x: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """The answer of `fuzzy` computed with numpy (FP32: exact for these operations)."""
    w = np.arange(3, dtype=np.float32) + 1
    return np.where(flag[:, None], x * w, x + np.full(3, 0.5, np.float32))

