"""Models that fail while being traced, in the user's own code, and one ignoring its params."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("float32", (2, 3))}


def init(key: jax.Array) -> dict:
    return {"w": jax.random.normal(key, (4, 5))}


def mismatched(params: dict, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x)
    return h @ params["w"]  # (2, 3) @ (4, 5): raised here, line 15


def ignores_params(params: dict, x: jax.Array) -> jax.Array:
    return jnp.tanh(x) * 2.0
