"""Small conv net (NHWC conv -> relu -> conv -> global mean pool -> dense)."""

import jax
import jax.numpy as jnp
from jax import lax

INPUTS = {"image": ("float32", (2, 8, 8, 3))}


def init(key: jax.Array) -> dict:
    k1, k2, k3 = jax.random.split(key, 3)
    return {
        "conv1": {"w": jax.random.normal(k1, (3, 3, 3, 8)) / 5.0, "b": jnp.full((8,), 0.01)},
        "conv2": {"w": jax.random.normal(k2, (3, 3, 8, 8)) / 8.0, "b": jnp.zeros((8,))},
        "dense": {"w": jax.random.normal(k3, (8, 5)) / 3.0, "b": jnp.zeros((5,))},
    }


def _conv(x: jax.Array, w: jax.Array, b: jax.Array, stride: int) -> jax.Array:
    y = lax.conv_general_dilated(
        x, w, window_strides=(stride, stride), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
    return jax.nn.relu(y + b)


def predict(params: dict, image: jax.Array) -> dict:
    h = _conv(image, params["conv1"]["w"], params["conv1"]["b"], 1)
    h = _conv(h, params["conv2"]["w"], params["conv2"]["b"], 2)
    pooled = h.mean(axis=(1, 2))
    logits = pooled @ params["dense"]["w"] + params["dense"]["b"]
    return {"logits": logits, "probs": jax.nn.softmax(logits, axis=-1)}
