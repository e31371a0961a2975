"""`--params DIR` of a Hugging Face `save_pretrained` directory reads its flax_model.msgpack;
a directory with only PyTorch/safetensors weights, or sharded Flax ones, is refused saying what
to do (jaxport.exporter.checkpoint.hf_weights)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport.artifact import goldens, manifest
from jaxport.exporter import checkpoint
from jaxport.exporter.errors import ExportError


def test_save_pretrained_directory_as_params(tmp_path: Path) -> None:
    hf_vit = model_module("hf_vit")
    saved = hf_vit.save(tmp_path / "tiny-vit")
    out = tmp_path / "m"
    args = model_cli_args("hf_vit", out, "--goldens", "1")
    args[args.index("--params") + 1] = str(tmp_path / "tiny-vit")
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    assert "params.embeddings.patch_embeddings.projection.kernel" in \
        {a.name for a in m.programs[0].arguments}
    case = m.goldens[0]
    x = goldens.load_npy(out / case.inputs["pixel_values"], np.float32)
    want = hf_vit.predict(saved.params, x)["pooled"]
    np.testing.assert_allclose(goldens.load_npy(out / case.outputs["pooled"], np.float32),
                               np.asarray(want), rtol=1e-5, atol=1e-6)


def _hf_dir(root: Path, *files: str) -> Path:
    root.mkdir()
    (root / "config.json").write_text("{}")
    for f in files:
        (root / f).write_bytes(b"x")
    return root


def test_pytorch_only_directory_refused_with_the_conversion(tmp_path: Path) -> None:
    d = _hf_dir(tmp_path / "pt", "model.safetensors")
    with pytest.raises(ExportError) as e:
        checkpoint.hf_weights(str(d))
    msg = str(e.value)
    assert "without Flax weights (model.safetensors, no flax_model.msgpack)" in msg, msg
    assert "from_pt=True).save_pretrained(DIR)" in msg


def test_sharded_flax_directory_refused_with_the_fix(tmp_path: Path) -> None:
    d = _hf_dir(tmp_path / "sharded", "flax_model.msgpack.index.json")
    with pytest.raises(ExportError, match=r"sharded Hugging Face Flax checkpoint .*"
                                          r"max_shard_size="):
        checkpoint.hf_weights(str(d))


def test_other_directory_names_both_shapes(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert checkpoint.hf_weights(str(tmp_path / "empty")) is None
    with pytest.raises(ExportError, match=r"not an Orbax checkpoint .* nor a Hugging Face "
                                          r"save_pretrained directory \(no flax_model\.msgpack\)"):
        checkpoint.restore(str(tmp_path / "empty"))
