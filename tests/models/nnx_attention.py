"""A Flax NNX encoder block: MultiHeadAttention (with attention dropout), Dropout, LayerNorm
and a classification head. The module is its own params (RNG streams inside): `init` returns
the module in eval mode, `predict(model, x)` calls it."""

from __future__ import annotations

import jax
from flax import nnx

INPUTS = {"x": ("float32", (2, 6, 16))}


class Encoder(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.attn = nnx.MultiHeadAttention(num_heads=4, in_features=16, dropout_rate=0.1,
                                           decode=False, rngs=rngs)
        self.drop = nnx.Dropout(0.2, rngs=rngs)
        self.norm = nnx.LayerNorm(16, rngs=rngs)
        self.head = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> dict:
        h = self.norm(x + self.drop(self.attn(x)))
        logits = self.head(h.mean(axis=1))
        return {"logits": logits, "probs": jax.nn.softmax(logits)}


def init(key: jax.Array) -> Encoder:
    model = Encoder(nnx.Rngs(params=key, dropout=1))
    model.eval()  # inference: both dropouts are the identity
    return model


def predict(model: Encoder, x: jax.Array) -> dict:
    return model(x)
