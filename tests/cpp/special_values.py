"""Row min and max (reductions) and an elementwise clip over data holding NaN and infinities:
where XLA's CPU fast min/max would differ from JAX (tests/cpp exports it with `jaxport export`).

    x: float32[3, 4] -> {"lo": float32[3], "hi": float32[3], "clipped": float32[3, 4]}
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

X = np.array(
    [[1.0, np.nan, -2.0, 3.0], [np.inf, 0.5, -np.inf, 2.0], [-0.0, 0.0, np.nan, np.nan]], np.float32
)


def init(key: jax.Array) -> dict[str, jax.Array]:
    del key
    return {"floor": jnp.float32(-1.0), "ceil": jnp.float32(2.5)}


def predict(params: dict[str, jax.Array], x: jax.Array) -> dict[str, jax.Array]:
    return {
        "lo": jnp.min(x, axis=1),
        "hi": jnp.max(x, axis=1),
        "clipped": jnp.minimum(jnp.maximum(x, params["floor"]), params["ceil"]),
    }


def golden_inputs() -> dict[str, list[np.ndarray]]:
    """The special-values case, besides the sampled ones."""
    return {"special": [X]}
