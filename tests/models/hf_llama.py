"""A tiny Hugging Face Flax Llama (random init from a config): the library builds its rotary
position table (`max_position_embeddings` x 1 x head_dim, sin and cos, f32: here 512x1x32 =
64 KiB) as a constant inside the model, above the exporter's default 16 KiB limit on baked
constants."""

from __future__ import annotations

import jax
from transformers import FlaxLlamaModel, LlamaConfig

INPUTS = {"input_ids": ("int32", (1, 8))}
TABLE_BYTES = 512 * 1 * 32 * 4

config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512)
model = FlaxLlamaModel(config, _do_init=False)


def init(key: jax.Array) -> dict:
    return FlaxLlamaModel(config, seed=int(jax.random.randint(key, (), 0, 2**16))).params


def predict(params: dict, input_ids: jax.Array) -> dict:
    return {"hidden": model(input_ids, params=params).last_hidden_state}
