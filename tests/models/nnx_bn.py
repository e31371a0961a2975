"""A Flax NNX Conv + BatchNorm + Dropout classifier, for training-mode exports and Orbax
checkpoints of NNX state.

`init` leaves the module in training mode (what `nnx.Module` is after construction: Dropout
draws, BatchNorm normalises with batch statistics); `init_eval` calls `model.eval()`.
`save_state(path)` writes `nnx.split(model)`'s state with Orbax's StandardCheckpointer (RNG
leaves included, as a user does), and `predict_state` merges such a state back.
"""

from pathlib import Path

import jax
from flax import nnx

INPUTS = {"x": ("float32", (2, 6, 6, 3))}


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(3, 4, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.head = nnx.Linear(4, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.drop(jax.nn.relu(self.bn(self.conv(x))))
        return self.head(h.mean(axis=(1, 2)))


def init(key: jax.Array) -> Net:
    return Net(nnx.Rngs(params=key, dropout=1))


def init_eval(key: jax.Array) -> Net:
    model = init(key)
    model.eval()
    return model


def predict(model: Net, x: jax.Array) -> jax.Array:
    return model(x)


GRAPHDEF = nnx.split(init_eval(jax.random.key(0)))[0]


def predict_state(state: nnx.State, x: jax.Array) -> jax.Array:
    return nnx.merge(GRAPHDEF, state)(x)


def save_state(path: Path) -> nnx.State:
    """`nnx.split` + `StandardCheckpointer().save(path, state)` of the eval-mode model."""
    import orbax.checkpoint as ocp

    _, state = nnx.split(init_eval(jax.random.key(0)))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(Path(path).absolute(), state)
    return state
