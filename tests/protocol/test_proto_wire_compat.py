"""Our `inference` protos against tritonclient's: same messages, field names, numbers and types.

tritonclient's descriptors are dumped in a subprocess: this process's stubs are ours alone (the
two can share a process, see the last test, but the comparison should not depend on it).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2
from jaxport.protocol.gen.inference import grpc_service_pb2, model_config_pb2

_DUMP = r"""
import json
from google.protobuf import descriptor_pb2
from tritonclient.grpc import model_config_pb2, service_pb2
out = {}
for mod in (service_pb2, model_config_pb2):
    fd = descriptor_pb2.FileDescriptorProto()
    mod.DESCRIPTOR.CopyToProto(fd)
    out[fd.name] = fd.SerializeToString().hex()
print(json.dumps(out))
"""


def _index(fd: descriptor_pb2.FileDescriptorProto) -> tuple[dict, dict, dict]:
    """(fields by message, enum values by enum, rpcs) keyed by fully-qualified name."""
    messages: dict[str, dict[str, tuple]] = {}
    enums: dict[str, dict[str, int]] = {}

    def walk(msg: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = f"{prefix}.{msg.name}"
        messages[name] = {
            f.name: (
                f.number,
                f.label,
                f.type,
                f.type_name,
                msg.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None,
            )
            for f in msg.field
        }
        for e in msg.enum_type:
            enums[f"{name}.{e.name}"] = {v.name: v.number for v in e.value}
        for nested in msg.nested_type:
            walk(nested, name)

    for m in fd.message_type:
        walk(m, f".{fd.package}")
    for e in fd.enum_type:
        enums[f".{fd.package}.{e.name}"] = {v.name: v.number for v in e.value}
    rpcs = {
        f"{s.name}.{m.name}": (m.input_type, m.output_type, m.client_streaming, m.server_streaming)
        for s in fd.service
        for m in s.method
    }
    return messages, enums, rpcs


def _merged(fds: list[descriptor_pb2.FileDescriptorProto]) -> tuple[dict, dict, dict]:
    merged: tuple[dict, dict, dict] = ({}, {}, {})
    for fd in fds:
        for acc, part in zip(merged, _index(fd), strict=True):
            acc.update(part)
    return merged


@pytest.fixture(scope="module")
def triton() -> tuple[dict, dict, dict]:
    done = subprocess.run(
        [sys.executable, "-c", _DUMP], capture_output=True, text=True, check=True, timeout=60
    )
    fds = []
    for blob in json.loads(done.stdout).values():
        fd = descriptor_pb2.FileDescriptorProto()
        fd.ParseFromString(bytes.fromhex(blob))
        fds.append(fd)
    return _merged(fds)


@pytest.fixture(scope="module")
def ours() -> tuple[dict, dict, dict]:
    fds = []
    for mod in (grpc_service_pb2, model_config_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fd)
        fds.append(fd)
    return _merged(fds)


def test_package_and_service_names(ours: tuple[dict, dict, dict]) -> None:
    assert grpc_service_pb2.DESCRIPTOR.package == "inference"
    assert "GRPCInferenceService" in grpc_service_pb2.DESCRIPTOR.services_by_name


def test_every_message_and_field_matches_triton(ours, triton) -> None:
    our_msgs, their_msgs = ours[0], triton[0]
    for msg, fields in our_msgs.items():
        assert msg in their_msgs, f"{msg} is not a Triton message"
        for name, spec in fields.items():
            assert name in their_msgs[msg], f"{msg}.{name} is not a Triton field"
            assert spec == their_msgs[msg][name], f"{msg}.{name}: ours {spec} vs Triton"


def test_core_messages_are_complete(ours, triton) -> None:
    """Messages on the inference path declare every field Triton's client knows."""
    complete = [
        ".inference.ModelInferRequest",
        ".inference.ModelInferRequest.InferInputTensor",
        ".inference.ModelInferRequest.InferRequestedOutputTensor",
        ".inference.ModelInferResponse",
        ".inference.ModelInferResponse.InferOutputTensor",
        ".inference.InferParameter",
        ".inference.InferTensorContents",
        ".inference.ModelMetadataResponse",
        ".inference.ModelMetadataResponse.TensorMetadata",
        ".inference.ModelStreamInferResponse",
        ".inference.RepositoryIndexResponse.ModelIndex",
        ".inference.ModelStatistics",
        ".inference.InferStatistics",
        ".inference.SystemSharedMemoryStatusRequest",
        ".inference.SystemSharedMemoryStatusResponse",
        ".inference.SystemSharedMemoryStatusResponse.RegionStatus",
        ".inference.SystemSharedMemoryStatusResponse.RegionsEntry",
        ".inference.SystemSharedMemoryRegisterRequest",
        ".inference.SystemSharedMemoryRegisterResponse",
        ".inference.SystemSharedMemoryUnregisterRequest",
        ".inference.SystemSharedMemoryUnregisterResponse",
        ".inference.CudaSharedMemoryStatusRequest",
        ".inference.CudaSharedMemoryStatusResponse",
        ".inference.CudaSharedMemoryStatusResponse.RegionStatus",
        ".inference.CudaSharedMemoryStatusResponse.RegionsEntry",
        ".inference.CudaSharedMemoryRegisterRequest",
        ".inference.CudaSharedMemoryRegisterResponse",
        ".inference.CudaSharedMemoryUnregisterRequest",
        ".inference.CudaSharedMemoryUnregisterResponse",
        ".inference.TraceSettingRequest",
        ".inference.TraceSettingRequest.SettingValue",
        ".inference.TraceSettingRequest.SettingsEntry",
        ".inference.TraceSettingResponse",
        ".inference.TraceSettingResponse.SettingValue",
        ".inference.TraceSettingResponse.SettingsEntry",
    ]
    for msg in complete:
        assert ours[0][msg] == triton[0][msg], msg


def test_enums_match_triton(ours, triton) -> None:
    for enum, values in ours[1].items():
        assert enum in triton[1], enum
        assert values == triton[1][enum], enum
    assert ours[1][".inference.DataType"]["TYPE_BF16"] == 14


def test_rpcs_match_triton(ours, triton) -> None:
    required = {
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
        "ModelInfer", "ModelStreamInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex",
        "RepositoryModelLoad", "RepositoryModelUnload",
        "SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister",
        "TraceSetting",
    }
    assert {k.split(".", 1)[1] for k in ours[2]} == required
    for rpc, spec in ours[2].items():
        assert spec == triton[2][rpc], rpc
    assert ours[2]["GRPCInferenceService.ModelStreamInfer"][2:] == (True, True)


@pytest.mark.parametrize(
    "order",
    [
        ("jaxport.protocol.gen.inference.grpc_service_pb2", "tritonclient.grpc"),
        ("tritonclient.grpc", "jaxport.protocol.gen.inference.grpc_service_pb2"),
    ],
)
def test_stubs_and_tritonclient_share_a_process(order: tuple[str, str]) -> None:
    """The coexistence rule (docs/clients.md): our stubs register in their own descriptor pool
    (`jaxport.protocol.gen.inference.POOL`), so tritonclient's copy of the same `inference.*` names
    imports beside them in either order, and each parses what the other serialized."""
    code = f"""import {order[0]}
import {order[1]}
from google.protobuf import descriptor_pool
from jaxport.protocol.gen.inference import POOL
from jaxport.protocol.gen.inference import grpc_service_pb2 as ours
from tritonclient.grpc import service_pb2 as theirs
assert ours.DESCRIPTOR.pool is POOL
assert descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest").file.name \\
    == "grpc_service.proto"
a = ours.ModelInferRequest(model_name="m", raw_input_contents=[b"xy"])
a.inputs.add(name="x", datatype="INT8", shape=[2])
b = theirs.ModelInferRequest.FromString(a.SerializeToString())
assert b.inputs[0].name == "x" and b.raw_input_contents == [b"xy"], b
assert ours.ModelInferRequest.FromString(b.SerializeToString()) == a
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
