"""The coexistence rule (docs/clients.md, "Beside Triton's stubs"): jaxport's Python client and
tritonclient in ONE process, each calling the live bridge, the success and the error path.

Our stubs register in their own descriptor pool (`jaxport.protocol.gen.inference.POOL`), so
importing tritonclient after them (this process already has ours) no longer fails with a
duplicate symbol; the other import order is tests/protocol/test_proto_wire_compat.py's.
"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as tritongrpc
from client_helpers import Server
from google.protobuf import descriptor_pool
from jaxport.client import InferenceClient, InferenceServerError
from jaxport.protocol.gen.inference import POOL, grpc_service_pb2
from tritonclient.utils import InferenceServerException

X = np.array([1.5, -2.0, 4.25], np.float32)  # echo is y = x: an identity, exact


def test_our_stubs_are_not_in_the_default_pool() -> None:
    assert grpc_service_pb2.DESCRIPTOR.pool is POOL
    triton = descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest")
    assert triton.file.name == "grpc_service.proto"  # tritonclient's file, not ours


def test_jaxport_client_and_tritonclient_call_the_bridge_from_one_process(server: Server) -> None:
    with InferenceClient(server.url, timeout=60) as ours:
        np.testing.assert_array_equal(ours.infer("echo", {"x": X})["y"], X)
        with pytest.raises(InferenceServerError) as ours_err:
            ours.infer("no_such_model", {"x": X})
    assert ours_err.value.code == "NOT_FOUND" and "no_such_model" in ours_err.value.message

    theirs = tritongrpc.InferenceServerClient(server.url)
    try:
        x = tritongrpc.InferInput("x", [3], "FP32")
        x.set_data_from_numpy(X)
        got = theirs.infer("echo", [x], client_timeout=60).as_numpy("y")
        np.testing.assert_array_equal(got, X)
        with pytest.raises(InferenceServerException) as triton_err:
            theirs.infer("no_such_model", [x], client_timeout=60)
        assert triton_err.value.status() == "StatusCode.NOT_FOUND"
        assert "no_such_model" in triton_err.value.message()
    finally:
        theirs.close()
