"""A model that ignores one parameter and one input: jax drops both from @main."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("float32", (2, 3)), "ignored": ("int32", (2,))}


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "a_unused": jax.random.normal(k1, (5, 5)),
        "w": jax.random.normal(k2, (3, 2)),
        "b": jnp.array([0.5, -0.5]),
    }


def predict(params: dict, x: jax.Array, ignored: jax.Array) -> jax.Array:
    del ignored
    return x @ params["w"] + params["b"]
