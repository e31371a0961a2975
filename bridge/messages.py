"""The server's side of the Open Inference Protocol messages: a ModelInferRequest into named
arrays, named arrays into a ModelInferResponse, and Triton's classification extension.

Pure, like the client's half it pairs with (`jaxport.protocol.codecs`, whose rules, shared
checks and shared-memory references it uses): no I/O, no grpc, unit-tested without a server
(tests/bridge/test_bridge_messages*.py). It lives in the bridge because only a server decodes
requests and encodes responses; the client distribution (`jaxport-client`) does not carry it.
The servicer calls it (convert -> core -> convert), the model core formats classification
results with it.

Requests: every input is checked at the boundary (datatype, rank, unique names, byte counts
before any allocation, raw vs typed vs shared memory; see `jaxport.protocol.codecs`). Responses
are always raw (`raw_output_contents`): tritonclient reads nothing else. An output requested
into shared memory is written into its region (size checked first) and answered with an empty
raw entry and its reference in the output's parameters, as Triton does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxport.protocol import dtypes
from jaxport.protocol.codecs import (
    BYTES,
    CLASSIFICATION,
    SHM_BYTE_SIZE,
    SHM_REGION,
    ParameterValue,
    SharedMemoryRef,
    SharedMemoryResolver,
    check_output_fits,
    check_unique,
    datatype_row,
    decode_tensor,
    element_count,
    no_shared_memory,
    shared_memory_ref,
    to_parameters,
    used_contents_fields,
)
from jaxport.protocol.errors import InvalidArgumentError, clip
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

__all__ = [
    "SharedMemoryOutput",
    "check_classifiable",
    "decode_request_inputs",
    "encode_bytes_elements",
    "encode_infer_response",
    "requested_classifications",
    "requested_output_names",
    "requested_shared_memory_outputs",
    "topk_classification",
]


# --- requests ------------------------------------------------------------------------------


def _decode_shared(tensor: pb.ModelInferRequest.InferInputTensor, ref: SharedMemoryRef,
                   resolve: SharedMemoryResolver) -> np.ndarray:
    name = tensor.name
    if used_contents_fields(tensor.contents):
        raise InvalidArgumentError(
            f"input '{clip(name)}': has typed contents and shared memory parameters; send "
            "its data one way, not both"
        )
    row = datatype_row("input", name, tensor.datatype)
    expected = element_count("input", name, tensor.shape) * row.itemsize
    if ref.byte_size != expected:
        raise InvalidArgumentError(
            f"input '{clip(name)}': {SHM_BYTE_SIZE} is {ref.byte_size}; expected {expected} "
            f"(shape {list(tensor.shape)} x {row.itemsize} bytes per {tensor.datatype} element)"
        )
    array = decode_tensor("input", name, tensor.datatype, tensor.shape,
                          raw=resolve("input", name, ref), contents=None)
    array.flags.writeable = False  # the region is the client's: never write it from here
    return array


def decode_request_inputs(
    request: pb.ModelInferRequest, shared_memory: SharedMemoryResolver | None = None
) -> dict[str, np.ndarray]:
    """The request's input tensors by name, in request order, all protocol rules enforced.

    Inputs with shared-memory parameters are read through `shared_memory` (zero-copy,
    read-only views); the others from `raw_input_contents` (one entry per such input, in
    order) or typed contents.
    """
    inputs = request.inputs
    check_unique("input", [t.name for t in inputs])
    # An input without parameters has no shared-memory reference (skips three map lookups).
    refs = [shared_memory_ref("input", t.name, t.parameters) if t.parameters else None
            for t in inputs]
    resolve = shared_memory or no_shared_memory
    raw = request.raw_input_contents
    if raw:
        in_message = sum(ref is None for ref in refs)
        if len(raw) != in_message:
            raise InvalidArgumentError(
                f"raw_input_contents has {len(raw)} entries; expected {in_message} "
                "(one per input not in shared memory, in the order of `inputs`)"
            )
        for tensor, ref in zip(inputs, refs, strict=True):
            if ref is None and used_contents_fields(tensor.contents):
                raise InvalidArgumentError(
                    f"input '{clip(tensor.name)}': has typed contents but the request uses "
                    "raw_input_contents; send every input one way, not both"
                )
    arrays: dict[str, np.ndarray] = {}
    next_raw = iter(raw)
    for t, ref in zip(inputs, refs, strict=True):
        if ref is not None:
            arrays[t.name] = _decode_shared(t, ref, resolve)
        elif raw:
            arrays[t.name] = decode_tensor("input", t.name, t.datatype, t.shape,
                                           raw=next(next_raw), contents=None)
        else:
            arrays[t.name] = decode_tensor("input", t.name, t.datatype, t.shape, raw=None,
                                           contents=t.contents)
    return arrays


def requested_output_names(request: pb.ModelInferRequest) -> list[str] | None:
    """Names of the outputs the caller asked for, in order; None when it asked for all."""
    if not request.outputs:
        return None
    names = [o.name for o in request.outputs]
    check_unique("requested output", names)
    return names


@dataclass(frozen=True)
class SharedMemoryOutput:
    """A requested output to be written into shared memory: its reference and its bytes."""

    ref: SharedMemoryRef
    buffer: memoryview


def requested_shared_memory_outputs(
    request: pb.ModelInferRequest, resolve: SharedMemoryResolver
) -> dict[str, SharedMemoryOutput]:
    """The requested outputs to be written into shared memory, resolved before execution so
    an unknown region or a range beyond it fails the request before any work is done."""
    placed: dict[str, SharedMemoryOutput] = {}
    for output in request.outputs:
        ref = shared_memory_ref("output", output.name, output.parameters)
        if ref is not None:
            placed[output.name] = SharedMemoryOutput(ref, resolve("output", output.name, ref))
    return placed


# --- responses -----------------------------------------------------------------------------


def encode_bytes_elements(elements: Iterable[bytes]) -> bytes:
    """Raw BYTES contents: each element as a 4-byte little-endian length, then its bytes
    (what `jaxport.protocol.codecs.decode_bytes_elements` reads)."""
    parts = []
    for element in elements:
        parts.append(len(element).to_bytes(4, "little"))
        parts.append(element)
    return b"".join(parts)


def encode_infer_response(
    outputs: Mapping[str, np.ndarray],
    *,
    model_name: str,
    model_version: str = "",
    request_id: str = "",
    parameters: Mapping[str, ParameterValue] | None = None,
    shared_memory: Mapping[str, SharedMemoryOutput] | None = None,
) -> pb.ModelInferResponse:
    """A response carrying every output as raw little-endian bytes, in mapping order.

    Outputs named in `shared_memory` are written into their buffer instead (size checked
    first); the response then carries their metadata with the shared-memory parameters and
    an empty raw entry, as Triton does.
    """
    response = pb.ModelInferResponse(
        model_name=model_name, model_version=model_version, id=request_id
    )
    if parameters:
        to_parameters(parameters, response.parameters)
    placed = shared_memory or {}
    for name, value in outputs.items():
        array = np.asarray(value)
        if array.dtype == object:  # BYTES (classification results): length-prefixed, raw
            response.outputs.add(name=name, datatype=BYTES, shape=array.shape)
            response.raw_output_contents.append(encode_bytes_elements(array.ravel()))
            continue
        row = dtypes.by_numpy(array.dtype)
        tensor = response.outputs.add(name=name, datatype=row.datatype, shape=array.shape)
        target = placed.get(name)
        if target is None:  # to_wire_bytes with the row already looked up
            response.raw_output_contents.append(
                np.ascontiguousarray(array, dtype=row.numpy).tobytes())
            continue
        check_output_fits(name, row.datatype, array.shape, target.ref)
        destination = np.frombuffer(target.buffer, dtype=row.numpy, count=array.size)
        np.copyto(destination.reshape(array.shape), array, casting="equiv")
        to_parameters(target.ref.parameters(), tensor.parameters)
        response.raw_output_contents.append(b"")
    return response


# --- the classification extension -----------------------------------------------------------

_CLASSIFIABLE = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "BF16",
     "FP32", "FP64"})


def check_classifiable(name: str, datatype: str) -> None:
    """INVALID_ARGUMENT unless an output of `datatype` can be classified (numbers, not BOOL)."""
    if datatype not in _CLASSIFIABLE:
        raise InvalidArgumentError(
            f"requested output '{clip(name)}': class result not available for an output of "
            f"type {datatype}"
        )


def requested_classifications(request: pb.ModelInferRequest) -> dict[str, int]:
    """Requested outputs asking for top-k classification (`classification` = k >= 1), by name.

    An output in shared memory cannot also be classified here (INVALID_ARGUMENT)."""
    counts: dict[str, int] = {}
    for output in request.outputs:
        param = output.parameters.get(CLASSIFICATION)
        if param is None:
            continue
        if param.WhichOneof("parameter_choice") not in ("int64_param", "uint64_param"):
            raise InvalidArgumentError(
                f"requested output '{clip(output.name)}': parameter '{CLASSIFICATION}' must be "
                "an int64 class count"
            )
        k = param.int64_param if param.HasField("int64_param") else param.uint64_param
        if k < 1:
            raise InvalidArgumentError(
                f"requested output '{clip(output.name)}': class count must be >= 1, got {k}"
            )
        if SHM_REGION in output.parameters:
            raise InvalidArgumentError(
                f"requested output '{clip(output.name)}': classification into shared memory "
                "is not supported; request it in the response"
            )
        counts[output.name] = int(k)
    return counts


def _class_value(value: Any, floating: bool) -> str:
    # C++ std::to_string, as Triton formats it: "%f" for floating point, "%d" for integers.
    return f"{float(value):f}" if floating else str(int(value))


def _class_entry(value: str, index: int, labels: Sequence[str]) -> bytes:
    label = labels[index] if index < len(labels) else ""
    return (f"{value}:{index}:{label}" if label else f"{value}:{index}").encode()


def topk_classification(array: np.ndarray, class_count: int, batched: bool,
                        labels: Sequence[str] | None = None) -> np.ndarray:
    """Triton's classification result for one output: BYTES entries `"<value>:<index>"`, or
    `"<value>:<index>:<label>"` when `labels[index]` exists and is not empty (Triton's label
    provider: line `index` of the output's label file).

    Per batch row when `batched` (the output's dimension 0 is the batch: the caller asks
    `jaxport.artifact.dims.row_outputs`), else over the whole
    tensor: the `class_count` largest values in descending order (ties: lower index first),
    value formatted as C++ `std::to_string` does (`%f`, 6 decimals, for FP16/BF16/FP32/FP64;
    the integer for integer types), index into the row flattened in C order. Shape
    `[rows, min(k, row elements)]` when batched, else `[min(k, elements)]`.
    """
    labels = labels or ()
    array = np.asarray(array)
    floating = array.dtype.kind == "f" or array.dtype.name == "bfloat16"
    rows = array.reshape(array.shape[0], -1) if batched and array.ndim else array.reshape(1, -1)
    if floating:
        rows = rows.astype(np.float64)
    width = rows.shape[1]
    k = min(class_count, width)
    out = np.empty((rows.shape[0], k), dtype=object)
    for r, row in enumerate(rows):
        # Descending, stable: sort the reversed row ascending, reverse, map back the index.
        order = (width - 1 - np.argsort(row[::-1], kind="stable"))[::-1][:k]
        out[r] = [_class_entry(_class_value(row[i], floating), int(i), labels) for i in order]
    return out if batched and array.ndim else out.reshape(k)
