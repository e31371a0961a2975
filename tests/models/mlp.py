"""Two-layer MLP: the smallest realistic model (dict params, one input, one output)."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("float32", (4, 16))}


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (16, 32)) / 4.0,
        "b1": jnp.full((32,), 0.1),
        "w2": jax.random.normal(k2, (32, 10)) / 6.0,
        "b2": jnp.linspace(-1.0, 1.0, 10),
    }


def predict(params: dict, x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]
