"""Memory under hostile traffic (issue 18): requests that do not parse cost nothing lasting.

grpcio 1.85's server leaks ~19 KiB for every unary request it fails to parse (3,000 of them:
+56 MiB, with a bare grpc server and none of our code; the reason the retired grpcio server
parsed requests itself). `jaxport serve` (the front and its workers, RSS summed) must leave the
same 3,000 where RSS was, within a margin far below that leak (`LEAK_MARGIN_MIB`), measured
after a first round that warms the path."""

from __future__ import annotations

import random

import grpc
from fuzz_campaign import fuzz_bridge, make_fuzz_repository, rss_and_threads

CALLS = 3000
LEAK_MARGIN_MIB = 16  # the leak: ~56 MiB per 3,000


def test_undecodable_requests_leave_no_memory_behind(tmp_path, artifacts) -> None:
    repo = make_fuzz_repository(tmp_path / "repo", artifacts)
    rng = random.Random(18)
    with fuzz_bridge(repo) as bridge, bridge.channel() as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                   request_serializer=None, response_deserializer=None)

        def burst() -> None:
            for _ in range(CALLS):
                try:
                    call(b"\xff" + rng.randbytes(rng.randrange(0, 200)), timeout=60)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.INTERNAL, exc.details()
                    assert exc.details() == "Exception deserializing request!"
                else:
                    raise AssertionError("bytes starting 0xff parsed as a request")

        burst()  # warms every path (and the allocator) once
        before, _ = rss_and_threads(bridge.pid)
        burst()
        after, _ = rss_and_threads(bridge.pid)
        print(f"\n{CALLS} undecodable requests: server RSS {before:.0f} -> {after:.0f} MiB")
        assert after - before < LEAK_MARGIN_MIB
