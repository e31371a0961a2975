"""A small attention-free sequence model with symbolic batch and length: token embeddings,
a per-token projection and a masked mean over the sequence.

    tokens: int32[B, T]  (ids in [0, 32))      mask: bool[B, T]  (False = padding)
    -> {"pooled": float32[B, 8], "per_token": float32[B, T, 8]}

Exported with `--input tokens:int32[B,T] --input mask:bool[B,T] --dim B=1..64
--dim 'T=8..2048:8'`.
"""

import jax
import jax.numpy as jnp

VOCAB, WIDTH = 32, 8


def init(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {
        "embed": jax.random.normal(k1, (VOCAB, WIDTH)),
        "proj": jax.random.normal(k2, (WIDTH, WIDTH)) / 3.0,
        "bias": jnp.linspace(-0.5, 0.5, WIDTH),
    }


def predict(params: dict, tokens: jax.Array, mask: jax.Array) -> dict:
    h = jnp.tanh(params["embed"][tokens] @ params["proj"] + params["bias"])
    m = mask[..., None].astype(h.dtype)
    pooled = (h * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1.0)
    return {"pooled": pooled, "per_token": h * m}
