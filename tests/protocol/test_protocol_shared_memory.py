"""The shared-memory references of Triton's system-shared-memory extension, pure: the
parameters that carry one (`jaxport.protocol.codecs.shared_memory_ref`). Inputs read from and
outputs written into regions (the server's side) are the Go front's (bridge/front/request and
bridge/front/shm, unit-tested there; live: tests/bridge/test_bridge_shared_memory.py)."""

from __future__ import annotations

import pytest
from jaxport.protocol import codecs
from jaxport.protocol.errors import InvalidArgumentError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb


def param(**kind: object) -> pb.InferParameter:
    return pb.InferParameter(**kind)


@pytest.mark.parametrize(("params", "message"), [
    ({"shared_memory_region": param(int64_param=3), "shared_memory_byte_size":
      param(int64_param=8)}, "'shared_memory_region' must be a non-empty string_param"),
    ({"shared_memory_region": param(string_param=""), "shared_memory_byte_size":
      param(int64_param=8)}, "'shared_memory_region' must be a non-empty string_param"),
    ({"shared_memory_region": param(string_param="r")}, "given without "
                                                         "'shared_memory_byte_size'"),
    ({"shared_memory_region": param(string_param="r"), "shared_memory_byte_size":
      param(string_param="8")}, "'shared_memory_byte_size' must be an int64_param, got "
                                "string_param"),
    ({"shared_memory_region": param(string_param="r"), "shared_memory_byte_size":
      param(int64_param=-8)}, "'shared_memory_byte_size' is -8; expected >= 0"),
    ({"shared_memory_region": param(string_param="r"), "shared_memory_byte_size":
      param(int64_param=8), "shared_memory_offset": param(int64_param=-1)},
     "'shared_memory_offset' is -1"),
    ({"shared_memory_byte_size": param(int64_param=8)}, "'shared_memory_byte_size' given "
                                                        "without 'shared_memory_region'"),
    ({"shared_memory_offset": param(int64_param=8)}, "'shared_memory_offset' given without"),
])
def test_parameter_rules(params: dict, message: str) -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x", datatype="FP32", shape=[2])
    for key, value in params.items():
        tensor.parameters[key].CopyFrom(value)
    with pytest.raises(InvalidArgumentError, match=r"input 'x': .*" + message.replace(
            "(", r"\(").replace(")", r"\)")):
        codecs.shared_memory_ref("input", "x", tensor.parameters)


def test_uint64_sizes_accepted_and_no_parameters_is_none() -> None:
    tensor = pb.ModelInferRequest.InferInputTensor(name="x")
    assert codecs.shared_memory_ref("input", "x", tensor.parameters) is None
    tensor.parameters["shared_memory_region"].string_param = "r"
    tensor.parameters["shared_memory_byte_size"].uint64_param = 8
    tensor.parameters["shared_memory_offset"].uint64_param = 16
    assert codecs.shared_memory_ref("input", "x", tensor.parameters) == \
        codecs.SharedMemoryRef("r", 8, 16)
