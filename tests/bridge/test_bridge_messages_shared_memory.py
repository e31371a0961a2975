"""The server's side of the system-shared-memory extension, pure (`jaxport.bridge.messages`):
inputs read from a region, outputs written into one, references resolved up front; the
resolver is a bytearray. The reference parameters themselves: tests/protocol/
test_protocol_shared_memory.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from jaxport.bridge import messages
from jaxport.protocol import codecs, dtypes
from jaxport.protocol.errors import InvalidArgumentError, NotFoundError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

ALL = [d.datatype for d in dtypes.DTYPES]


class Memory:
    """Named regions backed by bytearrays: what a registry resolves, without any I/O."""

    def __init__(self, **sizes: int) -> None:
        self.regions = {name: bytearray(size) for name, size in sizes.items()}
        self.calls: list[tuple[str, str, codecs.SharedMemoryRef]] = []

    def __call__(self, kind: str, name: str, ref: codecs.SharedMemoryRef) -> memoryview:
        self.calls.append((kind, name, ref))
        if ref.region not in self.regions:
            raise NotFoundError(f"{kind} '{name}': region '{ref.region}' is not registered")
        return memoryview(self.regions[ref.region])[ref.offset:ref.offset + ref.byte_size]

    def put(self, region: str, offset: int, array: np.ndarray) -> None:
        data = codecs.to_wire_bytes(array)
        self.regions[region][offset:offset + len(data)] = data


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    row = dtypes.by_datatype(datatype)
    values = np.arange(int(np.prod(shape))) % 2 if datatype == "BOOL" else np.arange(
        int(np.prod(shape))) - 2
    return values.astype(row.numpy).reshape(shape)


def shm_tensor(name: str, datatype: str, shape: tuple[int, ...], region: str, byte_size: int,
               offset: int = 0) -> pb.ModelInferRequest.InferInputTensor:
    tensor = pb.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    codecs.to_parameters(codecs.SharedMemoryRef(region, byte_size, offset).parameters(),
                         tensor.parameters)
    return tensor


@pytest.mark.parametrize("datatype", ALL)
def test_input_from_shared_memory_every_dtype(datatype: str) -> None:
    array = sample(datatype)
    memory = Memory(r=4096)
    memory.put("r", 100, array)
    request = pb.ModelInferRequest(inputs=[shm_tensor("x", datatype, array.shape, "r",
                                                      array.nbytes, offset=100)])
    got = messages.decode_request_inputs(request, memory)["x"]
    assert got.dtype == dtypes.by_datatype(datatype).numpy
    np.testing.assert_array_equal(got.view(np.uint8), array.view(np.uint8))
    assert not got.flags.writeable  # the region is the client's
    assert memory.calls == [("input", "x", codecs.SharedMemoryRef("r", array.nbytes, 100))]


def test_input_is_a_view_of_the_region_not_a_copy() -> None:
    memory = Memory(r=64)
    memory.put("r", 0, np.ones(4, np.float32))
    request = pb.ModelInferRequest(inputs=[shm_tensor("x", "FP32", (4,), "r", 16)])
    got = messages.decode_request_inputs(request, memory)["x"]
    memory.put("r", 0, np.full(4, 7, np.float32))
    np.testing.assert_array_equal(got, np.full(4, 7, np.float32))


def test_raw_entries_only_for_inputs_not_in_shared_memory() -> None:
    memory = Memory(r=64)
    a, b, c = sample("FP32"), sample("INT64", (3,)), sample("BF16", (2, 2))
    memory.put("r", 8, b)
    request = pb.ModelInferRequest(
        inputs=[pb.ModelInferRequest.InferInputTensor(name="a", datatype="FP32", shape=a.shape),
                shm_tensor("b", "INT64", b.shape, "r", b.nbytes, offset=8),
                pb.ModelInferRequest.InferInputTensor(name="c", datatype="BF16", shape=c.shape)],
        raw_input_contents=[codecs.to_wire_bytes(a), codecs.to_wire_bytes(c)],
    )
    got = messages.decode_request_inputs(request, memory)
    assert list(got) == ["a", "b", "c"]
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)
    np.testing.assert_array_equal(got["c"].astype(np.float32), c.astype(np.float32))
    assert got["c"].dtype == ml_dtypes.bfloat16
    request.raw_input_contents.append(b"")
    with pytest.raises(InvalidArgumentError, match=r"3 entries; expected 2 \(one per input "
                                                   "not in shared memory"):
        messages.decode_request_inputs(request, memory)


def test_typed_contents_with_shared_memory_input() -> None:
    memory = Memory(r=64)
    tensor = shm_tensor("x", "FP32", (2,), "r", 8)
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    b = pb.ModelInferRequest.InferInputTensor(name="y", datatype="FP32", shape=[1])
    b.contents.fp32_contents.append(3.0)
    request = pb.ModelInferRequest(inputs=[tensor, b])
    with pytest.raises(InvalidArgumentError, match="input 'x': has typed contents and shared "
                                                   "memory parameters"):
        messages.decode_request_inputs(request, memory)
    # typed contents for the other input alongside a shared-memory input are fine
    request.inputs[0].ClearField("contents")
    memory.put("r", 0, np.array([1.0, 2.0], np.float32))
    got = messages.decode_request_inputs(request, memory)
    np.testing.assert_array_equal(got["y"], np.array([3.0], np.float32))


def test_byte_size_must_equal_shape_times_itemsize() -> None:
    memory = Memory(r=64)
    request = pb.ModelInferRequest(inputs=[shm_tensor("x", "FP32", (2, 3), "r", 20)])
    with pytest.raises(InvalidArgumentError, match=r"input 'x': shared_memory_byte_size is 20; "
                                                   r"expected 24 \(shape \[2, 3\] x 4 bytes"):
        messages.decode_request_inputs(request, memory)
    assert memory.calls == []  # checked before the region is touched


def test_resolver_errors_pass_through_and_no_resolver_is_an_error() -> None:
    request = pb.ModelInferRequest(inputs=[shm_tensor("x", "FP32", (2,), "nope", 8)])
    with pytest.raises(NotFoundError, match="input 'x': region 'nope'"):
        messages.decode_request_inputs(request, Memory())
    with pytest.raises(InvalidArgumentError, match="input 'x': refers to shared memory region "
                                                   "'nope' but no shared memory"):
        messages.decode_request_inputs(request)


@pytest.mark.parametrize("datatype", ALL)
def test_output_written_into_shared_memory(datatype: str) -> None:
    memory = Memory(o=256)
    array = sample(datatype, (3, 2))
    ref = codecs.SharedMemoryRef("o", 200, offset=40)
    placed = {"y": messages.SharedMemoryOutput(ref, memory("output", "y", ref))}
    z = sample("INT32", (2,))
    response = messages.encode_infer_response({"y": array, "z": z}, model_name="m",
                                            shared_memory=placed)
    written = np.frombuffer(bytes(memory.regions["o"][40:40 + array.nbytes]),
                            dtype=dtypes.by_datatype(datatype).numpy).reshape(array.shape)
    np.testing.assert_array_equal(written.view(np.uint8), array.view(np.uint8))
    y, zt = response.outputs
    assert (y.name, y.datatype, list(y.shape)) == ("y", datatype, [3, 2])
    assert codecs.from_parameters(y.parameters) == {"shared_memory_region": "o",
                                                    "shared_memory_byte_size": 200,
                                                    "shared_memory_offset": 40}
    assert list(response.raw_output_contents) == [b"", codecs.to_wire_bytes(z)]
    assert not zt.parameters
    # and back, through a resolver (what a client does)
    got = codecs.decode_infer_response(response, memory)
    np.testing.assert_array_equal(got["y"].view(np.uint8), array.view(np.uint8))
    np.testing.assert_array_equal(got["z"], z)
    with pytest.raises(InvalidArgumentError, match="output 'y': refers to shared memory "
                                                   "region 'o'"):
        codecs.decode_infer_response(response)


def test_output_too_small_names_the_output() -> None:
    memory = Memory(o=64)
    ref = codecs.SharedMemoryRef("o", 16)
    placed = {"y": messages.SharedMemoryOutput(ref, memory("output", "y", ref))}
    with pytest.raises(InvalidArgumentError, match=r"output 'y': needs 24 bytes \(shape "
                                                   r"\[2, 3\] x 4 bytes per FP32 element\) but "
                                                   "shared_memory_byte_size for shared memory "
                                                   "region 'o' is 16"):
        messages.encode_infer_response({"y": sample("FP32")}, model_name="m", shared_memory=placed)
    assert bytes(memory.regions["o"]) == bytes(64)  # nothing written


def test_requested_shared_memory_outputs_resolved_up_front() -> None:
    memory = Memory(o=64)
    request = pb.ModelInferRequest(outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(
        name="a"), pb.ModelInferRequest.InferRequestedOutputTensor(name="b")])
    codecs.to_parameters(codecs.SharedMemoryRef("o", 32, 8).parameters(),
                         request.outputs[1].parameters)
    placed = messages.requested_shared_memory_outputs(request, memory)
    assert list(placed) == ["b"] and placed["b"].ref == codecs.SharedMemoryRef("o", 32, 8)
    assert len(placed["b"].buffer) == 32
    codecs.to_parameters(codecs.SharedMemoryRef("gone", 32).parameters(),
                         request.outputs[0].parameters)
    with pytest.raises(NotFoundError, match="output 'a': region 'gone'"):
        messages.requested_shared_memory_outputs(request, memory)
