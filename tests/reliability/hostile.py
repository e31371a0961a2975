"""Hypothesis strategies for hostile ModelInfer requests.

Two families: structured requests (random shapes incl. negative, zero and [2**40], known and
unknown datatypes, byte counts that do and do not match, duplicate names, raw and typed contents
mixed, bogus requested outputs and parameters), each either built from scratch or by mutating a
valid request of the target model; and arbitrary bytes sent as the whole message through a
generic channel (`raw_infer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import numpy as np
from hypothesis import strategies as st
from jaxport.protocol import dtypes
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
MAX_BLOB = 4096  # raw bytes per tensor: big enough to match small shapes, small for speed

HUGE_DIMS = (2**31, 2**32 + 1, 2**40, 2**62, 2**63 - 1)
NASTY_DIMS = (-(2**63), -(2**40), -2, -1, 0, 1, 2, 3)
UNKNOWN_DATATYPES = ("", "BYTES", "FP8", "fp32", "FLOAT32", "INT128", "F32 ", "\x00", "BF16\n")
CONTENT_FIELDS = (
    "bool_contents",
    "int_contents",
    "int64_contents",
    "uint_contents",
    "uint64_contents",
    "fp32_contents",
    "fp64_contents",
    "bytes_contents",
)


@dataclass(frozen=True)
class TensorSpec:
    """One input of the target model, as its metadata states it."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def valid_request(model: str, inputs: list[TensorSpec], seed: int = 0) -> pb.ModelInferRequest:
    """A request the model must accept (raw contents, right sizes)."""
    rng = np.random.default_rng(seed)
    req = pb.ModelInferRequest(model_name=model, id=f"valid-{seed}")
    for spec in inputs:
        row = dtypes.by_datatype(spec.datatype)
        t = req.inputs.add(name=spec.name, datatype=spec.datatype)
        t.shape.extend(spec.shape)
        arr = rng.standard_normal(spec.shape).astype(np.float64)
        if row.numpy_name == "bool":
            arr = arr > 0
        req.raw_input_contents.append(arr.astype(row.numpy).tobytes())
    return req


def _dims() -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from(NASTY_DIMS + HUGE_DIMS), st.integers(-(2**63), 2**63 - 1)
    )


def _shape(real: list[TensorSpec]) -> st.SearchStrategy[list[int]]:
    choices = [st.lists(_dims(), max_size=6)]
    if real:
        choices.append(st.sampled_from([list(s.shape) for s in real]))
    return st.one_of(*choices)


def _datatype() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(dtypes.supported_datatypes()),
        st.sampled_from(UNKNOWN_DATATYPES),
        st.text(max_size=12),
    )


def _name(real: list[TensorSpec]) -> st.SearchStrategy[str]:
    names = [s.name for s in real] or ["x"]
    return st.one_of(st.sampled_from(names), st.text(max_size=16))


def _typed(data: st.DataObject, contents: pb.InferTensorContents) -> None:
    for field in data.draw(st.lists(st.sampled_from(CONTENT_FIELDS), max_size=2, unique=True)):
        n = data.draw(st.integers(0, 64))
        values: list = {
            "bool_contents": [True] * n,
            "int_contents": data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n,
                                               max_size=n)),
            "int64_contents": [2**62] * n,
            "uint_contents": [2**32 - 1] * n,
            "uint64_contents": [2**64 - 1] * n,
            "fp32_contents": [float("nan")] * n,
            "fp64_contents": [1e308] * n,
            "bytes_contents": [b"\xff" * 3] * n,
        }[field]
        getattr(contents, field).extend(values)


def _blob(data: st.DataObject, shape: list[int], datatype: str) -> bytes:
    """Random bytes, sometimes exactly prod(shape) x itemsize when that is small."""
    exact = None
    try:
        count = int(np.prod([d for d in shape], dtype=object)) if shape else 1
        size = count * dtypes.by_datatype(datatype).itemsize
        if 0 <= size <= MAX_BLOB:
            exact = size
    except (dtypes.UnsupportedDtypeError, OverflowError, TypeError):
        pass
    lengths = [st.integers(0, MAX_BLOB)]
    if exact is not None:
        lengths.append(st.sampled_from([exact, exact, max(0, exact - 1), exact + 1]))
    n = data.draw(st.one_of(*lengths))
    return data.draw(st.binary(min_size=n, max_size=n)) if n <= 64 else b"\x7f" * n


@st.composite
def hostile_requests(
    draw: st.DrawFn, model: str, real: list[TensorSpec]
) -> pb.ModelInferRequest:
    """A structured request that is invalid in some way (or, rarely, valid by accident)."""
    data = draw(st.data())
    base_valid = draw(st.booleans())
    if base_valid:
        req = valid_request(model, real, seed=draw(st.integers(0, 2**16)))
    else:
        req = pb.ModelInferRequest(
            model_name=draw(st.one_of(st.just(model), st.text(max_size=20))),
            model_version=draw(st.sampled_from(["", "1", "0", "-1", "999", "latest", "../1"])),
        )
    req.id = draw(st.text(max_size=40))
    for _ in range(draw(st.integers(0, 2 if base_valid else 4))):
        t = req.inputs.add(name=draw(_name(real)), datatype=draw(_datatype()))
        t.shape.extend(draw(_shape(real)))
        mode = draw(st.sampled_from(["raw", "typed", "both", "none"]))
        if mode in ("typed", "both"):
            _typed(data, t.contents)
        if mode in ("raw", "both"):
            req.raw_input_contents.append(_blob(data, list(t.shape), t.datatype))
    if base_valid and draw(st.booleans()) and req.inputs:
        # Mutate one field of one of the otherwise-valid inputs.
        victim = req.inputs[draw(st.integers(0, len(req.inputs) - 1))]
        what = draw(st.sampled_from(["shape", "datatype", "name", "drop_raw", "extra_raw"]))
        if what == "shape":
            del victim.shape[:]
            victim.shape.extend(draw(_shape(real)))
        elif what == "datatype":
            victim.datatype = draw(_datatype())
        elif what == "name":
            victim.name = draw(_name(real))
        elif what == "drop_raw" and req.raw_input_contents:
            del req.raw_input_contents[-1]
        else:
            req.raw_input_contents.append(draw(st.binary(max_size=32)))
    out_names = st.one_of(st.sampled_from(["y", "y", ""]), st.text(max_size=8))
    for name in draw(st.lists(out_names, max_size=3)):
        req.outputs.add(name=name)
    for key in draw(st.lists(st.text(max_size=8), max_size=2)):
        req.parameters[key].int64_param = draw(st.integers(-(2**63), 2**63 - 1))
    return req


def raw_messages() -> st.SearchStrategy[bytes]:
    """Arbitrary bytes as the whole ModelInfer message (usually not even valid protobuf)."""
    return st.one_of(
        st.binary(max_size=512),
        # Valid field tags followed by absurd varint lengths and truncations.
        st.builds(
            lambda tag, tail: bytes([tag]) + tail,
            st.sampled_from([0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A]),
            st.binary(max_size=64),
        ),
        st.just(b"\x2a\xff\xff\xff\xff\x0f"),  # inputs, length 2**32-1, no payload
        st.just(b"\x3a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"),  # 10-byte varint overflow
    )


def raw_infer(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable:
    """ModelInfer with no serializers: send any bytes, receive the response bytes."""
    return channel.unary_unary(INFER_METHOD, request_serializer=None, response_deserializer=None)
