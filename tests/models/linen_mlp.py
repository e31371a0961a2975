"""A Flax Linen model: params are a FrozenDict ({"params": {...}}) applied with model.apply."""

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.core import freeze

INPUTS = {"x": ("float32", (2, 3))}


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> dict:
        h = nn.relu(nn.Dense(8, name="hidden")(x))
        logits = nn.Dense(2, name="out")(h)
        return {"logits": logits, "probs": jax.nn.softmax(logits)}


model = MLP()


def init(key: jax.Array):
    return freeze(model.init(key, jnp.zeros((2, 3), jnp.float32)))


def predict(variables, x: jax.Array) -> dict:
    return model.apply(variables, x)


def predict_bare(params, x: jax.Array) -> dict:
    """Apply a bare params tree (Hugging Face's flax_model.msgpack holds no "params" level)."""
    return model.apply({"params": params}, x)
