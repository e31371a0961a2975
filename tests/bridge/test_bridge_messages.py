"""The server's side of the protocol messages (`jaxport.bridge.messages`): requests into
arrays with every protocol rule enforced at the boundary, arrays into raw responses, Triton's
classification extension, and the round trips through the client's half
(`jaxport.protocol.codecs`, tested alone in tests/protocol/test_protocol_codecs.py) and
tritonclient's."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jaxport.bridge import messages
from jaxport.protocol import codecs, dtypes
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.tensors import ALL, RAW_ONLY, TYPED, assert_same, invalid, sample


def raw_request(*tensors: tuple[str, str, list[int], bytes]) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="m")
    for name, datatype, shape, data in tensors:
        req.inputs.add(name=name, datatype=datatype, shape=shape)
        req.raw_input_contents.append(data)
    return req


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", ALL)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4), (5,)])
def test_raw_round_trip_every_datatype(datatype: str, shape: tuple[int, ...]) -> None:
    array = sample(datatype, shape)
    request = codecs.build_infer_request("m", {"x": array}, request_id="r1")
    assert request.inputs[0].datatype == datatype
    assert list(request.inputs[0].shape) == list(shape)
    assert len(request.raw_input_contents[0]) == array.size * dtypes.by_datatype(datatype).itemsize
    assert not request.inputs[0].HasField("contents")
    assert_same(messages.decode_request_inputs(request)["x"], array)


@pytest.mark.parametrize("datatype", TYPED)
def test_typed_round_trip(datatype: str) -> None:
    array = sample(datatype)
    request = codecs.build_infer_request("m", {"x": array}, raw=False)
    assert not request.raw_input_contents
    row = dtypes.by_datatype(datatype)
    assert [f.name for f, _ in request.inputs[0].contents.ListFields()] == [row.contents_field]
    assert_same(messages.decode_request_inputs(request)["x"], array)


@pytest.mark.parametrize("datatype", ALL)
def test_response_round_trip_is_always_raw(datatype: str) -> None:
    outputs = {"y": sample(datatype, (3, 2)), "z": sample(datatype, (), seed=1)}
    response = messages.encode_infer_response(
        outputs, model_name="m", model_version="2", request_id="abc", parameters={"k": 1}
    )
    assert (response.model_name, response.model_version, response.id) == ("m", "2", "abc")
    assert [o.name for o in response.outputs] == ["y", "z"]
    assert all(not o.HasField("contents") for o in response.outputs)
    assert len(response.raw_output_contents) == 2
    assert [list(o.shape) for o in response.outputs] == [[3, 2], []]
    assert codecs.from_parameters(response.parameters) == {"k": 1}
    decoded = codecs.decode_infer_response(response)
    for name, array in outputs.items():
        assert_same(decoded[name], array)


# No clock: neither a per-example deadline nor the "generation too slow" health check (a
# loaded machine trips both; neither is what this test is about).
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datatype=st.sampled_from(ALL),
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple),
    seed=st.integers(0, 2**32 - 1),
    raw=st.booleans(),
)
def test_round_trip_property(datatype: str, shape: tuple[int, ...], seed: int, raw: bool) -> None:
    array = sample(datatype, shape, seed)
    raw = raw or datatype in RAW_ONLY
    strided = array[..., ::-1] if array.ndim else array
    request = codecs.build_infer_request("m", {"a": array, "b": strided}, raw=raw)
    decoded = messages.decode_request_inputs(request)
    assert_same(decoded["a"], array)
    assert_same(decoded["b"], np.array(strided, order="C"))


# --- byte order, zero copy, BF16 width --------------------------------------------------------


def test_raw_request_bytes_are_read_little_endian() -> None:
    one = b"\x00\x00\x80\x3f"  # float32 1.0, little-endian
    got = messages.decode_request_inputs(raw_request(("x", "FP32", [1], one)))["x"]
    assert got.tolist() == [1.0]


def test_bf16_is_two_bytes_per_element() -> None:
    array = np.array([1.0, -2.0, 0.5], dtype=ml_dtypes.bfloat16)
    request = codecs.build_infer_request("m", {"h": array})
    assert request.inputs[0].datatype == "BF16"
    assert request.raw_input_contents[0] == b"\x80\x3f\x00\xc0\x00\x3f"
    assert_same(messages.decode_request_inputs(request)["h"], array)


def test_non_contiguous_input_is_sent_in_c_order() -> None:
    array = np.arange(12, dtype=np.int32).reshape(3, 4).T
    request = codecs.build_infer_request("m", {"x": array})
    assert_same(messages.decode_request_inputs(request)["x"], np.ascontiguousarray(array))


def test_order_of_inputs_is_kept() -> None:
    request = codecs.build_infer_request("m", {"b": np.ones(1), "a": np.zeros(1)})
    assert list(messages.decode_request_inputs(request)) == ["b", "a"]


# --- protocol errors --------------------------------------------------------------------------


def test_byte_count_mismatch_names_input_and_sizes() -> None:
    msg = invalid(
        messages.decode_request_inputs, raw_request(("x", "FP32", [2, 3], b"\x00" * 20))
    )
    assert "'x'" in msg and "20 bytes" in msg and "expected 24" in msg and "[2, 3]" in msg


def test_huge_declared_shape_is_rejected_before_any_allocation() -> None:
    request = raw_request(("x", "FP64", [2**40, 2**20], b"\x00" * 8))
    tracemalloc.start()
    msg = invalid(messages.decode_request_inputs, request)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # The proof is memory, not a clock: nothing of the declared 8 EiB was allocated.
    assert "'x'" in msg and str(2**60 * 8) in msg
    assert peak < 1 << 20, f"allocated {peak} bytes for a rejected request"


def test_huge_declared_shape_with_typed_contents_is_rejected() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="x", datatype="FP32", shape=[2**40])
    t.contents.fp32_contents.extend([1.0, 2.0])
    msg = invalid(messages.decode_request_inputs, request)
    assert "'x'" in msg and "holds 2 elements" in msg and str(2**40) in msg


@pytest.mark.parametrize("rank", [codecs.MAX_RANK + 1, 70, 10_000])
def test_too_many_dimensions_are_rejected(rank: int) -> None:
    """Beyond numpy's limit reshape would raise a bare ValueError (an INTERNAL on the wire)."""
    msg = invalid(messages.decode_request_inputs, raw_request(("x", "FP32", [1] * rank, b"\0" * 4)))
    assert "'x'" in msg and f"{rank} dimensions" in msg and f"at most {codecs.MAX_RANK}" in msg
    assert len(msg) < 200


def test_max_rank_is_accepted() -> None:
    shape = [1] * codecs.MAX_RANK
    got = messages.decode_request_inputs(raw_request(("x", "FP32", shape, b"\0" * 4)))["x"]
    assert got.shape == tuple(shape)


def test_long_caller_strings_are_cut_in_messages() -> None:
    """Status details travel in gRPC trailers (size-limited): never echo megabytes back."""
    name = "n" * 100_000
    msg = invalid(messages.decode_request_inputs, raw_request((name, "FP32", [3], b"\0" * 4)))
    assert "'nnnn" in msg and "...'" in msg and len(msg) < 300
    msg = invalid(messages.decode_request_inputs, raw_request(("x", "Q" * 100_000, [1], b"")))
    assert "'x'" in msg and len(msg) < 400
    dup = raw_request((name, "FP32", [1], b"\0" * 4), (name, "FP32", [1], b"\0" * 4))
    assert len(invalid(messages.decode_request_inputs, dup)) < 200


def test_negative_dimension_is_rejected() -> None:
    msg = invalid(messages.decode_request_inputs, raw_request(("x", "FP32", [-1, 4], b"")))
    assert "'x'" in msg and "dimension 0" in msg and "-1" in msg


@pytest.mark.parametrize("datatype", ["BYTES", "FP8", "fp32", ""])
def test_unknown_datatype_is_rejected(datatype: str) -> None:
    msg = invalid(messages.decode_request_inputs, raw_request(("x", datatype, [1], b"\x00" * 4)))
    assert "'x'" in msg and repr(datatype) in msg and "FP32" in msg


def test_raw_entry_count_must_match_inputs() -> None:
    request = raw_request(("x", "FP32", [1], b"\x00" * 4))
    request.inputs.add(name="y", datatype="FP32", shape=[1])
    msg = invalid(messages.decode_request_inputs, request)
    assert "raw_input_contents has 1 entries" in msg and "expected 2" in msg


def test_raw_and_typed_cannot_be_mixed() -> None:
    request = raw_request(("x", "FP32", [1], b"\x00" * 4))
    y = request.inputs.add(name="y", datatype="FP32", shape=[1])
    y.contents.fp32_contents.append(1.0)
    request.raw_input_contents.append(b"\x00" * 4)
    msg = invalid(messages.decode_request_inputs, request)
    assert "'y'" in msg and "both" in msg


def test_duplicate_input_names_are_rejected() -> None:
    request = raw_request(("x", "FP32", [1], b"\x00" * 4), ("x", "FP32", [1], b"\x00" * 4))
    msg = invalid(messages.decode_request_inputs, request)
    assert "duplicate input 'x'" in msg


def test_empty_input_name_is_rejected() -> None:
    msg = invalid(messages.decode_request_inputs, raw_request(("", "FP32", [1], b"\x00" * 4)))
    assert "empty name" in msg


def test_typed_element_count_must_match_shape() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="x", datatype="INT64", shape=[2, 2])
    t.contents.int64_contents.extend([1, 2, 3])
    msg = invalid(messages.decode_request_inputs, request)
    assert "'x'" in msg and "int64_contents holds 3" in msg and "expected 4" in msg


def test_typed_contents_must_use_the_datatypes_field() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="x", datatype="INT64", shape=[1])
    t.contents.fp32_contents.append(1.0)
    msg = invalid(messages.decode_request_inputs, request)
    assert "'x'" in msg and "contents.int64_contents" in msg and "contents.fp32_contents" in msg


def test_typed_narrow_integers_must_be_in_range() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="q", datatype="INT8", shape=[2])
    t.contents.int_contents.extend([5, 300])
    msg = invalid(messages.decode_request_inputs, request)
    assert "'q'" in msg and "[-128, 127]" in msg and "300" in msg
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="u", datatype="UINT8", shape=[1])
    t.contents.uint_contents.append(256)
    assert "'u'" in invalid(messages.decode_request_inputs, request)


def test_input_without_data_is_rejected() -> None:
    request = pb.ModelInferRequest()
    request.inputs.add(name="x", datatype="FP32", shape=[3])
    msg = invalid(messages.decode_request_inputs, request)
    assert "'x'" in msg and "no data" in msg and "3 elements" in msg


def test_typed_fp16_is_rejected_on_decode() -> None:
    request = pb.ModelInferRequest()
    t = request.inputs.add(name="h", datatype="FP16", shape=[1])
    t.contents.fp32_contents.append(1.0)
    msg = invalid(messages.decode_request_inputs, request)
    assert "'h'" in msg and "FP16" in msg and "raw" in msg


def test_bool_raw_any_nonzero_byte_is_true_as_typed() -> None:
    """Triton's reading (C++ bool: nonzero = true; perf_analyzer's random data sends any
    byte): normalised to 0/1 bytes before anything computes on them, equal to the typed path."""
    raw = messages.decode_request_inputs(
        raw_request(("b", "BOOL", [2, 3], b"\x00\x01\x02\x7f\x80\xff")))["b"]
    typed_request = pb.ModelInferRequest()
    t = typed_request.inputs.add(name="b", datatype="BOOL", shape=[2, 3])
    t.contents.bool_contents.extend([False, True, True, True, True, True])
    typed = messages.decode_request_inputs(typed_request)["b"]
    assert raw.dtype == typed.dtype == np.bool_ and raw.shape == typed.shape == (2, 3)
    np.testing.assert_array_equal(raw, typed)
    assert raw.view(np.uint8).tolist() == [[0, 1, 1], [1, 1, 1]]  # the bytes XLA will see


def test_bool_raw_zero_one_stays_a_view() -> None:
    data = b"\x00\x01\x01"
    request = raw_request(("b", "BOOL", [3], data))
    b = messages.decode_request_inputs(request)["b"]
    assert b.tolist() == [False, True, True] and not b.flags.owndata  # no copy when 0/1


# --- requested outputs --------------------------------------------------------------------


def test_requested_output_names() -> None:
    assert messages.requested_output_names(pb.ModelInferRequest()) is None
    request = codecs.build_infer_request("m", {}, outputs=["b", "a"])
    assert messages.requested_output_names(request) == ["b", "a"]
    request.outputs.add(name="a")
    assert "duplicate requested output 'a'" in invalid(messages.requested_output_names, request)


# --- interop with tritonclient's own encoder/decoder (in a subprocess: see README) -------------


_TRITON = r"""
import base64, json, sys
import numpy as np
import ml_dtypes
from tritonclient.grpc import InferInput, InferResult, service_pb2
from tritonclient.grpc._utils import _get_inference_request
mode = sys.argv[1]
if mode == "encode":
    arrays = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i": np.array([-(2**62), 7], dtype=np.int64),
        "b": np.array([True, False, True]),
        "h": np.array([1.5, -3.0], dtype=np.float16),
    }
    inputs = []
    for name, a in arrays.items():
        dt = {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "float16": "FP16"}[a.dtype.name]
        x = InferInput(name, list(a.shape), dt)
        x.set_data_from_numpy(a)
        inputs.append(x)
    bf = InferInput("bf", [2], "BF16")
    bf.set_data_from_numpy(np.array([1.0, -2.0], dtype=np.float32))
    inputs.append(bf)
    req = _get_inference_request("m", inputs, "", "id1", None, 0, False, False, 0, None, None)
    print(base64.b64encode(req.SerializeToString()).decode())
else:
    resp = service_pb2.ModelInferResponse()
    resp.ParseFromString(base64.b64decode(sys.stdin.read()))
    result = InferResult(resp)
    out = {}
    for o in resp.outputs:
        a = result.as_numpy(o.name)
        out[o.name] = [o.datatype, list(a.shape), np.asarray(a, dtype=np.float64).ravel().tolist()]
    print(json.dumps(out))
"""


def _triton(mode: str, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-c", _TRITON, mode],
        input=stdin, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_decodes_what_tritonclient_encodes() -> None:
    request = pb.ModelInferRequest()
    request.ParseFromString(base64.b64decode(_triton("encode")))
    got = messages.decode_request_inputs(request)
    assert request.id == "id1"
    assert_same(got["f"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert_same(got["i"], np.array([-(2**62), 7], dtype=np.int64))
    assert_same(got["b"], np.array([True, False, True]))
    assert_same(got["h"], np.array([1.5, -3.0], dtype=np.float16))
    assert_same(got["bf"], np.array([1.0, -2.0], dtype=ml_dtypes.bfloat16))


def test_tritonclient_decodes_what_we_encode() -> None:
    outputs = {
        "f": np.arange(6, dtype=np.float32).reshape(3, 2),
        "i": np.array([5, -6], dtype=np.int64),
        "b": np.array([[True], [False]]),
        "d": np.array(2.5),
        "bf": np.array([0.5, 3.0], dtype=ml_dtypes.bfloat16),
    }
    response = messages.encode_infer_response(outputs, model_name="m")
    seen = json.loads(_triton("decode", base64.b64encode(response.SerializeToString()).decode()))
    for name, array in outputs.items():
        datatype, shape, values = seen[name]
        assert datatype == dtypes.by_numpy(array.dtype).datatype
        assert shape == list(array.shape)
        assert values == array.astype(np.float64).ravel().tolist()


# --- BYTES and classification (Triton's classification extension) -------------------------


def test_topk_classification_formats_like_triton() -> None:
    """`std::to_string(value) + ":" + std::to_string(index)`: %f for floating point, the
    integer for integer types; descending, ties by lower index; per batch row when batched."""
    logits = np.array([[0.5, 2.25, -1.0, 3.0], [1.5, -0.5, 1.5, 0.0]], np.float32)
    got = messages.topk_classification(logits, 3, batched=True)
    assert got.shape == (2, 3) and got.dtype == object
    assert got.tolist() == [[b"3.000000:3", b"2.250000:1", b"0.500000:0"],
                            [b"1.500000:0", b"1.500000:2", b"0.000000:3"]]
    flat = messages.topk_classification(logits, 2, batched=False)  # over the whole tensor
    assert flat.tolist() == [b"3.000000:3", b"2.250000:1"]
    ints = messages.topk_classification(np.array([[5, -7, 2**40]], np.int64), 9, batched=True)
    assert ints.tolist() == [[b"1099511627776:2", b"5:0", b"-7:1"]]  # k capped at 3 classes
    tiny = messages.topk_classification(np.array([1e-7, 123456.789], np.float64), 2, False)
    assert tiny.tolist() == [b"123456.789000:1", b"0.000000:0"]


def test_bytes_output_raw_and_typed_decode_alike() -> None:
    entries = messages.topk_classification(np.array([[1.0, 2.0]], np.float32), 2, batched=True)
    response = messages.encode_infer_response({"c": entries}, model_name="m")
    assert response.outputs[0].datatype == "BYTES" and list(response.outputs[0].shape) == [1, 2]
    assert response.raw_output_contents[0] == (
        b"\x0a\x00\x00\x002.000000:1" b"\x0a\x00\x00\x001.000000:0")
    raw = codecs.decode_infer_response(response)["c"]
    typed_response = pb.ModelInferResponse()
    t = typed_response.outputs.add(name="c", datatype="BYTES", shape=[1, 2])
    t.contents.bytes_contents.extend([b"2.000000:1", b"1.000000:0"])
    typed = codecs.decode_infer_response(typed_response)["c"]
    assert raw.tolist() == typed.tolist() == [[b"2.000000:1", b"1.000000:0"]]
    response.raw_output_contents[0] += b"\x00"
    assert "BYTES" in invalid(codecs.decode_infer_response, response)


def test_requested_classifications() -> None:
    request = pb.ModelInferRequest()
    request.outputs.add(name="a").parameters["classification"].int64_param = 3
    request.outputs.add(name="b")
    assert messages.requested_classifications(request) == {"a": 3}
    request.outputs[1].parameters["classification"].int64_param = 0
    assert ">= 1" in invalid(messages.requested_classifications, request)
    request.outputs[1].parameters["classification"].string_param = "3"
    assert "int64" in invalid(messages.requested_classifications, request)
    request.outputs[1].parameters["classification"].int64_param = 1
    request.outputs[1].parameters["shared_memory_region"].string_param = "r"
    assert "shared memory" in invalid(messages.requested_classifications, request)
    assert "BOOL" in invalid(messages.check_classifiable, "m", "BOOL")
