"""Admission control and message limits on a live `jaxport serve` with tiny limits
(1 execution slot and a line of 2 per model version, 1 MiB messages). The front admits every
call, whichever engine executes it (docs/front.md): there is no other queue a call can wait in.

- a burst above capacity is shed at once with RESOURCE_EXHAUSTED, the admitted ones complete;
- a message over the size limit gets RESOURCE_EXHAUSTED;
- a request whose deadline passes while it waits gets DEADLINE_EXCEEDED and is NOT executed,
  and a caller that cancels while waiting is not executed either: ModelStatistics'
  execution_count does not move for them, and the bridge logs "request not executed".

Nothing here depends on how long anything takes: the request occupying the slot is held at the
bridge's test gate (`support.gate`) until the test releases it, and "waiting in the line" is
proven by the bridge shedding a probe sent after the waiters (it sheds only with a full line).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from bridge_launch import start_bridge
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from live import (
    admission_counts,
    execution_count,
    fuzzy_request,
    make_repository,
    slow_request,
    stub,
    wait_admission,
    wait_ready,
)
from rel_models import FUZZ_MODEL, SLOW_MODEL
from support.gate import Gate

MAX_MESSAGE = 1024 * 1024
MAX_QUEUE = 2
# A probe that finds room in the line (a waiter has not arrived yet) gives up after this long;
# only then can the bridge have admitted the waiter behind it (never a premise of a verdict).
PROBE_TIMEOUT_S = 30.0
# How the bridge counts a waiter it did not execute because its caller can no longer use it.
REFUSED = ("expired", "cancelled")


def _tight_bridge(tmp_path_factory, artifacts, *extra: str) -> Iterator:
    repo = make_repository(tmp_path_factory.mktemp("tight"), artifacts, [FUZZ_MODEL, SLOW_MODEL])
    gate = Gate(tmp_path_factory.mktemp("gate"))
    with start_bridge(
        repo,
        "--max-inflight-per-model", "1",
        "--max-queue-per-model", str(MAX_QUEUE),
        "--max-message-bytes", str(MAX_MESSAGE),
        *extra,
        env=gate.env,
    ) as b:
        channel = b.channel()
        s = stub(channel)
        wait_ready(s)
        yield b, s, gate
        channel.close()


@pytest.fixture(scope="module")
def tight(tmp_path_factory, artifacts):
    yield from _tight_bridge(tmp_path_factory, artifacts)


@contextlib.contextmanager
def _holding(s, gate: Gate, pool: ThreadPoolExecutor) -> Iterator[Future]:
    """A request that occupies the only slot of `slow`, provably executing (held at the gate)
    until the block ends; the block's value is its future."""
    with gate.holding(SLOW_MODEL):
        hold = pool.submit(s.ModelInfer, slow_request(10, "hold"), timeout=300)
        gate.wait_held(SLOW_MODEL, 1, calls=[hold])
        yield hold


def _is_shed(exc: grpc.RpcError) -> bool:
    """Refused by admission control because slot and line of `slow` are full."""
    return (exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            and f"'{SLOW_MODEL}" in exc.details() and "capacity" in exc.details())


def _line_up(b, s, requests: list[pb.ModelInferRequest]) -> list[grpc.Future]:
    """Send `requests` (no deadline, as many as the line holds) behind the held slot; return
    their calls once all provably wait in the line: a probe sent after them was shed (the
    bridge sheds only with a full line) and none of them has been answered."""
    assert len(requests) == MAX_QUEUE
    calls = [s.ModelInfer.future(r, timeout=300) for r in requests]
    for attempt in range(20):
        for i, call in enumerate(calls):
            if call.done():  # shed because a probe reached the line first: send it again
                exc = call.exception()
                assert exc is not None and _is_shed(exc), exc
                calls[i] = s.ModelInfer.future(requests[i], timeout=300)
        counts = admission_counts(b, SLOW_MODEL)
        try:
            s.ModelInfer(slow_request(10, f"probe{attempt}"), timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            if _is_shed(exc) and not any(c.done() for c in calls):
                return calls
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                # It waited in the line; wait until the bridge has dropped it from there.
                wait_admission(b, SLOW_MODEL, REFUSED, counts["expired"] + counts["cancelled"] + 1)
            else:
                assert _is_shed(exc), exc
            continue
        raise AssertionError("a probe was executed while the only slot was held")
    raise AssertionError(f"{[r.id for r in requests]} never all waited in the line")


def test_burst_above_capacity_is_shed_immediately(tight) -> None:
    b, s, gate = tight
    shed_before = admission_counts(b, SLOW_MODEL)["shed"]
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(2) as pool, _holding(s, gate, pool) as hold:
        waiting = _line_up(b, s, [slow_request(10, f"w{i}") for i in range(MAX_QUEUE)])
        # Slot and line are full, and stay full until the test releases the gate: each of the
        # 10 calls of the burst must be answered RESOURCE_EXHAUSTED now, while the request in
        # the slot is still held (a call parked for the slot would never be answered).
        for i in range(10):
            with pytest.raises(grpc.RpcError) as info:
                s.ModelInfer(slow_request(10, f"burst{i}"), timeout=120)
            assert _is_shed(info.value), info.value
            outcomes[info.value.code().name] += 1
        assert gate.held(SLOW_MODEL) == 1 and not hold.done()
        assert not any(w.done() for w in waiting)
        # Another model is not affected by this one being full.
        assert s.ModelInfer(fuzzy_request(), timeout=60).model_name == FUZZ_MODEL
    # Released: the held request and the two that waited complete.
    assert hold.result(120).id == "hold"
    assert [w.result(120).id for w in waiting] == ["w0", "w1"]
    outcomes["OK"] += len(waiting)
    shed = admission_counts(b, SLOW_MODEL)["shed"] - shed_before
    print(f"\nlimits(live): 1 running (held), 2 waiting, then a burst of 10 -> {dict(outcomes)}, "
          f"all shed while the slot was held ({shed:.0f} sheds counted, probes included)")
    assert outcomes == {"OK": 2, "RESOURCE_EXHAUSTED": 10}
    assert shed >= 10


def test_message_over_the_size_limit_is_resource_exhausted(tight) -> None:
    _b, s, _ = tight
    req = fuzzy_request()
    req.raw_input_contents[0] = np.zeros(2 * MAX_MESSAGE // 4, "<f4").tobytes()
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(req, timeout=60)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    print(f"\nlimits(live): {req.ByteSize()} byte message over the {MAX_MESSAGE} byte limit -> "
          f"{info.value.code().name}: {info.value.details()}")
    assert s.ModelInfer(fuzzy_request(), timeout=60).model_name == FUZZ_MODEL


def test_expired_and_cancelled_waiters_are_never_executed(tight) -> None:
    b, s, gate = tight
    before = execution_count(s, SLOW_MODEL)
    counts_before = admission_counts(b, SLOW_MODEL)
    log_mark = len(b.log_text())
    with ThreadPoolExecutor(2) as pool, _holding(s, gate, pool) as hold:
        # Its deadline passes while it waits behind the held request.
        with pytest.raises(grpc.RpcError) as info:
            s.ModelInfer(slow_request(10, "late"), timeout=1.0)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, info.value
        refused_before = counts_before["expired"] + counts_before["cancelled"]
        wait_admission(b, SLOW_MODEL, REFUSED, refused_before + 1)
        # Its caller cancels once it provably waits in the line.
        gone, kept = _line_up(b, s, [slow_request(10, "gone"), slow_request(10, "kept")])
        refused = sum(admission_counts(b, SLOW_MODEL)[o] for o in REFUSED)
        assert gone.cancel()
        wait_admission(b, SLOW_MODEL, REFUSED, refused + 1)
        assert gate.held(SLOW_MODEL) == 1 and not hold.done()
    assert hold.result(120).id == "hold"
    assert kept.result(120).id == "kept"
    after = execution_count(s, SLOW_MODEL)
    counts = admission_counts(b, SLOW_MODEL)
    not_executed = [ln for ln in b.log_text()[log_mark:].splitlines()
                    if "request not executed" in ln]
    print(f"\ndeadline(live): a 1 s deadline and a cancel behind a held request -> "
          f"DEADLINE_EXCEEDED, CANCELLED; executions {before} -> {after}; "
          f"admission {counts_before} -> {counts}; log: {not_executed}")
    assert after == before + 2, "only the held request and the one kept waiting may have run"
    # "late" is logged expired or cancelled (whichever the bridge noticed first), "gone"
    # cancelled; a probe that waited (see _line_up) would add a line of its own.
    assert len([ln for ln in not_executed if "model=slow" in ln]) >= 2, not_executed
    assert any("model=slow" in ln and "outcome=cancelled" in ln for ln in not_executed), \
        not_executed


def test_short_deadline_on_a_running_request_is_deadline_exceeded(tight) -> None:
    _b, s, gate = tight
    # The deadline must pass while the request executes (held); a request whose deadline
    # passed before it started is not executed at all, so then try again with a longer one.
    for deadline_s in (2.0, 10.0, 60.0):
        with gate.holding(SLOW_MODEL):
            call = s.ModelInfer.future(slow_request(10, "too-slow"), timeout=deadline_s)
            try:
                gate.wait_held(SLOW_MODEL, 1, calls=[call])
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED, exc
                continue
            with pytest.raises(grpc.RpcError) as info:
                call.result()
            still_held = gate.held(SLOW_MODEL)
        break
    else:
        raise AssertionError("the request never started executing within its deadline")
    print(f"\ndeadline(live): a {deadline_s:.0f} s deadline passing while the request executes "
          f"(held) -> {info.value.code().name}")
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert still_held == 1  # answered while the execution was still running
    # The execution finishes once released; the model serves again.
    assert s.ModelInfer(slow_request(10, "after"), timeout=120).id == "after"
