"""Faults on a live bridge: callers that cancel or vanish mid-request and mid-stream, models
that fail to load next to healthy ones, unload while requests are in flight, and SIGTERM under
load. After each, the server still answers.

"In flight" never depends on how long a model computes: those requests are held at the
bridge's test gate (`support.gate`) until the test releases them."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from bridge_launch import start_bridge
from broken import BROKEN, GOOD, REFUSAL_WORD
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from live import (
    fuzzy_request,
    make_repository,
    slow_request,
    stub,
    wait_ready,
)
from rel_models import FUZZ_MODEL, SLOW_MODEL
from support.gate import Gate

# What a request to a model that is not (or no longer) loaded may answer.
GONE_MODEL = {"UNAVAILABLE", "NOT_FOUND"}


@pytest.fixture(scope="module")
def live(bridge, gate):
    channel = bridge.channel()
    s = stub(channel)
    wait_ready(s)
    yield bridge, s, gate
    channel.close()


def _still_serves(bridge, s) -> None:
    assert bridge.alive()
    assert s.ModelInfer(fuzzy_request(request_id="alive"), timeout=60).id == "alive"
    assert s.ModelInfer(slow_request(10, "slow-alive"), timeout=60).id == "slow-alive"


def test_client_cancels_mid_request(live) -> None:
    bridge, s, gate = live
    with gate.holding(SLOW_MODEL):
        futures = [s.ModelInfer.future(slow_request(10, f"c{i}"), timeout=300) for i in range(3)]
        gate.wait_held(SLOW_MODEL, 3, calls=futures)  # executing (the default allows 4 at once)
        cancelled = sum(f.cancel() for f in futures)
        # A channel closed with calls in flight is a client that vanished without a word.
        ch = bridge.channel()
        vanish = stub(ch).ModelInfer.future(slow_request(10, "vanish"), timeout=300)
        gate.wait_held(SLOW_MODEL, 4, calls=[vanish])
        ch.close()
    print(f"\nfaults: cancelled {cancelled} executing requests, closed a channel mid-request")
    assert cancelled == 3
    _still_serves(bridge, s)


def test_client_cancels_mid_stream(live) -> None:
    bridge, s, gate = live
    stop = threading.Event()

    def requests():
        yield fuzzy_request(request_id="s0")
        yield slow_request(10, "s1")
        stop.wait(300)  # keep the stream open, as a client that stalls would

    with gate.holding(SLOW_MODEL):
        call = s.ModelStreamInfer(requests(), timeout=600)
        first = next(call)
        assert first.infer_response.id == "s0", first.error_message
        gate.wait_held(SLOW_MODEL, 1)  # s1 is executing
        call.cancel()
        stop.set()
        with pytest.raises(grpc.RpcError) as info:
            for _ in call:
                pass
    assert info.value.code() == grpc.StatusCode.CANCELLED
    # A fresh stream on the same server still works end to end.
    again = list(s.ModelStreamInfer(iter([fuzzy_request(request_id=f"t{i}")
                                          for i in range(3)]), timeout=60))
    assert [r.infer_response.id for r in again] == ["t0", "t1", "t2"]
    print("\nfaults: stream cancelled while its 2nd request executed; a new stream answered 3/3")
    _still_serves(bridge, s)


def _tensor_type(arg: dict) -> str:
    return "tensor<" + "".join(f"{d}x" for d in arg["shape"]) + arg["dtype"]["mlir"] + ">"


def _edited_manifest_reason(hostile_repo, artifacts) -> str:
    """The one line a manifest whose input shape was edited is refused with: the argument, the
    manifest's type and the one @main of the (untouched) program takes."""
    def first_input(manifest: Path) -> tuple[int, dict]:
        args = json.loads(manifest.read_text())["programs"][0]["arguments"]
        return next((i, a) for i, a in enumerate(args) if a["role"] == "ARGUMENT_ROLE_INPUT")

    i, edited = first_input(hostile_repo.root / "tampered_manifest" / "1" / "manifest.json")
    _, original = first_input(artifacts["fuzzy"] / "manifest.json")
    return (f"model 'tampered_manifest' failed to load: version 1: manifest.json: "
            f"tampered_manifest/1/manifest.json: programs[0].arguments[{i}] "
            f"('{edited['name']}'): shape differs from the program's: the manifest says "
            f"{_tensor_type(edited)}, @main of model.mlirbc takes {_tensor_type(original)} "
            f"(was the manifest edited?)")


def test_broken_models_fail_alone_with_a_reason(live, hostile_repo, artifacts) -> None:
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
        if name == "tampered_manifest":  # refused at load, before anything compiles or runs it
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, details
            assert details == _edited_manifest_reason(hostile_repo, artifacts)
    print("\nfaults: broken models refused while others serve:\n  " + "\n  ".join(lines))
    _still_serves(bridge, s)


def test_unload_during_inflight_requests(live) -> None:
    bridge, s, gate = live
    with ThreadPoolExecutor(6) as pool:
        with gate.holding(SLOW_MODEL):
            futs = [pool.submit(s.ModelInfer, slow_request(10, f"u{i}"), timeout=300)
                    for i in range(6)]
            # 4 executing (the default slots per model), held; the other 2 are not executing.
            gate.wait_held(SLOW_MODEL, 4, calls=futs)
            s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=SLOW_MODEL),
                                    timeout=60)
        outcomes: Counter[str] = Counter()
        for f in futs:
            try:
                f.result(120)
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
                assert code in GONE_MODEL | {"CANCELLED", "ABORTED"}, exc
                assert SLOW_MODEL in exc.details(), exc.details()
            outcomes[code] += 1
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(slow_request(10), timeout=60)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == (f"model '{SLOW_MODEL}' has no ready version "
                                    "(version 1 is UNAVAILABLE: unloaded)")
    s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=SLOW_MODEL), timeout=120)
    assert s.ModelInfer(slow_request(10, "back"), timeout=60).id == "back"
    print(f"\nfaults: unload with 6 requests in flight (4 executing) -> {dict(outcomes)}; after "
          f"unload {info.value.code().name}; reloaded and served")
    # Requests already executing finish on their copy of the model.
    assert outcomes["OK"] >= 4
    _still_serves(bridge, s)


def test_reload_during_inflight_requests(live) -> None:
    """RepositoryModelLoad of a served model replaces its version at once, with requests still
    executing on the old copy: they finish there, the new copy serves what comes next."""
    bridge, s, gate = live
    with ThreadPoolExecutor(2) as pool:
        with gate.holding(SLOW_MODEL):
            futs = [pool.submit(s.ModelInfer, slow_request(10, f"r{i}"), timeout=300)
                    for i in range(2)]
            gate.wait_held(SLOW_MODEL, 2, calls=futs)
            s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=SLOW_MODEL), timeout=120)
            assert s.ModelReady(pb.ModelReadyRequest(name=SLOW_MODEL), timeout=10).ready
            assert gate.held(SLOW_MODEL) == 2  # the reload did not wait for them
        assert sorted(f.result(120).id for f in futs) == ["r0", "r1"]
    assert s.ModelInfer(slow_request(10, "after"), timeout=60).id == "after"
    _still_serves(bridge, s)


def test_sigterm_under_load(tmp_path, artifacts) -> None:
    repo = make_repository(tmp_path / "repo", artifacts, [FUZZ_MODEL, SLOW_MODEL])
    gate = Gate(tmp_path / "gate")
    # The grace period only has to outlast the test's own steps: the held requests finish as
    # soon as the test releases them.
    grace = 120.0
    with start_bridge(repo, "--grace-period-s", str(grace), env=gate.env) as b:
        channel = b.channel()
        s = stub(channel)
        wait_ready(s)
        with gate.holding(SLOW_MODEL):
            futs = [s.ModelInfer.future(slow_request(10, f"a{i}"), timeout=300)
                    for i in range(4)]
            gate.wait_held(SLOW_MODEL, 4, calls=futs)  # all four accepted and executing
            os.kill(b.pid, signal.SIGTERM)
            _wait_for_log(b, "draining")
            refused = None
            try:
                stub(grpc.insecure_channel(b.address)).ModelInfer(fuzzy_request(), timeout=60)
            except grpc.RpcError as exc:
                refused = exc.code().name
            assert b.alive() and not any(f.done() for f in futs)  # draining, still held
        completed = [f.result(120).id for f in futs]
        b.proc.wait(grace + 60)
        channel.close()
    print(f"\nfaults: SIGTERM with 4 executing requests: completed {len(completed)}/4, new "
          f"request while draining -> {refused}, exit code {b.proc.returncode}")
    assert sorted(completed) == [f"a{i}" for i in range(4)]
    assert refused == "UNAVAILABLE"
    assert b.proc.returncode == 0


def _wait_for_log(bridge, msg: str, timeout: float = 60.0) -> None:
    """Block until the bridge has logged a record whose `msg` is `msg`."""
    end = time.monotonic() + timeout
    while not any(r.get("msg") == msg for r in bridge.log_records()):
        assert time.monotonic() < end, f"the bridge did not log {msg!r} in {timeout:.0f} s"
        time.sleep(0.02)
