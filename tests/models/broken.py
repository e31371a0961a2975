"""Functions the exporter must refuse, each with a one-line error (see tests/exporter)."""

import jax
import jax.numpy as jnp
import numpy as np

INPUTS = {"x": ("float32", (4, 16))}

# A 128x128 float32 table (64 KiB) closed over by `baked`: weights baked into the program.
_TABLE = jnp.asarray(np.random.default_rng(0).standard_normal((128, 128)), jnp.float32)


def init(key: jax.Array) -> dict:
    return {"w": jax.random.normal(key, (16, 128))}


def init_wrong(key: jax.Array) -> dict:
    """Params for a different model (no 'w'): a tree that does not match."""
    return {"kernel": jax.random.normal(key, (16, 128))}


def not_jittable(params: dict, x: jax.Array) -> jax.Array:
    if (x @ params["w"]).sum() > 0:  # Python control flow on a traced value
        return x @ params["w"]
    return -(x @ params["w"])


def with_callback(params: dict, x: jax.Array) -> jax.Array:
    y = x @ params["w"]
    return jax.pure_callback(np.tanh, jax.ShapeDtypeStruct(y.shape, y.dtype), y)


def with_custom_call(params: dict, x: jax.Array) -> jax.Array:
    y = x @ params["w"]
    return jax.ffi.ffi_call("jaxport_test_unregistered_target",
                            jax.ShapeDtypeStruct(y.shape, y.dtype))(y)


def baked(params: dict, x: jax.Array) -> jax.Array:
    return (x @ params["w"]) @ _TABLE


def predict(params: dict, x: jax.Array) -> jax.Array:
    return x @ params["w"]
