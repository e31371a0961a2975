"""The models `make bench` serves, their repository, requests and JAX's answers.

- The MLP of issue 12 and 36, 64 -> 256 (ReLU) -> 16 f32 (83 KB of weights): its cost per
  request is the transport's, so it measures the server's request path. `mlp8` takes 8-row
  requests (batch 8); `mlp1` 1-row requests; `mlp1_batched` is exported with batch sizes
  BATCH_SIZES for dynamic batching of 1-row requests.
- The compute-bound MLP 1024 -> 4096 (ReLU) -> 1024 f32 (33 MB of weights): a 1-row request is
  a matrix-vector product reading every weight, so 64 rows can share one read; `big1` and
  `big1_batched` as above.
- The 1 GiB model (4 x 8192x8192 f32, issue 36's load case): y = x @ w0 @ w1 @ w2 @ w3, every
  weight used; `gib`.
- The demo model of `make demo` (`jaxport.exporter.examples`, x: float32[4,16]) for issue 33's
  footprint figures.

Rows of every MLP are independent, so batching never mixes requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
SMALL = (64, 256, 16)
BIG = (1024, 4096, 1024)
GIB_SIDE, GIB_ARRAYS = 8192, 4
MLP_TOL = {"rtol": 1e-4, "atol": 1e-4}  # f32: the engines may fuse or reorder the matmuls


@dataclass(frozen=True)
class Model:
    """One model of the bench repository: its MLP dims, the rows of its requests, the batch
    sizes it is exported with (None: one fixed-shape program of `rows` rows)."""

    name: str
    dims: tuple[int, int, int]
    rows: int
    batch_sizes: tuple[int, ...] | None = None


MODELS = {m.name: m for m in (
    Model("mlp8", SMALL, 8),
    Model("mlp1", SMALL, 1),
    Model("mlp1_batched", SMALL, 1, BATCH_SIZES),
    Model("big1", BIG, 1),
    Model("big1_batched", BIG, 1, BATCH_SIZES),
)}
BATCHED = tuple(m.name for m in MODELS.values() if m.batch_sizes)


def mlp(params: dict[str, Any], x: Any) -> Any:
    """relu(x @ w1 + b1) @ w2 + b2."""
    import jax

    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def mlp_params(dims: tuple[int, int, int], seed: int = 1) -> dict[str, np.ndarray]:
    """He-scaled random f32 weights (activations stay O(1))."""
    n_in, hidden, n_out = dims
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((n_in, hidden)) * np.sqrt(2 / n_in)).astype(np.float32),
        "b1": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((hidden, n_out)) * np.sqrt(2 / hidden)).astype(np.float32),
        "b2": (rng.standard_normal(n_out) * 0.1).astype(np.float32),
    }


def export_repository(repo: Path) -> None:
    """Every model of MODELS as `repo/<name>/1`."""
    import jax
    from jaxport.exporter import export

    params = {dims: mlp_params(dims) for dims in {m.dims for m in MODELS.values()}}
    for m in MODELS.values():
        spec = {"x": jax.ShapeDtypeStruct((m.rows, m.dims[0]), np.float32)}
        export(mlp, params[m.dims], spec, repo / m.name / "1", output_names=["y"], name=m.name,
               quiet=True, goldens=1, **({"batch_sizes": m.batch_sizes} if m.batch_sizes else {}))


@dataclass(frozen=True)
class Request:
    """A serialized ModelInferRequest (raw contents) and JAX's answer to it."""

    model: str
    raw: bytes
    x: np.ndarray
    expected: np.ndarray


def request(model: str, seed: int = 3) -> Request:
    """One request of `model`'s rows (random normal inputs) and jax.jit(mlp)'s answer."""
    import jax
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    m = MODELS[model]
    x = np.random.default_rng(seed).standard_normal((m.rows, m.dims[0])).astype(np.float32)
    req = pb.ModelInferRequest(model_name=model, id="bench")
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    expected = np.asarray(jax.jit(mlp)(mlp_params(m.dims), x))
    return Request(model, req.SerializeToString(), x, expected)


def gib_fn(params: dict[str, Any], x: Any) -> Any:
    """x @ w0 @ w1 @ w2 @ w3 (every parameter used)."""
    for name in sorted(params):
        x = x @ params[name]
    return x


def export_gib(out: Path) -> int:
    """The 1 GiB model as the artifact `out`; its weight bytes. The arrays are random f32
    scaled so the chain stays O(1), made one at a time."""
    import jax
    from jaxport.exporter import export

    rng = np.random.default_rng(7)
    params = {}
    for i in range(GIB_ARRAYS):
        a = rng.standard_normal((GIB_SIDE, GIB_SIDE), dtype=np.float32)
        a *= np.float32(1 / np.sqrt(GIB_SIDE))
        params[f"w{i}"] = a
    spec = {"x": jax.ShapeDtypeStruct((1, GIB_SIDE), np.float32)}
    export(gib_fn, params, spec, out, output_names=["y"], name="gib", quiet=True, goldens=1)
    return sum(a.nbytes for a in params.values())


def export_demo(out: Path) -> None:
    """`make demo`'s model as the artifact `out`."""
    from jaxport.exporter.cli import export_main

    rc = export_main(["jaxport.exporter.examples:predict", "--params",
                      "jaxport.exporter.examples:init", "--input", "x:float32[4,16]",
                      "--out", str(out), "--name", "example", "--quiet"])
    if rc:
        raise RuntimeError(f"exporting the demo model failed ({rc})")


def export_ew16(out: Path) -> None:
    """y = x * 2 + 0.5 over 16 MiB of f32 (tests/bench/wire's `affine` answer): the 16 MiB
    case, whose cost is moving the bytes."""
    import jax
    from jaxport.exporter import export

    spec = {"x": jax.ShapeDtypeStruct((16 * (1 << 20) // 4,), np.float32)}
    export(lambda p, x: x * p["scale"] + p["shift"],
           {"scale": np.float32(2.0), "shift": np.float32(0.5)}, spec, out, output_names=["y"],
           name="ew16", quiet=True, goldens=1)


# The exporter section's parameters (tests/bench/exporter.py).


def _big_arrays(total_bytes: int, arrays: int, seed: int) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) pairs of `total_bytes` f32 in `arrays` random matrices of 4096 columns,
    made one at a time so a caller that converts and drops each holds one host array at most."""
    rows = total_bytes // arrays // 4 // 4096
    rng = np.random.default_rng(seed)
    for i in range(arrays):
        a = np.empty((rows, 4096), dtype=np.float32)
        rng.random(out=a, dtype=np.float32)
        yield f"w{i:02d}", a


def big_params(total_bytes: int = 1 << 30, arrays: int = 16,
               seed: int = 0) -> dict[str, np.ndarray]:
    """`total_bytes` of f32 parameters in `arrays` matrices (random, incompressible)."""
    return dict(_big_arrays(total_bytes, arrays, seed))


def big_params_jax(total_bytes: int = 1 << 30, arrays: int = 16,
                   seed: int = 0) -> dict[str, Any]:
    """`big_params`' values as `jax.Array`s on the default device, like params from training or
    an Orbax restore; one host array at a time."""
    import jax

    return {name: jax.block_until_ready(jax.device_put(a))
            for name, a in _big_arrays(total_bytes, arrays, seed)}


def big_params_fn(params: dict[str, Any], x: Any) -> Any:
    """Uses every parameter (none dropped): sum over i of x[:, :rows_i] @ w_i."""
    import jax.numpy as jnp

    acc = jnp.zeros((x.shape[0], 4096), jnp.float32)
    for _, w in sorted(params.items()):
        acc = acc + x[:, : w.shape[0]] @ w
    return acc
