"""A tiny Hugging Face Flax ViT built from a config (no download), as a user exports one:
`save(dir)` writes a `save_pretrained` directory (config.json + flax_model.msgpack), and
`predict(params, pixel_values)` runs the model with those params."""

from pathlib import Path

from transformers import FlaxViTModel, ViTConfig

INPUTS = {"pixel_values": ("float32", (1, 3, 8, 8))}
CONFIG = ViTConfig(image_size=8, patch_size=4, num_channels=3, hidden_size=16,
                   num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
model = FlaxViTModel(CONFIG, _do_init=False)


def save(path: Path) -> FlaxViTModel:
    """A config-initialised model saved with `save_pretrained` at `path`."""
    initialised = FlaxViTModel(CONFIG, seed=0)
    initialised.save_pretrained(path)
    return initialised


def predict(params: dict, pixel_values):
    return {"pooled": model(pixel_values, params=params).pooler_output}
