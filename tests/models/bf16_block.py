"""A bfloat16 pre-norm transformer block (LayerNorm, 4-head self-attention with softmax, GELU
MLP, residuals): everything, weights and activations, in bf16, as a bf16-trained model runs.

XLA keeps some intermediates in higher precision and IREE rounds them to bf16 one op at a
time, so their answers differ by more than a fixed bf16 tolerance while both stay within
bf16 rounding of a float32 evaluation of the same program (what verify's rule is for).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

D, HEADS, FF, SEQ = 64, 4, 128, 16
INPUTS = {"x": ("bfloat16", (2, SEQ, D))}
BF16 = jnp.bfloat16


def init(key: jax.Array) -> dict:
    ks = jax.random.split(key, 6)

    def dense(k, n_in, n_out):
        return (jax.random.normal(k, (n_in, n_out)) / jnp.sqrt(n_in)).astype(BF16)

    return {
        "ln1": {"scale": jnp.ones((D,), BF16), "bias": jnp.zeros((D,), BF16)},
        "ln2": {"scale": jnp.ones((D,), BF16), "bias": jnp.zeros((D,), BF16)},
        "attn": {"q": dense(ks[0], D, D), "k": dense(ks[1], D, D), "v": dense(ks[2], D, D),
                 "o": dense(ks[3], D, D)},
        "mlp": {"up": dense(ks[4], D, FF), "down": dense(ks[5], FF, D)},
    }


def _layer_norm(x: jax.Array, p: dict) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + BF16(1e-5)) * p["scale"] + p["bias"]


def _attention(x: jax.Array, p: dict) -> jax.Array:
    b, s, _ = x.shape

    def heads(w):
        return (x @ w).reshape(b, s, HEADS, D // HEADS).transpose(0, 2, 1, 3)

    q, k, v = heads(p["q"]), heads(p["k"]), heads(p["v"])
    scores = q @ k.transpose(0, 1, 3, 2) / BF16((D // HEADS) ** 0.5)
    out = jax.nn.softmax(scores, axis=-1) @ v
    return out.transpose(0, 2, 1, 3).reshape(b, s, D) @ p["o"]


def predict(params: dict, x: jax.Array) -> jax.Array:
    h = x + _attention(_layer_norm(x, params["ln1"]), params["attn"])
    return h + jax.nn.gelu(_layer_norm(h, params["ln2"]) @ params["mlp"]["up"]) \
        @ params["mlp"]["down"]
