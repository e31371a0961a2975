"""The client's codecs (`jaxport.protocol.codecs`): request tensors from numpy, numpy from
response tensors, parameters, protocol rules at the boundary. The server's half is the Go
front's (bridge/front/request, unit-tested there); round trips through a real server are in
tests/bridge/ and tests/client/."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.tensors import RAW_ONLY, assert_same, invalid, sample

# --- requests -----------------------------------------------------------------------------


@pytest.mark.parametrize("datatype", RAW_ONLY)
def test_fp16_bf16_cannot_be_sent_typed(datatype: str) -> None:
    msg = invalid(codecs.build_infer_request, "m", {"h": sample(datatype)}, raw=False)
    assert "'h'" in msg and datatype in msg and "raw" in msg


def test_unsupported_numpy_dtype_names_the_input() -> None:
    msg = invalid(codecs.build_infer_request, "m", {"c": np.zeros(2, np.complex64)})
    assert "'c'" in msg and "complex64" in msg


# --- byte order, zero copy -------------------------------------------------------------------


def test_raw_bytes_are_little_endian() -> None:
    one = b"\x00\x00\x80\x3f"  # float32 1.0, little-endian
    big = np.array([1.0, 2.0], dtype=">f4")
    request = codecs.build_infer_request("m", {"x": big})
    assert request.raw_input_contents[0] == np.array([1.0, 2.0], "<f4").tobytes()
    assert request.raw_input_contents[0][:4] == one
    int64 = codecs.build_infer_request("m", {"i": np.array([1], ">i8")})
    assert int64.raw_input_contents[0] == b"\x01" + b"\x00" * 7


def test_raw_decode_is_a_zero_copy_view() -> None:
    data = np.arange(1024, dtype="<f4").tobytes()
    array = codecs.decode_tensor("input", "x", "FP32", [32, 32], raw=data, contents=None)
    assert np.shares_memory(array, np.frombuffer(data, dtype=np.uint8))
    assert not array.flags.writeable


# --- responses ------------------------------------------------------------------------------


def test_response_raw_count_mismatch() -> None:
    response = pb.ModelInferResponse(model_name="m")
    response.outputs.add(name="y", datatype="FP32", shape=[2])
    response.raw_output_contents.extend([bytes(8), b""])
    msg = invalid(codecs.decode_infer_response, response)
    assert "raw_output_contents has 2 entries" in msg


def test_typed_response_is_decoded() -> None:
    """Servers other than ours may answer with typed contents."""
    response = pb.ModelInferResponse(model_name="m")
    out = response.outputs.add(name="y", datatype="FP64", shape=[2])
    out.contents.fp64_contents.extend([1.5, -2.5])
    assert_same(codecs.decode_infer_response(response)["y"], np.array([1.5, -2.5]))


# --- parameters -----------------------------------------------------------------------------


def test_parameters_round_trip() -> None:
    values = {"b": True, "i": -3, "u": 2**63 + 1, "f": 0.25, "s": "x"}
    request = codecs.build_infer_request("m", {}, parameters=values)
    assert request.parameters["b"].WhichOneof("parameter_choice") == "bool_param"
    assert request.parameters["u"].WhichOneof("parameter_choice") == "uint64_param"
    assert codecs.from_parameters(request.parameters) == values
    assert "'bad'" in invalid(codecs.build_infer_request, "m", {}, parameters={"bad": [1]})
    assert "'big'" in invalid(codecs.build_infer_request, "m", {}, parameters={"big": 2**64})
    low = {"low": -(2**63) - 1}
    assert "int64" in invalid(codecs.build_infer_request, "m", {}, parameters=low)
