"""Small models the bridge tests export once per session (source of the test artifacts).

- `mlp`: a two-layer FP32 MLP, the everyday case.
- `mixed`: BF16, INT64 and BOOL inputs, several outputs, and a parameter the function never
  reads (jax drops it from `@main`, so both engines must bind arguments by the manifest).
- `slow`: runs `n` (an INT32 input) matmul rounds, so a test can keep a request in flight.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np


def mlp(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """y = tanh(x @ w1 + b1) @ w2 + b2."""
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def mlp_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.standard_normal((8, 16)).astype(np.float32) * 0.5,
        "b1": rng.standard_normal((16,)).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((16, 4)).astype(np.float32) * 0.5,
        "b2": rng.standard_normal((4,)).astype(np.float32) * 0.1,
    }


MLP_INPUTS = {"x": jax.ShapeDtypeStruct((2, 8), np.float32)}


def mixed(
    params: dict[str, Any], a: jax.Array, idx: jax.Array, flag: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """BF16 matmul, INT64 arithmetic and a BOOL mask; `params['unused']` is never read."""
    h = a @ params["w"]
    s = idx * 3 + params["offset"]
    m = jnp.logical_xor(flag, idx > 0)
    return h, s, m


def mixed_params(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((4, 4)).astype(ml_dtypes.bfloat16),
        "offset": np.array([7, -2, 40], dtype=np.int64),
        "unused": np.ones((5,), np.float32),
    }


MIXED_INPUTS = {
    "a": jax.ShapeDtypeStruct((3, 4), ml_dtypes.bfloat16),
    "idx": jax.ShapeDtypeStruct((3,), np.int64),
    "flag": jax.ShapeDtypeStruct((3,), np.bool_),
}
MIXED_OUTPUTS = ("h", "s", "m")


def slow(params: dict[str, Any], x: jax.Array, n: jax.Array) -> jax.Array:
    """`n` rounds of x = tanh(x @ w): the run time grows with n."""
    return jax.lax.fori_loop(0, n, lambda _, v: jnp.tanh(v @ params["w"]), x)


def slow_params(seed: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": (rng.standard_normal((256, 256)) / 16).astype(np.float32)}


SLOW_INPUTS = {
    "x": jax.ShapeDtypeStruct((256, 256), np.float32),
    "n": jax.ShapeDtypeStruct((), np.int32),
}


def affine(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """Elementwise x * scale + shift: a model whose tensors can be made large cheaply."""
    return x * params["scale"] + params["shift"]


def affine_params() -> dict[str, np.ndarray]:
    return {"scale": np.array([2.0], np.float32), "shift": np.array([0.5], np.float32)}


# 4096 x 4096 FP32 = 64 MiB per tensor.
AFFINE_64MIB_INPUTS = {"x": jax.ShapeDtypeStruct((4096, 4096), np.float32)}


def ignores(params: dict[str, Any], x: jax.Array, unused: jax.Array) -> jax.Array:
    """Never reads `unused` nor `params['z']`: jax drops both from `@main`, yet callers still
    send `unused` (it is a model input) and both engines must bind around the gap."""
    return x * params["k"]


def ignores_params() -> dict[str, np.ndarray]:
    return {"k": np.array([3.0, -1.5], np.float32), "z": np.zeros((2,), np.float32)}


IGNORES_INPUTS = {
    "x": jax.ShapeDtypeStruct((2,), np.float32),
    "unused": jax.ShapeDtypeStruct((3,), np.int32),
}
