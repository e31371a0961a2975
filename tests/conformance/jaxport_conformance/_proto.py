"""The Open Inference Protocol's generated gRPC stubs: jaxport's (clients/python) when importable,
else the copy the wheel carries in `_gen` (tests/conformance/build_dist.py puts it there). One
source either way; importing both would register the same .proto twice in protobuf's pool."""

from __future__ import annotations

try:
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
except ImportError:  # the installed wheel, without jaxport
    from jaxport_conformance._gen import grpc_service_pb2 as pb  # type: ignore[no-redef]
    from jaxport_conformance._gen import grpc_service_pb2_grpc as pb_grpc  # type: ignore[no-redef]

__all__ = ["pb", "pb_grpc"]
