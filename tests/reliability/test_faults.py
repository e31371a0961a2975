"""Faults on a live bridge: callers that cancel or vanish mid-request and mid-stream, models
that fail to load next to healthy ones, unload while requests are in flight, and SIGTERM under
load. After each, the server still answers."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from bridge_launch import start_bridge
from broken import BROKEN, GOOD, REFUSAL_WORD
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from live import (
    admission_counts,
    fuzzy_request,
    iters_for,
    make_repository,
    slow_request,
    stub,
    wait_admitted,
    wait_ready,
)
from rel_models import FUZZ_MODEL, SLOW_MODEL

# What a request to a model that is not (or no longer) loaded may answer.
GONE_MODEL = {"UNAVAILABLE", "NOT_FOUND"}


@pytest.fixture(scope="module")
def live(bridge):
    channel = bridge.channel()
    s = stub(channel)
    wait_ready(s)
    one_second = iters_for(s, 1.0)
    yield bridge, s, one_second
    channel.close()


def _still_serves(bridge, s) -> None:
    assert bridge.alive()
    assert s.ModelInfer(fuzzy_request(request_id="alive"), timeout=10).id == "alive"


def test_client_cancels_mid_request(live) -> None:
    bridge, s, one_second = live
    futures = [s.ModelInfer.future(slow_request(one_second, f"c{i}"), timeout=30)
               for i in range(3)]
    time.sleep(0.3)
    cancelled = sum(f.cancel() for f in futures)
    # A channel closed with calls in flight is a client that vanished without a word.
    ch = bridge.channel()
    stub(ch).ModelInfer.future(slow_request(one_second, "vanish"), timeout=30)
    time.sleep(0.3)
    ch.close()
    print(f"\nfaults: cancelled {cancelled} in-flight requests, closed a channel mid-request")
    _still_serves(bridge, s)


def test_client_cancels_mid_stream(live) -> None:
    bridge, s, one_second = live
    stop = threading.Event()

    def requests():
        yield fuzzy_request(request_id="s0")
        yield slow_request(one_second, "s1")
        stop.wait(30)  # keep the stream open, as a client that stalls would

    call = s.ModelStreamInfer(requests(), timeout=60)
    first = next(call)
    assert first.infer_response.id == "s0", first.error_message
    time.sleep(0.2)
    call.cancel()
    stop.set()
    with pytest.raises(grpc.RpcError) as info:
        for _ in call:
            pass
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # A fresh stream on the same server still works end to end.
    again = list(s.ModelStreamInfer(iter([fuzzy_request(request_id=f"t{i}")
                                          for i in range(3)]), timeout=30))
    assert [r.infer_response.id for r in again] == ["t0", "t1", "t2"]
    print("\nfaults: stream cancelled after 1 of 2 responses; a new stream answered 3 of 3")
    _still_serves(bridge, s)


def test_broken_models_fail_alone_with_a_reason(live) -> None:
    bridge, s, _ = live
    index = s.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=10)
    states = {m.name: (m.state, m.reason) for m in index.models}
    for name in GOOD:
        assert s.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready, states.get(name)
    lines = []
    for name in BROKEN:
        culprit = REFUSAL_WORD[name]
        assert not s.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready
        with pytest.raises(grpc.RpcError) as info:
            req = fuzzy_request()
            req.model_name = name
            s.ModelInfer(req, timeout=10)
        assert info.value.code().name in GONE_MODEL, info.value
        # Loading it explicitly fails again, and says which file is at fault.
        with pytest.raises(grpc.RpcError) as info:
            s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=name), timeout=60)
        details = info.value.details()
        lines.append(f"{name}: {info.value.code().name}: {details}")
        assert info.value.code() != grpc.StatusCode.INTERNAL, details
        assert name in details, details
        assert culprit in details.lower(), (culprit, details)
    print("\nfaults: broken models refused while others serve:\n  " + "\n  ".join(lines))
    _still_serves(bridge, s)


def test_unload_during_inflight_requests(live) -> None:
    bridge, s, one_second = live
    with ThreadPoolExecutor(6) as pool:
        futs = [pool.submit(s.ModelInfer, slow_request(one_second // 2, f"u{i}"), timeout=60)
                for i in range(6)]
        time.sleep(0.3)
        s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=SLOW_MODEL),
                                timeout=60)
        outcomes: dict[str, int] = {}
        for f in futs:
            try:
                f.result(60)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
                assert code in GONE_MODEL | {"CANCELLED", "ABORTED"}, exc
                assert SLOW_MODEL in exc.details(), exc.details()
            outcomes[code] = outcomes.get(code, 0) + 1
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(slow_request(10), timeout=10)
    assert info.value.code().name in GONE_MODEL
    s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=SLOW_MODEL), timeout=120)
    assert s.ModelInfer(slow_request(10, "back"), timeout=30).id == "back"
    print(f"\nfaults: unload with 6 requests in flight -> {outcomes}; after unload "
          f"{info.value.code().name}; reloaded and served")
    _still_serves(bridge, s)


def test_sigterm_under_load(tmp_path, artifacts) -> None:
    grace = 15.0  # generous: four requests share two cores with whatever else runs
    repo = make_repository(tmp_path / "repo", artifacts, [FUZZ_MODEL, SLOW_MODEL])
    with start_bridge(repo, "--grace-period-s", str(grace)) as b:
        channel = b.channel()
        s = stub(channel)
        wait_ready(s)
        half_second = iters_for(s, 0.5)
        admitted = admission_counts(b, SLOW_MODEL)["admitted"]
        futs = [s.ModelInfer.future(slow_request(half_second, f"a{i}"), timeout=60)
                for i in range(4)]
        wait_admitted(b, SLOW_MODEL, admitted, 4)  # all four accepted and running
        t0 = time.monotonic()
        os.kill(b.pid, signal.SIGTERM)
        time.sleep(0.2)
        refused = None
        try:
            stub(grpc.insecure_channel(b.address)).ModelInfer(fuzzy_request(), timeout=5)
        except grpc.RpcError as exc:
            refused = exc.code().name
        completed = [f.result(60).id for f in futs]
        b.proc.wait(grace + 10)
        exit_s = time.monotonic() - t0
        channel.close()
    print(f"\nfaults: SIGTERM with 4 accepted requests: completed {len(completed)}/4, new request "
          f"-> {refused}, exit code {b.proc.returncode} after {exit_s:.2f} s (grace {grace} s)")
    assert sorted(completed) == [f"a{i}" for i in range(4)]
    assert refused == "UNAVAILABLE"
    assert b.proc.returncode == 0
    assert exit_s < grace + 5
