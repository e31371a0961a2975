"""Bucket shapes a client can discover, and an int-mask padded model served on them (issue 28
item 5).

`tests/models/seq.py` with its mask declared int32 (a Hugging Face `attention_mask`; 0 marks
padding) is exported with `dims={"B": "2..4:2", "T": "1..64"}`, `buckets={"T": [16, 32]}`,
`batch_sizes=[2]` and `padding={"T": "attention_mask"}` (the flags `--dim`, `--buckets`,
`--batch-sizes`, `--pad`) and served by a real `jaxport serve --engine pjrt`: a request of
T=10 runs on the T=16 bucket, padded with zeros (mask 0) by `Model.execute`, and answers as the
original function jitted by JAX on the unpadded input, within `jaxport verify`'s float32
tolerance (a mask the server padded with ones, or padding left visible in the outputs, moves
`pooled` by O(0.1)). ModelMetadata still says -1 for both dimensions (the protocol's
TensorMetadata has no parameters); ModelConfig's `parameters`, over gRPC and as the REST
config JSON the front builds from the same message, name the rules (`dims`), the bucket sizes
served (`buckets`) and the padded dimension with its mask (`padding`). Served by `--engine
exported`, which runs every admissible size, the config names the rules only; a fixed-shape
model none of them.
"""

from __future__ import annotations

import http.client
import json
import sys
from pathlib import Path

import grpc
import jax
import numpy as np
import pytest
from jaxport.client import InferenceClient, InferenceServerError
from jaxport.exporter.verify.tolerances import tolerance
from support.bridge import BridgeProcess

MODELS = Path(__file__).resolve().parents[1] / "models"
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))
import seq  # noqa: E402

NAME = "intmask"
DIMS = "B=2..4:2,T=1..64"
BUCKETS = "B=2,T=16;B=2,T=32"


def _predict(params, tokens, attention_mask):
    return seq.predict(params, tokens, attention_mask)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    root = tmp_path_factory.mktemp("bucket_repo")
    export(_predict, seq.init(jax.random.key(0)),
           {"tokens": (("B", "T"), np.int32), "attention_mask": (("B", "T"), np.int32)},
           root / NAME / "1", dims={"B": "2..4:2", "T": "1..64"}, buckets={"T": [16, 32]},
           batch_sizes=[2], padding={"T": "attention_mask"}, goldens=0, quiet=True, name=NAME)
    export(_predict, seq.init(jax.random.key(0)),  # fixed shapes: none of the parameters
           {"tokens": jax.ShapeDtypeStruct((2, 16), np.int32),
            "attention_mask": jax.ShapeDtypeStruct((2, 16), np.int32)},
           root / "fixed" / "1", goldens=0, quiet=True, name="fixed")
    return root


def _parameters(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()
            if k in ("dims", "buckets", "padding")}


def _rest_config(server: BridgeProcess) -> dict:
    port = json.loads(server.port_file.read_text())["http_port"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", f"/v2/models/{NAME}/config")
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200, body
    return json.loads(body)


def test_int_mask_request_padded_to_a_bucket_answers_as_unpadded(repo: Path) -> None:
    params = seq.init(jax.random.key(0))
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, seq.VOCAB, (2, 10)).astype(np.int32)
    mask = np.ones((2, 10), np.int32)
    mask[1, 6:] = 0  # row 1 is itself padded by the client after position 6
    want = jax.jit(_predict)(params, tokens, mask)
    atol, rtol = tolerance("float32")
    with BridgeProcess(repo, "--engine", "pjrt") as server, \
            InferenceClient(server.address) as client:
        got = client.infer(NAME, {"tokens": tokens, "attention_mask": mask}).outputs
        assert got["per_token"].shape == (2, 10, seq.WIDTH)  # sliced back from the bucket's 16
        for key in ("pooled", "per_token"):
            np.testing.assert_allclose(got[key], np.asarray(want[key]), rtol=rtol, atol=atol,
                                       err_msg=key)

        meta = client.model_metadata(NAME)
        assert {t.name: t.shape for t in meta.inputs} == {"tokens": (-1, -1),
                                                          "attention_mask": (-1, -1)}
        config = client.model_config(NAME)
        assert _parameters(config) == {"dims": DIMS, "buckets": BUCKETS,
                                       "padding": "T=attention_mask"}
        rest = _rest_config(server)["parameters"]
        assert {k: rest[k]["string_value"] for k in ("dims", "buckets", "padding")} == {
            "dims": DIMS, "buckets": BUCKETS, "padding": "T=attention_mask"}

        # What the config says is what the server does: a size beyond the largest bucket is
        # refused naming the same buckets.
        with pytest.raises(InferenceServerError) as info:
            client.infer(NAME, {"tokens": np.zeros((2, 40), np.int32),
                                "attention_mask": np.ones((2, 40), np.int32)})
        assert info.value.status_code == grpc.StatusCode.INVALID_ARGUMENT
        for needle in ["sizes B=2, T=40 have no bucket program",
                       "B=2, T=16; B=2, T=32, T padded up to them"]:
            assert needle in str(info.value), str(info.value)


def test_exported_engine_publishes_the_rules_only(repo: Path) -> None:
    with BridgeProcess(repo, "--engine", "exported") as server, \
            InferenceClient(server.address) as client:
        assert _parameters(client.model_config(NAME)) == {"dims": DIMS}
        rest = _rest_config(server)["parameters"]
        assert rest["dims"]["string_value"] == DIMS
        assert "buckets" not in rest and "padding" not in rest
        assert _parameters(client.model_config("fixed")) == {}
