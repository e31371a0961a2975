"""A model whose run time grows with its input `n`: n rounds of x = tanh(x @ w). The Go tests
of package workers hold an execution in flight with a large n (a crash mid-call, a cancel
behind it); its golden case runs 3 rounds."""

import jax
import jax.numpy as jnp
import numpy as np


def init(key: jax.Array) -> dict:
    return {"w": jax.random.normal(key, (256, 256)) / 16.0}


def predict(params: dict, x: jax.Array, n: jax.Array) -> jax.Array:
    return jax.lax.fori_loop(0, n, lambda _, v: jnp.tanh(v @ params["w"]), x)


def golden_inputs() -> dict:
    return {"three_rounds": (np.full((256, 256), 0.5, np.float32), np.int32(3))}
