"""A plain bfloat16 MLP (matmul, tanh, matmul): what verify's bf16 rule is for end to end."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("bfloat16", (4, 32))}


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {"w": (jax.random.normal(k1, (32, 32)) / 4).astype(jnp.bfloat16),
            "v": (jax.random.normal(k2, (32, 8)) / 4).astype(jnp.bfloat16)}


def predict(params: dict, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ params["w"]) @ params["v"]
