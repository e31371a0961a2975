"""Classification labels (issue 14): an output exported with a labels file
(`export(labels={...})`, `--labels NAME=FILE`) is classified as Triton's `value:index:label`;
the labels are read once, through the artifact (`Artifact.labels`), when the model is built.
Outputs without a labels file keep `value:index`."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import jaxport.artifact
import numpy as np
import pytest
from jaxport.bridge import messages
from jaxport.bridge.loading import load_model
from jaxport.bridge.model import Model
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess

ROWS = np.array([[0.5, 2.25, -1.0, 3.0, 0.125], [7.0, 6.0, 5.0, 4.0, 3.0]], np.float32)
LABELS = ["cat", "dog", "", "fish", "owl"]  # an empty line: class 2 has no label (Triton too)


def scores(params, x):
    """logits = x (FP32), counts = 10 * x as INT64 (its labels), plain = x (no labels)."""
    return {"logits": x * params["one"], "counts": (x * 10).astype(jnp.int64),
            "plain": x * params["one"]}


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    out = tmp_path_factory.mktemp("labelled")
    (out / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    (out / "count_labels.txt").write_text("c0\nc1\nc2\nc3\nc4\n", encoding="utf-8")
    with jax.enable_x64(True):
        export(scores, {"one": np.float32(1.0)}, {"x": jax.ShapeDtypeStruct((1, 5), np.float32)},
               out / "cls" / "1", batch_sizes=(1, 4), goldens=1, quiet=True,
               labels={"logits": out / "labels.txt", "counts": out / "count_labels.txt"})
    return out / "cls" / "1"


def _with_artifact(path: Path) -> Model:
    """The model as the bridge builds it, given its artifact (the labels' one source)."""
    loaded = load_model("cls", 1, path)
    return Model(loaded.name, loaded.version, loaded.manifest, loaded.inputs, loaded.outputs,
                 loaded.programs, loaded.engine_name, loaded.load_seconds,
                 artifact=jaxport.artifact.open(path))


def test_labels_read_once_from_the_artifact(labelled: Path) -> None:
    model = _with_artifact(labelled)
    assert model.labels == {"logits": tuple(LABELS), "counts": ("c0", "c1", "c2", "c3", "c4")}
    prepared = model.prepare([("x", "FP32", ROWS.shape)], lambda: {"x": ROWS}, None,
                             {"logits": 3, "counts": 2, "plain": 2})
    outputs, _ = model.execute(prepared)
    assert outputs["logits"].tolist() == [
        [b"3.000000:3:fish", b"2.250000:1:dog", b"0.500000:0:cat"],
        [b"7.000000:0:cat", b"6.000000:1:dog", b"5.000000:2"],  # class 2's label is empty
    ]
    assert outputs["counts"].tolist() == [[b"30:3:c3", b"22:1:c1"], [b"70:0:c0", b"60:1:c1"]]
    assert outputs["plain"].tolist() == [[b"3.000000:3", b"2.250000:1"],
                                         [b"7.000000:0", b"6.000000:1"]]


def test_model_without_artifact_has_no_labels(labelled: Path) -> None:
    loaded = load_model("cls", 1, labelled)
    model = Model(loaded.name, loaded.version, loaded.manifest, loaded.inputs, loaded.outputs,
                  loaded.programs, loaded.engine_name, loaded.load_seconds)
    assert model.labels == {}


def test_label_beyond_the_file_is_left_out() -> None:
    """Unbatched, the whole tensor is ranked: an index past the last label gets none (Triton's
    label provider answers no label for it)."""
    got = messages.topk_classification(np.array([[1, 9, 3], [8, 2, 7]], np.int32), 4, False,
                                     ["a", "b", "c"])
    assert got.tolist() == [b"9:1:b", b"8:3", b"7:5", b"3:2:c"]


def test_model_config_names_each_outputs_label_file(labelled: Path) -> None:
    """ModelConfig's label_filename (Triton's) is the labels file of each output that has one;
    '' for an output without labels."""
    with BridgeProcess(labelled.parent.parent, "--workers", "1") as bridge:
        config = pb_grpc.GRPCInferenceServiceStub(bridge.channel()).ModelConfig(
            pb.ModelConfigRequest(name="cls"), timeout=60).config
    assert {o.name: o.label_filename for o in config.output} == {
        "logits": "labels/logits.txt", "counts": "labels/counts.txt", "plain": ""}
