"""`--pad T=attention_mask` with an integer mask (Hugging Face masks are int32; 0 = padding):
accepted, checked at export like a bool mask, its goldens drawn as 0/1, and a request padded
with zeros up to a bucket program answers as the unpadded function (rtol 1e-5 / atol 1e-6,
float32: two XLA:CPU compilations of the same ops)."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from exporter_helpers import model_module
from jax import export as jax_export
from jaxport.artifact import goldens, manifest
from jaxport.exporter import api, verify
from jaxport.exporter.errors import ExportError

seq = model_module("seq")
INPUTS = {"tokens": (("B", "T"), np.int32), "attention_mask": (("B", "T"), np.int32)}
DIMS = {"B": "1..4", "T": "8..64:8"}


def _predict(params, tokens, attention_mask):
    return seq.predict(params, tokens, attention_mask)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("intmask") / "m"
    api.export(_predict, seq.init(jax.random.key(0)), INPUTS, out, dims=DIMS,
               buckets={"T": [16, 32]}, batch_sizes=[2], padding={"T": "attention_mask"},
               goldens=1, quiet=True)
    return out


def test_int_mask_recorded_and_goldens_are_zero_or_one(artifact: Path) -> None:
    m = manifest.load(artifact)
    assert [(p.dim, p.mask_input) for p in m.padding] == [("T", "attention_mask")]
    masks = [goldens.load_npy(artifact / c.inputs["attention_mask"], np.int32)
             for c in m.goldens]
    assert masks and all(set(np.unique(a)) <= {0, 1} for a in masks)
    assert any(0 in a and 1 in a for a in masks)
    results = verify.run_checks(artifact, checks=["checksums", "jaxexport"])
    assert [r.status for r in results] == ["pass", "pass"], results


def test_a_request_padded_with_zeros_to_a_bucket_answers_as_unpadded(artifact: Path) -> None:
    m = manifest.load(artifact)
    bucket = next(p for p in m.programs if dict(p.dims) == {"B": 2, "T": 16})
    exp = jax_export.deserialize(bytearray((artifact / bucket.jaxexport_file).read_bytes()))
    params = seq.init(jax.random.key(0))
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, seq.VOCAB, (2, 8)).astype(np.int32)
    mask = np.ones((2, 8), np.int32)
    mask[1, 5:] = 0
    want = jax.jit(_predict)(params, tokens, mask)
    pad = ((0, 0), (0, 8))  # T 8 -> the bucket's 16, zeros (mask 0 = padding)
    got = exp.call(params, np.pad(tokens, pad), np.pad(mask, pad))  # the function's dict
    np.testing.assert_allclose(np.asarray(got["pooled"]), np.asarray(want["pooled"]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got["per_token"])[:, :8],
                               np.asarray(want["per_token"]), rtol=1e-5, atol=1e-6)


def test_int_mask_the_function_does_not_honour_is_refused(tmp_path: Path) -> None:
    def unmasked(p, tokens, attention_mask):
        return {"pooled": p["embed"][tokens].mean(axis=1)}

    with pytest.raises(ExportError, match=r"--pad T=attention_mask: padding T from 8 to 24 "
                                          r"with attention_mask False there changes"):
        api.export(unmasked, seq.init(jax.random.key(0)), INPUTS, tmp_path / "o", dims=DIMS,
                   buckets={"T": [16]}, batch_sizes=[1], padding={"T": "attention_mask"},
                   quiet=True)
