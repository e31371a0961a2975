"""The hostile-request strategies against the server's request decoding in-process
(`jaxport.bridge.messages` over the rules of `jaxport.protocol.codecs`): every request is
either decoded or refused with an InvalidArgumentError naming what is wrong, and nothing is
allocated from a declared shape (a [2**40] input costs no memory). The same strategies drive
the live-bridge fuzz in test_fuzz_bridge.py."""

from __future__ import annotations

import resource

from hostile import TensorSpec, hostile_requests
from hypothesis import HealthCheck, given, settings
from jaxport.bridge import messages
from jaxport.protocol.errors import ProtocolError
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

REAL = [TensorSpec("x", "FP32", (2, 3)), TensorSpec("mask", "BOOL", (2,))]
STATS = {"cases": 0, "decoded": 0, "refused": 0}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_requests("m", REAL))
def test_codecs_refuse_hostile_requests_cleanly(req: pb.ModelInferRequest) -> None:
    STATS["cases"] += 1
    try:
        arrays = messages.decode_request_inputs(req)
    except ProtocolError as err:
        assert err.code == "INVALID_ARGUMENT", err
        assert err.message
        STATS["refused"] += 1
        return
    STATS["decoded"] += 1
    for t in req.inputs:
        assert arrays[t.name].shape == tuple(t.shape)


def test_codecs_fuzz_figures() -> None:
    """Runs after the property: prints the counts and checks memory stayed small."""
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nfuzz(codecs): {STATS} peak RSS of this process {rss_mib:.0f} MiB")
    assert STATS["cases"] >= 100
    assert STATS["refused"] > 0
