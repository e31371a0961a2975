"""Nested params (dicts of lists of dicts), several inputs and several (nested) outputs."""

import jax
import jax.numpy as jnp

INPUTS = {"x": ("float32", (3, 4)), "scale": ("float32", ()), "ids": ("int32", (3,))}


def init(key: jax.Array) -> dict:
    ks = jax.random.split(key, 4)
    return {
        "encoder": {
            "layers": [
                {"w": jax.random.normal(ks[0], (4, 4)), "norm": {"g": jnp.ones((4,))}},
                {"w": jax.random.normal(ks[1], (4, 4)), "norm": {"g": jnp.full((4,), 0.5)}},
            ],
        },
        "embed": jax.random.normal(ks[2], (10, 4)),
        "a_head": [{"w": jax.random.normal(ks[3], (4, 2))}],
    }


def predict(params: dict, x: jax.Array, scale: jax.Array, ids: jax.Array) -> dict:
    h = x + params["embed"][ids]
    for layer in params["encoder"]["layers"]:
        h = jnp.tanh(h @ layer["w"]) * layer["norm"]["g"]
    out = h @ params["a_head"][0]["w"] * scale
    return {"head": out, "aux": {"norm": jnp.sqrt((h * h).sum(-1)), "argmax": out.argmax(-1)}}


def real_inputs() -> dict:
    """Golden inputs from "real data" for --golden-inputs: by name, and in input order."""
    import numpy as np

    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    return {"real_a": {"x": x, "scale": np.float32(2.0), "ids": np.array([9, 0, 3], np.int32)},
            "real_b": [x * 2, np.float32(0.5), np.array([1, 1, 1])]}  # int64 ids: cast
