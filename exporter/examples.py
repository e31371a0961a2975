"""The bundled example model used by `make demo`: a small two-layer MLP classifier.

`init(key)` builds the params pytree; `predict(params, x)` maps a batch of 16 features to
class logits and probabilities. Export it with
`jaxport export jaxport.exporter.examples:predict --params jaxport.exporter.examples:init
--input x:float32[4,16] --out DIR`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

FEATURES = 16
HIDDEN = 32
CLASSES = 3


def init(key: jax.Array) -> dict[str, dict[str, jax.Array]]:
    """Params: {"hidden": {"w", "b"}, "out": {"w", "b"}}, scaled normal weights."""
    k1, k2 = jax.random.split(key)
    return {
        "hidden": {
            "w": jax.random.normal(k1, (FEATURES, HIDDEN)) / jnp.sqrt(FEATURES),
            "b": jnp.zeros((HIDDEN,)),
        },
        "out": {
            "w": jax.random.normal(k2, (HIDDEN, CLASSES)) / jnp.sqrt(HIDDEN),
            "b": jnp.zeros((CLASSES,)),
        },
    }


def predict(params: dict[str, dict[str, jax.Array]], x: jax.Array) -> dict[str, jax.Array]:
    """Logits and softmax probabilities for a batch `x` of shape (batch, 16)."""
    h = jax.nn.relu(x @ params["hidden"]["w"] + params["hidden"]["b"])
    logits = h @ params["out"]["w"] + params["out"]["b"]
    return {"logits": logits, "probs": jax.nn.softmax(logits, axis=-1)}
