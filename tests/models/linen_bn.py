"""A Flax Linen CNN with BatchNorm and Dropout, trained a few steps and saved as a TrainState
(params + batch_stats + optimizer state + step) by an Orbax CheckpointManager.

`predict(variables, x)` is inference (`train=False`: BatchNorm uses the running statistics,
Dropout is the identity) with Linen's variables dict `{"params": ..., "batch_stats": ...}`,
which `--params-path params,batch_stats` of the checkpointed TrainState gives.
`save_checkpoints(root)` trains and saves steps 1..3 (BatchNorm statistics and weights move,
so a stale or missing `batch_stats` would change every answer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax.training import train_state

INPUTS = {"x": ("float32", (2, 8, 8, 3))}
CLASSES = 5


class Net(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        h = nn.Conv(8, (3, 3), name="conv")(x)
        h = nn.BatchNorm(use_running_average=not train, momentum=0.5, name="bn")(h)
        h = nn.relu(h)
        h = nn.Dropout(0.3, deterministic=not train, name="drop")(h)
        h = h.mean(axis=(1, 2))
        return nn.Dense(CLASSES, name="head")(h)


model = Net()


class TrainState(train_state.TrainState):
    """Flax's TrainState plus BatchNorm's running statistics (the documented pattern)."""

    batch_stats: Any


def init(key: jax.Array) -> dict:
    return model.init(key, jnp.zeros((2, 8, 8, 3), jnp.float32))


def predict(variables: dict, x: jax.Array) -> dict:
    logits = model.apply(variables, x, train=False)
    return {"logits": logits, "probs": jax.nn.softmax(logits)}


def train(steps: int) -> list[TrainState]:
    """The TrainState after each of `steps` SGD steps on random data (dropout on)."""
    variables = init(jax.random.key(0))
    state = TrainState.create(apply_fn=model.apply, params=variables["params"],
                              batch_stats=variables["batch_stats"], tx=optax.sgd(0.1))

    @jax.jit
    def step(state: TrainState, x: jax.Array, y: jax.Array, key: jax.Array) -> TrainState:
        def loss(params):
            logits, updates = model.apply(
                {"params": params, "batch_stats": state.batch_stats}, x, train=True,
                mutable=["batch_stats"], rngs={"dropout": key})
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), updates

        grads, updates = jax.grad(loss, has_aux=True)(state.params)
        return state.apply_gradients(grads=grads, batch_stats=updates["batch_stats"])

    out = []
    for i in range(steps):
        kx, ky, kd = jax.random.split(jax.random.key(100 + i), 3)
        x = jax.random.normal(kx, (16, 8, 8, 3)) * 2.0 + 1.0
        y = jax.random.randint(ky, (16,), 0, CLASSES)
        state = step(state, x, y, kd)
        out.append(state)
    return out


def save_checkpoints(root: Path, steps: int = 3) -> list[TrainState]:
    """Train and save every step's TrainState with a CheckpointManager at `root`."""
    import orbax.checkpoint as ocp

    states = train(steps)
    with ocp.CheckpointManager(Path(root).absolute()) as mngr:
        for i, state in enumerate(states, start=1):
            mngr.save(i, args=ocp.args.StandardSave(state))
        mngr.wait_until_finished()
    return states
