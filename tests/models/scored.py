"""A classifier returning a dict whose key order differs from jax's flatten (sorted) order."""

import jax

INPUTS = {"x": ("float32", (2, 3))}


def init(key: jax.Array) -> dict:
    return {"w": jax.random.normal(key, (3, 4))}


def predict(params: dict, x: jax.Array) -> dict:
    logits = x @ params["w"]
    probs = jax.nn.softmax(logits, axis=-1)
    # Insertion order score, probs, logits; jax flattens as logits, probs, score.
    return {"score": probs.max(-1), "probs": probs, "logits": logits}
