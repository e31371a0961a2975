"""Classification labels (issue 14), live: an output exported with a labels file
(`export(labels={...})`, `--labels NAME=FILE`) is classified as Triton's `value:index:label` by
a real `jaxport serve`; outputs without a labels file keep `value:index`. The formatting rules
(per row or whole tensor, an index past the last label, value formatting per datatype) are the
front's, unit-tested in bridge/front/request (prepare_test.go, rows_test.go)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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


@pytest.fixture(scope="module")
def labelled_bridge(labelled: Path):
    with BridgeProcess(labelled.parent.parent, "--http-port", "-1") as bridge:
        yield bridge


def _classify(bridge: BridgeProcess, counts: dict[str, int]) -> dict[str, list[list[bytes]]]:
    """ModelInfer of ROWS asking `class_count` per output; the BYTES answers as rows of
    entries (each element a 4-byte little-endian length, then its text)."""
    request = pb.ModelInferRequest(model_name="cls")
    request.inputs.add(name="x", datatype="FP32", shape=list(ROWS.shape))
    request.raw_input_contents.append(ROWS.tobytes())
    for name, k in counts.items():
        request.outputs.add(name=name).parameters["classification"].int64_param = k
    response = pb_grpc.GRPCInferenceServiceStub(bridge.channel()).ModelInfer(request, timeout=60)
    out: dict[str, list[list[bytes]]] = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        assert tensor.datatype == "BYTES", tensor
        entries, i = [], 0
        while i < len(raw):
            n = int.from_bytes(raw[i:i + 4], "little")
            entries.append(raw[i + 4:i + 4 + n])
            i += 4 + n
        k = int(tensor.shape[-1])
        out[tensor.name] = [entries[r:r + k] for r in range(0, len(entries), k)]
    return out


def test_labels_come_from_the_artifact(labelled_bridge: BridgeProcess) -> None:
    """Per row (the model has batch sizes): `value:index:label` where the artifact has a
    label, `value:index` for an empty label and for an output without a labels file."""
    got = _classify(labelled_bridge, {"logits": 3, "counts": 2, "plain": 2})
    assert got["logits"] == [
        [b"3.000000:3:fish", b"2.250000:1:dog", b"0.500000:0:cat"],
        [b"7.000000:0:cat", b"6.000000:1:dog", b"5.000000:2"],  # class 2's label is empty
    ]
    assert got["counts"] == [[b"30:3:c3", b"22:1:c1"], [b"70:0:c0", b"60:1:c1"]]
    assert got["plain"] == [[b"3.000000:3", b"2.250000:1"], [b"7.000000:0", b"6.000000:1"]]


def test_model_config_names_each_outputs_label_file(labelled_bridge: BridgeProcess) -> None:
    """ModelConfig's label_filename (Triton's) is the labels file of each output that has one;
    '' for an output without labels."""
    config = pb_grpc.GRPCInferenceServiceStub(labelled_bridge.channel()).ModelConfig(
        pb.ModelConfigRequest(name="cls"), timeout=60).config
    assert {o.name: o.label_filename for o in config.output} == {
        "logits": "labels/logits.txt", "counts": "labels/counts.txt", "plain": ""}
