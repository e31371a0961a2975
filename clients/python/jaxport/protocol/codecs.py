"""Pure conversions between Open Inference Protocol messages and numpy arrays.

No I/O, no grpc: the bridge's servicer and the Python client both call these, and they are
unit-tested without a server. Protocol rules are enforced here, at the boundary, with
`InvalidArgumentError`s that name the tensor and say expected vs got:

- a tensor's datatype is one of `dtypes.DTYPES`; it has at most MAX_RANK dimensions, each
  an integer >= 0;
- tensor names are unique;
- raw contents: exactly one `raw_*_contents` entry per tensor, no tensor also carrying typed
  `contents`, and each entry holds exactly prod(shape) x itemsize bytes. The byte count is
  checked with Python integers BEFORE anything is allocated from the declared shape, so a
  shape like [2**40] costs nothing; the array is then a zero-copy `np.frombuffer` view of
  the bytes protobuf hands out (the one copy is protobuf's own, made when the field is read);
- typed contents: only the `InferTensorContents` field of the datatype, holding exactly
  prod(shape) elements, in range for narrow integer types; FP16/BF16 are raw-only.

Raw bytes are little-endian, row-major (`<` dtypes from the table). Server responses are
always raw (`raw_output_contents`): tritonclient reads nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from jaxport.protocol import dtypes
from jaxport.protocol.errors import InvalidArgumentError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

__all__ = [
    "MAX_RANK",
    "ParameterValue",
    "build_infer_request",
    "decode_infer_response",
    "decode_request_inputs",
    "decode_tensor",
    "encode_infer_response",
    "encode_input",
    "from_parameters",
    "requested_output_names",
    "to_parameters",
    "to_wire_bytes",
]

ParameterValue = bool | int | float | str
# Most dimensions a tensor may have (numpy 1.x's limit; numpy 2 allows 64). Checked first, so
# a hostile shape can neither crash numpy nor bloat an error message.
MAX_RANK = 32
# Caller-supplied strings (names, datatypes) are cut to this many characters in error
# messages: gRPC status details travel in trailers, which have a size limit.
_MAX_SHOWN = 64


def _show(text: str) -> str:
    """A caller-supplied string as echoed in an error message (at most _MAX_SHOWN chars)."""
    return text if len(text) <= _MAX_SHOWN else f"{text[: _MAX_SHOWN - 3]}..."
_CONTENTS_FIELDS = tuple(f.name for f in pb.InferTensorContents.DESCRIPTOR.fields)


# --- shared checks -------------------------------------------------------------------------


def _row(kind: str, name: str, datatype: str) -> dtypes.DType:
    try:
        return dtypes.by_datatype(datatype)
    except dtypes.UnsupportedDtypeError:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': unsupported datatype {_show(datatype)!r}; expected one of "
            f"{', '.join(dtypes.supported_datatypes())}"
        ) from None


def _element_count(kind: str, name: str, shape: Sequence[int]) -> int:
    """prod(shape) as an exact Python int, after rejecting too many or negative dimensions."""
    if len(shape) > MAX_RANK:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': shape has {len(shape)} dimensions; at most {MAX_RANK} "
            "are supported"
        )
    for axis, dim in enumerate(shape):
        if dim < 0:
            raise InvalidArgumentError(
                f"{kind} '{_show(name)}': dimension {axis} of shape {list(shape)} is {dim}; "
                "expected a size >= 0 (variable dimensions are not allowed in a request)"
            )
    return math.prod(shape)


def _check_unique(kind: str, names: Iterable[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            raise InvalidArgumentError(f"{kind} with an empty name; every {kind} needs a name")
        if name in seen:
            raise InvalidArgumentError(
                f"duplicate {kind} '{_show(name)}': each {kind} may appear once"
            )
        seen.add(name)


def _used_contents_fields(contents: pb.InferTensorContents) -> list[str]:
    return [f.name for f, _ in contents.ListFields()]


def _check_bool_bytes(kind: str, name: str, array: np.ndarray) -> None:
    if array.size and array.view(np.uint8).max() > 1:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': BOOL raw bytes must be 0 or 1, got a byte > 1"
        )


def decode_tensor(
    kind: str,
    name: str,
    datatype: str,
    shape: Sequence[int],
    *,
    raw: bytes | None,
    contents: pb.InferTensorContents | None,
) -> np.ndarray:
    """One tensor from raw little-endian bytes (zero-copy view) or typed contents.

    `kind` ("input"/"output") only words the error messages. Exactly one of raw/contents is
    used: raw when not None.
    """
    row = _row(kind, name, datatype)
    count = _element_count(kind, name, shape)
    shape = tuple(shape)
    if raw is not None:
        expected = count * row.itemsize
        if len(raw) != expected:
            raise InvalidArgumentError(
                f"{kind} '{_show(name)}': raw contents hold {len(raw)} bytes; expected {expected} "
                f"(shape {list(shape)} x {row.itemsize} bytes per {datatype} element)"
            )
        array = np.frombuffer(raw, dtype=row.numpy).reshape(shape)
        if datatype == "BOOL":
            _check_bool_bytes(kind, name, array)
        return array
    used = _used_contents_fields(contents) if contents is not None else []
    if row.contents_field is None:
        if count == 0 and not used:
            return np.zeros(shape, dtype=row.numpy)
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': {datatype} has no typed contents field; send it as raw "
            f"bytes (raw_{kind}_contents)"
        )
    if not used and count:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': no data; expected raw_{kind}_contents or "
            f"contents.{row.contents_field} with {count} elements (shape {list(shape)})"
        )
    wrong = [f for f in used if f != row.contents_field]
    if wrong:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': datatype {datatype} uses contents.{row.contents_field}; "
            f"got contents.{', contents.'.join(wrong)}"
        )
    values = getattr(contents, row.contents_field) if contents is not None else ()
    if len(values) != count:
        raise InvalidArgumentError(
            f"{kind} '{_show(name)}': contents.{row.contents_field} holds {len(values)} elements; "
            f"expected {count} (shape {list(shape)})"
        )
    if row.contents_field in ("int_contents", "uint_contents") and row.itemsize < 4 and count:
        wide = np.asarray(values, dtype=np.int64)
        info = np.iinfo(row.numpy)
        low, high = int(wide.min()), int(wide.max())
        if low < info.min or high > info.max:
            raise InvalidArgumentError(
                f"{kind} '{_show(name)}': {datatype} values must lie in "
                f"[{info.min}, {info.max}]; got values in [{low}, {high}]"
            )
        return wide.astype(row.numpy).reshape(shape)
    return np.asarray(values, dtype=row.numpy).reshape(shape)


def to_wire_bytes(array: np.ndarray) -> bytes:
    """Raw protocol bytes of an array: C order, little-endian, one copy."""
    row = dtypes.by_numpy(array.dtype)
    return np.ascontiguousarray(array, dtype=row.numpy).tobytes()


# --- parameters ----------------------------------------------------------------------------


def to_parameters(values: Mapping[str, ParameterValue], target: Any) -> None:
    """Fill a `map<string, InferParameter>` field from plain Python values."""
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if not -(2**63) <= value < 2**64:
                raise InvalidArgumentError(
                    f"parameter '{_show(key)}': {value} does not fit int64 or uint64"
                )
            if value >= 2**63:
                param.uint64_param = value
            else:
                param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        elif isinstance(value, str):
            param.string_param = value
        else:
            raise InvalidArgumentError(
                f"parameter '{_show(key)}': expected bool, int, float or str; "
                f"got {type(value).__name__}"
            )


def from_parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, ParameterValue]:
    """Plain Python values of a `map<string, InferParameter>` field (unset values skipped)."""
    out: dict[str, ParameterValue] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(param, which)
    return out


# --- server side ---------------------------------------------------------------------------


def decode_request_inputs(request: pb.ModelInferRequest) -> dict[str, np.ndarray]:
    """The request's input tensors by name, in request order, all protocol rules enforced."""
    inputs = request.inputs
    _check_unique("input", (t.name for t in inputs))
    raw = request.raw_input_contents
    if raw:
        if len(raw) != len(inputs):
            raise InvalidArgumentError(
                f"raw_input_contents has {len(raw)} entries; expected {len(inputs)} "
                f"(one per input, in the order of `inputs`)"
            )
        for tensor in inputs:
            if _used_contents_fields(tensor.contents):
                raise InvalidArgumentError(
                    f"input '{_show(tensor.name)}': has typed contents but the request uses "
                    "raw_input_contents; send every input one way, not both"
                )
        return {
            t.name: decode_tensor("input", t.name, t.datatype, t.shape, raw=data, contents=None)
            for t, data in zip(inputs, raw, strict=True)
        }
    return {
        t.name: decode_tensor("input", t.name, t.datatype, t.shape, raw=None, contents=t.contents)
        for t in inputs
    }


def requested_output_names(request: pb.ModelInferRequest) -> list[str] | None:
    """Names of the outputs the caller asked for, in order; None when it asked for all."""
    if not request.outputs:
        return None
    names = [o.name for o in request.outputs]
    _check_unique("requested output", names)
    return names


def encode_infer_response(
    outputs: Mapping[str, np.ndarray],
    *,
    model_name: str,
    model_version: str = "",
    request_id: str = "",
    parameters: Mapping[str, ParameterValue] | None = None,
) -> pb.ModelInferResponse:
    """A response carrying every output as raw little-endian bytes, in mapping order."""
    response = pb.ModelInferResponse(
        model_name=model_name, model_version=model_version, id=request_id
    )
    if parameters:
        to_parameters(parameters, response.parameters)
    for name, value in outputs.items():
        array = np.asarray(value)
        row = dtypes.by_numpy(array.dtype)
        response.outputs.add(name=name, datatype=row.datatype, shape=array.shape)
        response.raw_output_contents.append(to_wire_bytes(array))
    return response


# --- client side ---------------------------------------------------------------------------


def encode_input(
    name: str, value: Any, *, raw: bool = True
) -> tuple[pb.ModelInferRequest.InferInputTensor, bytes | None]:
    """One request tensor from an array-like: (tensor, raw bytes) or (tensor with contents, None).

    FP16/BF16 can only be sent raw (the protocol has no typed field for them).
    """
    array = np.asarray(value)
    try:
        row = dtypes.by_numpy(array.dtype)
    except dtypes.UnsupportedDtypeError as exc:
        raise InvalidArgumentError(f"input '{_show(name)}': {exc}") from None
    tensor = pb.ModelInferRequest.InferInputTensor(
        name=name, datatype=row.datatype, shape=array.shape
    )
    if raw:
        return tensor, to_wire_bytes(array)
    if row.contents_field is None:
        raise InvalidArgumentError(
            f"input '{_show(name)}': {row.datatype} has no typed contents field; send it raw "
            "(raw=True)"
        )
    getattr(tensor.contents, row.contents_field).extend(array.ravel().tolist())
    return tensor, None


def build_infer_request(
    model: str,
    inputs: Mapping[str, Any],
    *,
    outputs: Sequence[str] | None = None,
    version: str = "",
    request_id: str = "",
    raw: bool = True,
    parameters: Mapping[str, ParameterValue] | None = None,
) -> pb.ModelInferRequest:
    """A ModelInferRequest from named arrays (raw bytes by default, typed contents if raw=False)."""
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    if parameters:
        to_parameters(parameters, request.parameters)
    for name, value in inputs.items():
        tensor, data = encode_input(name, value, raw=raw)
        request.inputs.append(tensor)
        if data is not None:
            request.raw_input_contents.append(data)
    for name in outputs or ():
        request.outputs.add(name=name)
    return request


def decode_infer_response(response: pb.ModelInferResponse) -> dict[str, np.ndarray]:
    """The response's output tensors by name, in response order (raw or typed contents)."""
    outputs = response.outputs
    _check_unique("output", (t.name for t in outputs))
    raw = response.raw_output_contents
    if raw:
        if len(raw) != len(outputs):
            raise InvalidArgumentError(
                f"raw_output_contents has {len(raw)} entries; expected {len(outputs)} "
                "(one per output)"
            )
        return {
            t.name: decode_tensor("output", t.name, t.datatype, t.shape, raw=data, contents=None)
            for t, data in zip(outputs, raw, strict=True)
        }
    return {
        t.name: decode_tensor("output", t.name, t.datatype, t.shape, raw=None, contents=t.contents)
        for t in outputs
    }
