"""Pure conversions between Open Inference Protocol messages and numpy arrays: the client's
side (a request from arrays, arrays from a response) and the rules both sides share.

No I/O, no grpc: the Python client calls these. The server's side of the protocol (a request
into tensors, tensors into a response, Triton's classification extension) is the Go front's
(bridge/front/request), not Python. The codecs are unit-tested without a server. Protocol
rules are enforced here, at the client's boundary, with `InvalidArgumentError`s that name the
tensor and say expected vs got (the server checks the same rules again on what it receives):

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

Shared memory (Triton's system-shared-memory extension): a tensor whose parameters carry
`shared_memory_region` / `shared_memory_byte_size` [/ `shared_memory_offset`] has its bytes
in a registered region, not in the message. The codecs stay pure: they parse and check those
parameters (`SharedMemoryRef`) and call a caller-supplied `SharedMemoryResolver` that returns
the region's bytes as a memoryview (a client's own mapping); they
never open anything themselves. Such an input has no `raw_input_contents` entry; such an
output gets an empty `raw_output_contents` entry (Triton's layout, which keeps tritonclient's
per-index lookup aligned) and its reference in the output's parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxport.protocol import dtypes
from jaxport.protocol.errors import InvalidArgumentError, clip
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

__all__ = [
    "BYTES",
    "CLASSIFICATION",
    "MAX_RANK",
    "SHM_BYTE_SIZE",
    "SHM_OFFSET",
    "SHM_REGION",
    "ParameterValue",
    "SharedMemoryRef",
    "SharedMemoryResolver",
    "build_infer_request",
    "check_output_fits",
    "check_unique",
    "datatype_row",
    "decode_bytes_elements",
    "decode_infer_response",
    "decode_tensor",
    "element_count",
    "encode_input",
    "from_parameters",
    "no_shared_memory",
    "shared_memory_ref",
    "to_parameters",
    "to_wire_bytes",
    "used_contents_fields",
]

ParameterValue = bool | int | float | str
# Most dimensions a tensor may have (numpy 1.x's limit; numpy 2 allows 64). Checked first, so
# a hostile shape can neither crash numpy nor bloat an error message.
MAX_RANK = 32


_CONTENTS_FIELDS = tuple(f.name for f in pb.InferTensorContents.DESCRIPTOR.fields)


# --- shared checks -------------------------------------------------------------------------


def datatype_row(kind: str, name: str, datatype: str) -> dtypes.DType:
    """The dtype table's row of a tensor's datatype; INVALID_ARGUMENT naming it if unknown."""
    try:
        return dtypes.by_datatype(datatype)
    except dtypes.UnsupportedDtypeError:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': unsupported datatype {clip(datatype)!r}; expected one of "
            f"{', '.join(dtypes.supported_datatypes())}"
        ) from None


def element_count(kind: str, name: str, shape: Sequence[int]) -> int:
    """prod(shape) as an exact Python int, after rejecting too many or negative dimensions."""
    if len(shape) > MAX_RANK:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': shape has {len(shape)} dimensions; at most {MAX_RANK} "
            "are supported"
        )
    for axis, dim in enumerate(shape):
        if dim < 0:
            raise InvalidArgumentError(
                f"{kind} '{clip(name)}': dimension {axis} of shape {list(shape)} is {dim}; "
                "expected a size >= 0 (variable dimensions are not allowed in a request)"
            )
    return math.prod(shape)


def check_unique(kind: str, names: Iterable[str]) -> None:
    """INVALID_ARGUMENT for an empty or a repeated tensor name."""
    seen: set[str] = set()
    for name in names:
        if not name:
            raise InvalidArgumentError(f"{kind} with an empty name; every {kind} needs a name")
        if name in seen:
            raise InvalidArgumentError(
                f"duplicate {kind} '{clip(name)}': each {kind} may appear once"
            )
        seen.add(name)


def used_contents_fields(contents: pb.InferTensorContents) -> list[str]:
    """The typed `contents` fields a tensor sets."""
    return [f.name for f, _ in contents.ListFields()]


def normalise_bool(array: np.ndarray) -> np.ndarray:
    """A BOOL tensor read from raw bytes with every byte 0 or 1: any nonzero byte is true.

    Triton reads a BOOL byte as C++ `bool` does (nonzero = true), and perf_analyzer's random
    data sends any byte; numpy keeps the byte as it came, and XLA would compute on it (a
    `logical_xor` of 2 and 1 is not a boolean). The array itself when it is already 0/1 (one
    scan, zero-copy), else a normalised copy. Typed `bool_contents` are 0/1 by construction,
    so the raw and typed paths agree.
    """
    if array.size and array.view(np.uint8).max() > 1:
        return array.view(np.uint8) != 0
    return array


def decode_tensor(
    kind: str,
    name: str,
    datatype: str,
    shape: Sequence[int],
    *,
    raw: bytes | memoryview | None,
    contents: pb.InferTensorContents | None,
) -> np.ndarray:
    """One tensor from raw little-endian bytes (zero-copy view) or typed contents.

    `kind` ("input"/"output") only words the error messages. Exactly one of raw/contents is
    used: raw when not None.
    """
    row = datatype_row(kind, name, datatype)
    count = element_count(kind, name, shape)
    shape = tuple(shape)
    if raw is not None:
        expected = count * row.itemsize
        if len(raw) != expected:
            raise InvalidArgumentError(
                f"{kind} '{clip(name)}': raw contents hold {len(raw)} bytes; expected {expected} "
                f"(shape {list(shape)} x {row.itemsize} bytes per {datatype} element)"
            )
        array = np.frombuffer(raw, dtype=row.numpy).reshape(shape)
        if datatype == "BOOL":
            array = normalise_bool(array)
        return array
    used = used_contents_fields(contents) if contents is not None else []
    if row.contents_field is None:
        if count == 0 and not used:
            return np.zeros(shape, dtype=row.numpy)
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': {datatype} has no typed contents field; send it as raw "
            f"bytes (raw_{kind}_contents)"
        )
    if not used and count:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': no data; expected raw_{kind}_contents or "
            f"contents.{row.contents_field} with {count} elements (shape {list(shape)})"
        )
    wrong = [f for f in used if f != row.contents_field]
    if wrong:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': datatype {datatype} uses contents.{row.contents_field}; "
            f"got contents.{', contents.'.join(wrong)}"
        )
    values = getattr(contents, row.contents_field) if contents is not None else ()
    if len(values) != count:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': contents.{row.contents_field} holds {len(values)} elements; "
            f"expected {count} (shape {list(shape)})"
        )
    if row.contents_field in ("int_contents", "uint_contents") and row.itemsize < 4 and count:
        wide = np.asarray(values, dtype=np.int64)
        info = np.iinfo(row.numpy)
        low, high = int(wide.min()), int(wide.max())
        if low < info.min or high > info.max:
            raise InvalidArgumentError(
                f"{kind} '{clip(name)}': {datatype} values must lie in "
                f"[{info.min}, {info.max}]; got values in [{low}, {high}]"
            )
        return wide.astype(row.numpy).reshape(shape)
    return np.asarray(values, dtype=row.numpy).reshape(shape)


def to_wire_bytes(array: np.ndarray) -> bytes:
    """Raw protocol bytes of an array: C order, little-endian, one copy."""
    row = dtypes.by_numpy(array.dtype)
    return np.ascontiguousarray(array, dtype=row.numpy).tobytes()


# --- BYTES (what the classification extension answers with) -----------------------------

BYTES = "BYTES"
CLASSIFICATION = "classification"
"""Requested-output parameter (int64) of Triton's classification extension: the top-k count."""


def decode_bytes_elements(kind: str, name: str, raw: bytes | memoryview, count: int
                          ) -> list[bytes]:
    """`count` elements of raw BYTES contents (length-prefixed); INVALID_ARGUMENT naming the
    tensor when the bytes do not hold exactly that many."""
    data = bytes(raw)
    elements = []
    offset = 0
    for _ in range(count):
        if offset + 4 > len(data):
            break
        size = int.from_bytes(data[offset:offset + 4], "little")
        if offset + 4 + size > len(data):
            break
        elements.append(data[offset + 4:offset + 4 + size])
        offset += 4 + size
    if len(elements) != count or offset != len(data):
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': raw BYTES contents of {len(data)} bytes do not hold "
            f"exactly {count} length-prefixed elements"
        )
    return elements


def _bytes_tensor(kind: str, name: str, shape: Sequence[int], raw: bytes | memoryview | None,
                  contents: pb.InferTensorContents | None) -> np.ndarray:
    count = element_count(kind, name, shape)
    if raw is not None:
        elements = decode_bytes_elements(kind, name, raw, count)
    else:
        elements = list(contents.bytes_contents) if contents is not None else []
        if len(elements) != count:
            raise InvalidArgumentError(
                f"{kind} '{clip(name)}': contents.bytes_contents has {len(elements)} elements; "
                f"expected {count} (shape {list(shape)})"
            )
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array.reshape(tuple(shape))


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
                    f"parameter '{clip(key)}': {value} does not fit int64 or uint64"
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
                f"parameter '{clip(key)}': expected bool, int, float or str; "
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


# --- shared memory -------------------------------------------------------------------------

SHM_REGION = "shared_memory_region"
SHM_BYTE_SIZE = "shared_memory_byte_size"
SHM_OFFSET = "shared_memory_offset"


@dataclass(frozen=True)
class SharedMemoryRef:
    """Where a tensor's bytes live: `byte_size` bytes at `offset` within registered `region`."""

    region: str
    byte_size: int
    offset: int = 0

    def parameters(self) -> dict[str, ParameterValue]:
        """The tensor parameters that carry this reference (what tritonclient sends)."""
        params: dict[str, ParameterValue] = {SHM_REGION: self.region,
                                             SHM_BYTE_SIZE: self.byte_size}
        if self.offset:
            params[SHM_OFFSET] = self.offset
        return params


SharedMemoryResolver = Callable[[str, str, SharedMemoryRef], memoryview]
"""`resolve(kind, tensor_name, ref)`: exactly `ref.byte_size` bytes of the region, writable;
raises a ProtocolError naming the tensor and region when it cannot."""


def _size_param(kind: str, name: str, key: str, param: pb.InferParameter) -> int:
    which = param.WhichOneof("parameter_choice")
    if which not in ("int64_param", "uint64_param"):
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': parameter '{key}' must be an int64_param, got "
            f"{which or 'no value'}"
        )
    value = getattr(param, which)
    if value < 0:
        raise InvalidArgumentError(f"{kind} '{clip(name)}': parameter '{key}' is {value}; "
                                   "expected >= 0")
    return int(value)


def shared_memory_ref(
    kind: str, name: str, parameters: Mapping[str, pb.InferParameter]
) -> SharedMemoryRef | None:
    """The tensor's shared-memory reference from its parameters, or None if it has none.

    `shared_memory_region` (string) needs `shared_memory_byte_size` (int64);
    `shared_memory_offset` (int64) is optional; size/offset without a region is an error.
    """
    if SHM_REGION not in parameters:
        stray = [k for k in (SHM_BYTE_SIZE, SHM_OFFSET) if k in parameters]
        if stray:
            raise InvalidArgumentError(
                f"{kind} '{clip(name)}': parameter '{stray[0]}' given without "
                f"'{SHM_REGION}'; name the shared memory region too"
            )
        return None
    region = parameters[SHM_REGION]
    if region.WhichOneof("parameter_choice") != "string_param" or not region.string_param:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': parameter '{SHM_REGION}' must be a non-empty "
            "string_param naming a registered region"
        )
    if SHM_BYTE_SIZE not in parameters:
        raise InvalidArgumentError(
            f"{kind} '{clip(name)}': shared memory region '{clip(region.string_param)}' "
            f"given without '{SHM_BYTE_SIZE}'"
        )
    byte_size = _size_param(kind, name, SHM_BYTE_SIZE, parameters[SHM_BYTE_SIZE])
    offset = (_size_param(kind, name, SHM_OFFSET, parameters[SHM_OFFSET])
              if SHM_OFFSET in parameters else 0)
    return SharedMemoryRef(region.string_param, byte_size, offset)


def no_shared_memory(kind: str, name: str, ref: SharedMemoryRef) -> memoryview:
    """The `SharedMemoryResolver` where none is given: INVALID_ARGUMENT naming the tensor."""
    raise InvalidArgumentError(
        f"{kind} '{clip(name)}': refers to shared memory region '{clip(ref.region)}' but "
        "no shared memory is available here"
    )


def check_output_fits(name: str, datatype: str, shape: Sequence[int],
                      ref: SharedMemoryRef) -> None:
    """INVALID_ARGUMENT naming the output when its bytes exceed the shared memory it was given."""
    row = datatype_row("output", name, datatype)
    needed = math.prod(shape) * row.itemsize
    if needed > ref.byte_size:
        raise InvalidArgumentError(
            f"output '{clip(name)}': needs {needed} bytes (shape {list(shape)} x "
            f"{row.itemsize} bytes per {datatype} element) but {SHM_BYTE_SIZE} for shared "
            f"memory region '{clip(ref.region)}' is {ref.byte_size}"
        )


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
        raise InvalidArgumentError(f"input '{clip(name)}': {exc}") from None
    tensor = pb.ModelInferRequest.InferInputTensor(
        name=name, datatype=row.datatype, shape=array.shape
    )
    if raw:
        return tensor, to_wire_bytes(array)
    if row.contents_field is None:
        raise InvalidArgumentError(
            f"input '{clip(name)}': {row.datatype} has no typed contents field; send it raw "
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
    input_shared_memory: Mapping[str, SharedMemoryRef] | None = None,
    output_shared_memory: Mapping[str, SharedMemoryRef] | None = None,
) -> pb.ModelInferRequest:
    """A ModelInferRequest from named arrays (raw bytes by default, typed contents if raw=False).

    Inputs named in `input_shared_memory` carry only their reference (the caller has put their
    bytes in the region); outputs named in `output_shared_memory` are requested into their
    region (and are requested even when `outputs` does not list them).
    """
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    if parameters:
        to_parameters(parameters, request.parameters)
    in_shm = input_shared_memory or {}
    out_shm = output_shared_memory or {}
    for name in in_shm:
        if name not in inputs:
            raise InvalidArgumentError(f"input '{clip(name)}': given a shared memory region "
                                       "but not an array (its shape and datatype)")
    for name, value in inputs.items():
        if name in in_shm:
            array = np.asarray(value)
            try:
                row = dtypes.by_numpy(array.dtype)
            except dtypes.UnsupportedDtypeError as exc:
                raise InvalidArgumentError(f"input '{clip(name)}': {exc}") from None
            tensor = request.inputs.add(name=name, datatype=row.datatype, shape=array.shape)
            to_parameters(in_shm[name].parameters(), tensor.parameters)
            continue
        tensor, data = encode_input(name, value, raw=raw)
        request.inputs.append(tensor)
        if data is not None:
            request.raw_input_contents.append(data)
    for name in [*(outputs or ()), *(n for n in out_shm if n not in (outputs or ()))]:
        requested = request.outputs.add(name=name)
        if name in out_shm:
            to_parameters(out_shm[name].parameters(), requested.parameters)
    return request


def decode_infer_response(
    response: pb.ModelInferResponse, shared_memory: SharedMemoryResolver | None = None
) -> dict[str, np.ndarray]:
    """The response's output tensors by name, in response order (raw or typed contents).

    Outputs the server wrote into shared memory are read through `shared_memory` (a copy,
    since the caller will reuse its region); without a resolver they are an error naming them.
    """
    outputs = response.outputs
    check_unique("output", (t.name for t in outputs))
    raw = response.raw_output_contents
    if raw and len(raw) != len(outputs):
        raise InvalidArgumentError(
            f"raw_output_contents has {len(raw)} entries; expected {len(outputs)} "
            "(one per output)"
        )
    arrays: dict[str, np.ndarray] = {}
    for index, t in enumerate(outputs):
        ref = shared_memory_ref("output", t.name, t.parameters)
        if t.datatype == BYTES and ref is None:
            arrays[t.name] = _bytes_tensor("output", t.name, t.shape,
                                           raw[index] if raw else None, t.contents)
        elif ref is not None:
            row = datatype_row("output", t.name, t.datatype)
            size = element_count("output", t.name, t.shape) * row.itemsize
            check_output_fits(t.name, t.datatype, t.shape, ref)
            view = (shared_memory or no_shared_memory)(
                "output", t.name, SharedMemoryRef(ref.region, size, ref.offset))
            arrays[t.name] = decode_tensor("output", t.name, t.datatype, t.shape,
                                           raw=view, contents=None).copy()
        elif raw:
            arrays[t.name] = decode_tensor("output", t.name, t.datatype, t.shape,
                                           raw=raw[index], contents=None)
        else:
            arrays[t.name] = decode_tensor("output", t.name, t.datatype, t.shape, raw=None,
                                           contents=t.contents)
    return arrays
