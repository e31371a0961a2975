"""The models the benchmark exports and serves.

- `mlp`: 512 -> 2048 -> 2048 -> 512 with ReLU, f32, 25 MiB of weights: at batch 1 it is a
  chain of matrix-vector products bound by reading the weights, so batching concurrent
  requests onto one program amortises that read (what dynamic batching is for).
- `elementwise`: y = x * scale + shift over a flat f32 vector of 1, 16 or 64 MiB: compute is
  trivial, so requests/s x bytes measures the transport against memcpy.
- `big_params` / `big_params_jax`: 1 GiB of parameters in 16 arrays (numpy, or the same
  values as `jax.Array`s on the device), for the exporter's write throughput and peak RSS.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

MLP_IN, MLP_HIDDEN, MLP_OUT = 512, 2048, 512
MIB = 1 << 20


def mlp(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Three dense layers; rows are independent (so batching never mixes requests)."""
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    h = jax.nn.relu(h @ params["w2"] + params["b2"])
    return h @ params["w3"] + params["b3"]


def mlp_params(seed: int = 0) -> dict[str, np.ndarray]:
    """He-scaled random weights (f32) so activations stay O(1) through the layers."""
    rng = np.random.default_rng(seed)

    def dense(n_in: int, n_out: int) -> np.ndarray:
        return (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)

    return {
        "w1": dense(MLP_IN, MLP_HIDDEN),
        "b1": rng.standard_normal(MLP_HIDDEN).astype(np.float32) * 0.1,
        "w2": dense(MLP_HIDDEN, MLP_HIDDEN),
        "b2": rng.standard_normal(MLP_HIDDEN).astype(np.float32) * 0.1,
        "w3": dense(MLP_HIDDEN, MLP_OUT),
        "b3": rng.standard_normal(MLP_OUT).astype(np.float32) * 0.1,
    }


def elementwise(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """y = x * scale + shift (scalars): one pass over the tensor."""
    return x * params["scale"] + params["shift"]


def elementwise_params() -> dict[str, np.ndarray]:
    """Scalar parameters of `elementwise`."""
    return {"scale": np.float32(2.0), "shift": np.float32(0.5)}


def _big_arrays(total_bytes: int, arrays: int, seed: int) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) pairs of `total_bytes` f32 in `arrays` square-ish random matrices, made
    one at a time so a caller that converts and drops each holds one host array at most."""
    rows = total_bytes // arrays // 4 // 4096
    rng = np.random.default_rng(seed)
    for i in range(arrays):
        a = np.empty((rows, 4096), dtype=np.float32)
        rng.random(out=a, dtype=np.float32)
        yield f"w{i:02d}", a


def big_params(
    total_bytes: int = 1 << 30, arrays: int = 16, seed: int = 0
) -> dict[str, np.ndarray]:
    """`total_bytes` of f32 parameters in `arrays` square-ish matrices (random, incompressible)."""
    return dict(_big_arrays(total_bytes, arrays, seed))


def big_params_jax(
    total_bytes: int = 1 << 30, arrays: int = 16, seed: int = 0
) -> dict[str, jax.Array]:
    """`big_params`' values as `jax.Array`s on the default device, like params from training or
    an Orbax restore; built one array at a time so at most one host array exists at once."""
    return {name: jax.block_until_ready(jax.device_put(a))
            for name, a in _big_arrays(total_bytes, arrays, seed)}


def big_params_fn(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """Uses every parameter (none dropped): sum over i of x[:, :rows_i] @ w_i."""
    acc = jnp.zeros((x.shape[0], 4096), jnp.float32)
    for _, w in sorted(params.items()):
        acc = acc + x[:, : w.shape[0]] @ w
    return acc
