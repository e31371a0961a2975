"""Hostile ModelInfer requests against a live bridge process.

Hypothesis drives structured hostile requests (shapes with negative, zero and [2**40]
dimensions, unknown datatypes, byte counts that do not match, duplicate names, raw and typed
contents mixed, bogus outputs/parameters) and arbitrary bytes as the whole message. Every call
must end in a well-formed gRPC status from the expected set, the server's RSS must stay
bounded (nothing is allocated from a declared shape), and a valid request must still get the
right answer afterwards.
"""

from __future__ import annotations

import collections

import grpc
import numpy as np
import pytest
from bridge_launch import rss_kib
from hostile import TensorSpec, hostile_requests, raw_infer, raw_messages, valid_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live import fuzzy_request, output, stub, wait_ready
from rel_models import fuzzy_expected

REAL = [TensorSpec("x", "FP32", (2, 3)), TensorSpec("flag", "BOOL", (2,))]
# A structured request is either fine or the caller's fault; an unknown model name NOT_FOUND.
STRUCTURED_OK = {"OK", "INVALID_ARGUMENT", "NOT_FOUND"}
# Bytes that do not parse as a ModelInferRequest are refused before the servicer runs.
RAW_OK = STRUCTURED_OK | {"INTERNAL"}
RSS_GROWTH_LIMIT_MIB = 256
# Hostile cases (one structured request and one message of arbitrary bytes each) that the
# memory test sends itself, so it never depends on which other tests ran before it.
CAMPAIGN = 120


@pytest.fixture(scope="module")
def live(bridge):
    channel = bridge.channel()
    s = stub(channel)
    wait_ready(s)
    # Warm the path once so RSS growth measures the fuzz, not first-call allocations.
    s.ModelInfer(fuzzy_request(), timeout=60)
    yield bridge, channel, s, rss_kib(bridge.pid)
    channel.close()


def _call(kind: str, fn, payload) -> str:
    """Send one hostile payload; its status name, checked against what `kind` allows."""
    try:
        fn(payload, timeout=60)
        code = "OK"
    except grpc.RpcError as exc:
        code = exc.code().name
        details = exc.details() or ""
        assert details, f"{code} without details"
        if code == "INTERNAL":
            # Only grpc's own parse failure may be INTERNAL; never a servicer crash.
            assert "deserializ" in details.lower() or "parse" in details.lower(), details
    allowed = STRUCTURED_OK if kind == "structured" else RAW_OK
    assert code in allowed, f"{kind} request got {code}"
    return code


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(req=hostile_requests("fuzzy", REAL))
def test_structured_hostile_requests(live, req) -> None:
    _bridge, _channel, s, _rss = live
    _call("structured", s.ModelInfer, req)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(payload=raw_messages())
def test_random_bytes_as_the_whole_message(live, payload: bytes) -> None:
    _bridge, channel, _s, _rss = live
    _call("raw", raw_infer(channel), payload)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(reqs=st.lists(hostile_requests("fuzzy", REAL), min_size=1, max_size=12))
def test_hostile_requests_in_one_stream(live, reqs) -> None:
    """On ModelStreamInfer a bad request costs one error_message; the stream goes on."""
    _bridge, _channel, s, _rss = live
    good = valid_request("fuzzy", REAL, seed=1)
    good.id = "last-good"
    responses = list(s.ModelStreamInfer(iter([*reqs, good]), timeout=60))
    assert len(responses) == len(reqs) + 1
    for req, r in zip([*reqs, good], responses, strict=True):
        # In order, one each, correlated by the echoed id (errors included, as Triton does).
        assert r.infer_response.id == req.id, (req.id, r)
        if r.error_message:
            assert r.error_message.split(":", 1)[0] in STRUCTURED_OK, r.error_message
        else:
            assert len(r.infer_response.raw_output_contents) >= 1
    assert responses[-1].infer_response.id == "last-good", responses[-1].error_message


def test_server_survived_with_bounded_memory_and_still_answers(live) -> None:
    """Its own fuzz campaign, then: alive, right answers, bounded memory (since the module's
    first request, so the other fuzz tests count too when they ran)."""
    bridge, channel, s, rss_before = live
    counts = {"structured": collections.Counter(), "raw": collections.Counter()}

    @settings(max_examples=CAMPAIGN, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(req=hostile_requests("fuzzy", REAL), payload=raw_messages())
    def campaign(req, payload: bytes) -> None:
        counts["structured"][_call("structured", s.ModelInfer, req)] += 1
        counts["raw"][_call("raw", raw_infer(channel), payload)] += 1

    campaign()
    assert bridge.alive()
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    flag = np.array([False, True])
    got = output(s.ModelInfer(fuzzy_request(x, flag), timeout=60))
    np.testing.assert_array_equal(got, fuzzy_expected(x, flag))
    assert s.ModelInfer(valid_request("fuzzy", REAL, seed=7), timeout=60).model_name == "fuzzy"
    after = rss_kib(bridge.pid)
    total = sum(sum(c.values()) for c in counts.values())
    print(
        f"\nfuzz(bridge): {total} cases in this test "
        f"(structured {dict(counts['structured'])}, raw bytes {dict(counts['raw'])}); "
        f"server RSS {rss_before / 1024:.0f} -> {after / 1024:.0f} MiB"
    )
    assert total >= 2 * CAMPAIGN, "hypothesis ran fewer cases than asked"
    assert counts["structured"]["INVALID_ARGUMENT"] > 0
    assert (after - rss_before) / 1024 < RSS_GROWTH_LIMIT_MIB
