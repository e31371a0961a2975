"""Admission control and message limits on a live bridge with tiny limits
(1 execution slot and a line of 2 per model, 4 worker threads, 1 MiB messages).

- a burst above capacity is shed at once with RESOURCE_EXHAUSTED, the admitted ones complete;
- a message over the size limit gets RESOURCE_EXHAUSTED;
- a call beyond the worker threads is refused at once (RESOURCE_EXHAUSTED), not parked;
- a request whose deadline passes while it waits gets DEADLINE_EXCEEDED and is NOT executed,
  and a caller that cancels while waiting is not executed either: ModelStatistics'
  execution_count does not move for them, and the bridge logs "request not executed".
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from bridge_launch import start_bridge
from live import (
    admission_counts,
    execution_count,
    fuzzy_request,
    iters_for,
    make_repository,
    slow_request,
    stub,
    wait_ready,
)
from rel_models import FUZZ_MODEL, SLOW_MODEL

MAX_MESSAGE = 1024 * 1024
WORKERS = 4  # = 1 running + 2 waiting + 1 spare for the call being shed
HOLD_S = 2.0


@pytest.fixture(scope="module")
def tight(tmp_path_factory, artifacts):
    repo = make_repository(tmp_path_factory.mktemp("tight"), artifacts, [FUZZ_MODEL, SLOW_MODEL])
    with start_bridge(
        repo,
        "--max-inflight-per-model", "1",
        "--max-queue-per-model", "2",
        "--worker-threads", str(WORKERS),
        "--max-message-bytes", str(MAX_MESSAGE),
    ) as b:
        channel = b.channel()
        s = stub(channel)
        wait_ready(s)
        hold_iters = iters_for(s, HOLD_S)
        yield b, s, hold_iters
        channel.close()


def _holding(b, s, pool: ThreadPoolExecutor, iters: int):
    """Start a request that occupies the only slot of `slow` and wait until it has it."""
    admitted = admission_counts(b, SLOW_MODEL)["admitted"]
    fut = pool.submit(s.ModelInfer, slow_request(iters, "hold"), timeout=60)
    end = time.monotonic() + 30
    while admission_counts(b, SLOW_MODEL)["admitted"] == admitted:
        assert time.monotonic() < end, "the holding request was never admitted"
        time.sleep(0.02)
    return fut


def test_burst_above_capacity_is_shed_immediately(tight) -> None:
    b, s, hold_iters = tight
    with ThreadPoolExecutor(8) as pool:
        hold = _holding(b, s, pool, hold_iters)
        t_burst = time.perf_counter()
        # 12 more while the slot is held: whichever 2 arrive first wait, the other 10 are shed.
        waiting = [s.ModelInfer.future(slow_request(10, f"w{i}"), timeout=60) for i in range(2)]
        outcomes: dict[str, int] = {}
        latencies = []
        for i in range(10):
            t0 = time.perf_counter()
            try:
                s.ModelInfer(slow_request(10, f"burst{i}"), timeout=30)
                outcomes["OK"] = outcomes.get("OK", 0) + 1
            except grpc.RpcError as exc:
                latencies.append(time.perf_counter() - t0)
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert "'slow" in exc.details() and "capacity" in exc.details(), exc.details()
                outcomes["RESOURCE_EXHAUSTED"] = outcomes.get("RESOURCE_EXHAUSTED", 0) + 1
        burst_s = time.perf_counter() - t_burst
        assert not hold.done(), "premise broken: the holding request ended before the burst"
        for f in waiting:
            try:
                f.result(60)
                outcomes["OK"] = outcomes.get("OK", 0) + 1
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                outcomes["RESOURCE_EXHAUSTED"] = outcomes.get("RESOURCE_EXHAUSTED", 0) + 1
        # Another model is not affected by this one being full.
        assert s.ModelInfer(fuzzy_request(), timeout=10).model_name == FUZZ_MODEL
        assert hold.result(60).id == "hold"
    print(f"\nlimits(live): 1 running, then 12 more -> {outcomes}; max shed latency "
          f"{max(latencies) * 1e3:.1f} ms (hold {HOLD_S:.0f} s; 10 sequential calls took "
          f"{burst_s:.2f} s)")
    assert outcomes == {"OK": 2, "RESOURCE_EXHAUSTED": 10}
    assert max(latencies) < HOLD_S / 2  # shed at once, not after waiting for the slot


def test_message_over_the_size_limit_is_resource_exhausted(tight) -> None:
    _b, s, _ = tight
    req = fuzzy_request()
    req.raw_input_contents[0] = np.zeros(2 * MAX_MESSAGE // 4, "<f4").tobytes()
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(req, timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    print(f"\nlimits(live): {req.ByteSize()} byte message over the {MAX_MESSAGE} byte limit -> "
          f"{info.value.code().name}: {info.value.details()}")
    assert s.ModelInfer(fuzzy_request(), timeout=10).model_name == FUZZ_MODEL


def test_expired_and_cancelled_waiters_are_never_executed(tight) -> None:
    b, s, hold_iters = tight
    before = execution_count(s, SLOW_MODEL)
    refused_before = admission_counts(b, SLOW_MODEL)
    log_mark = len(b.log_text())
    with ThreadPoolExecutor(8) as pool:
        hold = _holding(b, s, pool, hold_iters)
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            s.ModelInfer(slow_request(10, "late"), timeout=0.3)
        waited = time.perf_counter() - t0
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        gone = s.ModelInfer.future(slow_request(10, "gone"), timeout=30)
        time.sleep(0.2)
        gone.cancel()
        assert hold.result(60).id == "hold"
    time.sleep(0.5)
    after = execution_count(s, SLOW_MODEL)
    refused = admission_counts(b, SLOW_MODEL)
    log = b.log_text()[log_mark:]
    not_executed = [ln for ln in log.splitlines() if "request not executed" in ln]
    print(f"\ndeadline(live): 0.3 s deadline behind a {HOLD_S:.0f} s request -> "
          f"DEADLINE_EXCEEDED after {waited:.2f} s; executions {before} -> {after}; "
          f"admission metric {refused_before} -> {refused}; log: {not_executed}")
    assert after == before + 1, "only the holding request may have run"
    assert len(not_executed) == 2 and all("model=slow" in ln for ln in not_executed)
    assert refused["expired"] + refused["cancelled"] == (
        refused_before["expired"] + refused_before["cancelled"] + 2
    )


def test_short_deadline_on_a_slow_request_is_deadline_exceeded(tight) -> None:
    _b, s, hold_iters = tight
    t0 = time.perf_counter()
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(slow_request(hold_iters, "too-slow"), timeout=0.3)
    print(f"\ndeadline(live): {HOLD_S:.0f} s of work with a 0.3 s deadline -> "
          f"{info.value.code().name} after {time.perf_counter() - t0:.2f} s")
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(HOLD_S + 0.5)  # the running XLA call finishes; the model serves again
    assert s.ModelInfer(slow_request(10, "after"), timeout=30).id == "after"



def test_more_calls_than_worker_threads_are_refused_not_parked(tight) -> None:
    """RPCs beyond --worker-threads must not wait in an executor queue admission cannot see."""
    _b, s, _ = tight
    release = threading.Event()

    def one_then_idle(k: int):
        yield fuzzy_request(request_id=f"stream{k}")
        release.wait(30)  # an open stream holds its worker without asking for a model slot

    streams = [s.ModelStreamInfer(one_then_idle(k), timeout=60) for k in range(WORKERS)]
    try:
        for k, st in enumerate(streams):  # each answered once: its handler holds a worker
            assert next(st).infer_response.id == f"stream{k}"
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as info:
            s.ModelInfer(fuzzy_request(), timeout=30)
        waited = time.perf_counter() - t0
    finally:
        release.set()
    assert all(list(st) == [] for st in streams)
    print(f"\nlimits(live): {WORKERS} workers busy -> another call {info.value.code().name} "
          f"after {waited * 1e3:.1f} ms: {info.value.details()}")
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert waited < 5.0
    assert s.ModelInfer(fuzzy_request(request_id="after"), timeout=10).id == "after"
