"""A bfloat16 model whose output comes from cancelling products: rounding each intermediate
to bf16 (one op at a time) or once (excess precision) gives visibly different results."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("bfloat16", (4, 16))}


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {"w": jax.random.normal(k1, (16, 8)).astype(jnp.bfloat16),
            "v": jax.random.normal(k2, (16, 8)).astype(jnp.bfloat16)}


def predict(params: dict, x: jax.Array) -> jax.Array:
    h = x @ params["w"] + x @ params["v"]
    return h * jnp.bfloat16(1.5) - h * jnp.bfloat16(1.4375)
