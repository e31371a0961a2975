"""Pre-norm single-block multi-head self-attention with an MLP, plus its attention weights."""

import jax
import jax.numpy as jnp

INPUTS = {"tokens": ("float32", (2, 6, 16)), "mask": ("bool", (2, 6))}
HEADS = 2


def init(key: jax.Array) -> dict:
    ks = jax.random.split(key, 6)
    d = 16
    return {
        "ln": {"scale": jnp.ones((d,)), "bias": jnp.zeros((d,))},
        "wq": jax.random.normal(ks[0], (d, d)) / 4.0,
        "wk": jax.random.normal(ks[1], (d, d)) / 4.0,
        "wv": jax.random.normal(ks[2], (d, d)) / 4.0,
        "wo": jax.random.normal(ks[3], (d, d)) / 4.0,
        "mlp": [
            {"w": jax.random.normal(ks[4], (d, 32)) / 4.0, "b": jnp.zeros((32,))},
            {"w": jax.random.normal(ks[5], (32, d)) / 6.0, "b": jnp.zeros((d,))},
        ],
    }


def _layer_norm(x: jax.Array, p: dict) -> jax.Array:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * p["scale"] + p["bias"]


def predict(params: dict, tokens: jax.Array, mask: jax.Array) -> tuple:
    b, t, d = tokens.shape
    h = _layer_norm(tokens, params["ln"])

    def heads(w: jax.Array) -> jax.Array:
        return (h @ w).reshape(b, t, HEADS, d // HEADS).transpose(0, 2, 1, 3)

    q, k, v = heads(params["wq"]), heads(params["wk"]), heads(params["wv"])
    scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // HEADS)
    scores = jnp.where(mask[:, None, None, :], scores, -1e9)
    weights = jax.nn.softmax(scores, axis=-1)
    attn = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, d) @ params["wo"]
    x = tokens + attn
    m0, m1 = params["mlp"]
    x = x + jax.nn.gelu(x @ m0["w"] + m0["b"]) @ m1["w"] + m1["b"]
    return x, weights
