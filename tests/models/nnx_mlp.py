"""A Flax NNX model with Dropout(rngs=...): params are the module itself (RNG state inside)."""

import jax
from flax import nnx

INPUTS = {"x": ("float32", (2, 3))}


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(3, 8, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.drop(jax.nn.relu(self.hidden(x))))


def init(key: jax.Array) -> MLP:
    model = MLP(nnx.Rngs(params=key, dropout=1))
    model.eval()  # inference: Dropout is the identity
    return model


def predict(model: MLP, x: jax.Array) -> jax.Array:
    return model(x)


def init_state(key: jax.Array) -> nnx.State:
    """The module's state only (what nnx.split returns), for functions that merge it."""
    return nnx.split(init(key))[1]


GRAPHDEF = nnx.split(init(jax.random.key(0)))[0]


def predict_state(state: nnx.State, x: jax.Array) -> jax.Array:
    return nnx.merge(GRAPHDEF, state)(x)
