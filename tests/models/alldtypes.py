"""Parameters, inputs and outputs in every dtype the exporter carries (needs x64 for 64-bit)."""

import jax
import jax.numpy as jnp
import numpy as np

INPUTS = {
    "f32": ("float32", (2, 3)),
    "bf16": ("bfloat16", (2, 3)),
    "f16": ("float16", (2, 3)),
    "f64": ("float64", (2, 3)),
    "i8": ("int8", (2, 3)),
    "i32": ("int32", (2, 3)),
    "i64": ("int64", (2, 3)),
    "u8": ("uint8", (2, 3)),
    "flag": ("bool", (2, 3)),
}


def init(key: jax.Array) -> dict:
    del key
    base = np.arange(6, dtype=np.float64).reshape(2, 3) / 4.0 - 0.5
    return {
        "f32": jnp.asarray(base, jnp.float32),
        "bf16": jnp.asarray(base, jnp.bfloat16),
        "f16": jnp.asarray(base, jnp.float16),
        "f64": np.asarray(base, np.float64),
        "i8": np.asarray([[-3, 2, 1], [0, -1, 4]], np.int8),
        "i32": np.asarray([[7, -2, 3], [1, 0, 9]], np.int32),
        "i64": np.asarray([[2**40, -5, 3], [1, 0, -(2**35)]], np.int64),
        "u8": np.asarray([[200, 1, 2], [3, 250, 5]], np.uint8),
        "flag": np.asarray([[True, False, True], [False, True, False]]),
    }


def predict(p: dict, f32, bf16, f16, f64, i8, i32, i64, u8, flag) -> dict:
    return {
        "f32": f32 * p["f32"] + 1.0,
        "bf16": bf16 * p["bf16"] + jnp.bfloat16(0.5),
        "f16": f16 + p["f16"],
        "f64": f64 * p["f64"] + 1e-12,
        "i8": i8 + p["i8"],
        "i32": i32 * p["i32"],
        "i64": i64 + p["i64"],
        "u8": u8 + p["u8"],
        "flag": jnp.logical_xor(flag, p["flag"]),
    }
