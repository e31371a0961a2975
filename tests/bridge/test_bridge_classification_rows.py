"""Per-row classification (issue 28 item 2): which outputs have rows
(`jaxport.artifact.dims.row_outputs`, the one rule; Go's `classRows` in
bridge/front/infer_request.go) and the top-k strings that follow. The Go test
`TestClassRowsAgreeWithPython` (bridge/front/infer_request_rows_test.go) builds the same
manifests and expects the same strings, so the workers and the native engine answer alike."""

from __future__ import annotations

import numpy as np
import pytest
from jaxport.artifact import dims
from jaxport.artifact.gen import manifest_pb2
from jaxport.bridge import messages

SCORES = np.array([[0.5, 2.25, -1.0, 3.0, 0.125], [7.0, 6.0, 5.0, 4.0, 3.0]], np.float32)
LABELS = ["cat", "dog", "", "fish", "owl"]
PER_ROW = [[b"3.000000:3:fish", b"2.250000:1:dog", b"0.500000:0:cat"],
           [b"7.000000:0:cat", b"6.000000:1:dog", b"5.000000:2"]]
WHOLE = [b"7.000000:5", b"6.000000:6", b"5.000000:7"]  # rows mixed: no label past index 4


def _spec(name: str, shape: list[int], dim_names: list[str] = ()) -> manifest_pb2.TensorSpec:
    return manifest_pb2.TensorSpec(name=name, shape=shape, dim_names=dim_names)


def _manifest(case: str) -> manifest_pb2.Manifest:
    m = manifest_pb2.Manifest()
    if case == "batch-sizes":
        m.inputs.append(_spec("x", [-1, 5]))
        m.outputs.append(_spec("logits", [-1, 5]))
        m.batching.batch_sizes.extend([1, 4])
        m.batching.batched_inputs.append("x")
        m.batching.batched_outputs.append("logits")
    elif case == "dim-B":
        m.dimensions.add(name="B", min=1, max=8)
        m.inputs.append(_spec("x", [-1, 5], ["B", ""]))
        m.outputs.append(_spec("logits", [-1, 5], ["B", ""]))
    elif case == "dim-T-not-first":
        m.dimensions.add(name="T", min=1, max=8)
        m.inputs.append(_spec("x", [2, -1], ["", "T"]))
        m.outputs.append(_spec("logits", [2, 5]))
    elif case == "dim-B-not-on-every-output":
        m.dimensions.add(name="B", min=1, max=8)
        m.inputs.append(_spec("x", [-1, 5], ["B", ""]))
        m.outputs.extend([_spec("logits", [-1, 5], ["B", ""]), _spec("bias", [2, 5])])
    elif case == "fixed":
        m.inputs.append(_spec("x", [2, 5]))
        m.outputs.append(_spec("logits", [2, 5]))
    return m


@pytest.mark.parametrize("case, rows", [
    ("batch-sizes", {"logits"}),
    ("dim-B", {"logits"}),
    ("dim-T-not-first", set()),
    ("dim-B-not-on-every-output", set()),
    ("fixed", set()),
])
def test_row_outputs_and_their_top_k(case: str, rows: set[str]) -> None:
    m = _manifest(case)
    assert dims.row_outputs(m) == rows
    got = messages.topk_classification(SCORES, 3, "logits" in rows, LABELS)
    assert got.tolist() == (PER_ROW if rows else WHOLE)


def test_batch_dimension_names_the_axis() -> None:
    assert dims.batch_dimension(_manifest("dim-B")) == "B"
    assert dims.batch_dimension(_manifest("dim-T-not-first")) is None
    assert dims.batch_dimension(_manifest("batch-sizes")) is None  # batching, no symbolic dim
