"""AdmissionController with real threads: bounded slots, bounded FIFO line, immediate shedding,
deadlines and vanished callers never executed. No server needed.

No verdict depends on how fast threads run: slots are held until the test releases them, and
waits for a condition have bounds far beyond anything a busy machine needs."""

from __future__ import annotations

import threading
import time

import pytest
from jaxport.bridge.limits import (
    AdmissionController,
    CallerGone,
    DeadlineExpired,
    ModelLoad,
    Overloaded,
    deadline_from_remaining,
)


class Worker(threading.Thread):
    """Admits into `model`, then holds the slot until `release` is set; records what happened."""

    def __init__(
        self, ctl, model="m", *, deadline=None, is_active=None, release=None, log=None, name=None
    ):
        super().__init__(daemon=True, name=name)
        self.ctl, self.model = ctl, model
        self.deadline, self.is_active = deadline, is_active
        self.release = release or threading.Event()
        self.log = log if log is not None else []
        self.started_at: float | None = None
        self.refused_at: float | None = None
        self.error: BaseException | None = None
        self.ran = threading.Event()

    def run(self) -> None:
        try:
            with self.ctl.admit(self.model, deadline=self.deadline, is_active=self.is_active):
                self.started_at = time.monotonic()
                self.log.append(self.name)
                self.ran.set()
                self.release.wait(300)
        except Exception as exc:  # recorded, asserted by the test
            self.refused_at = time.monotonic()
            self.error = exc


WAIT_S = 60.0  # bound of every wait for a thread; never reached unless something is broken


def wait_until(pred, timeout=WAIT_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def test_burst_above_capacity_is_shed_immediately_and_the_rest_complete():
    ctl = AdmissionController(max_inflight=2, max_queue=3)
    release = threading.Event()
    holders = [Worker(ctl, release=release) for _ in range(5)]
    for w in holders:
        w.start()
    assert wait_until(lambda: ctl.load("m") == ModelLoad(inflight=2, queued=3))
    shed = 0
    for _ in range(20):
        # The slots stay held until `release`: a call that waited for one would end
        # DeadlineExpired after WAIT_S; a shed one raises Overloaded now.
        with pytest.raises(Overloaded) as info:
            with ctl.admit("m", deadline=time.monotonic() + WAIT_S):
                pytest.fail("admitted above capacity")
        shed += 1
    assert "'m'" in str(info.value) and info.value.code == "RESOURCE_EXHAUSTED"
    assert ctl.load("m") == ModelLoad(inflight=2, queued=3)
    print(f"\nlimits: shed {shed} requests above capacity 2+3 while every slot was held")
    release.set()
    for w in holders:
        w.join(WAIT_S)
        assert w.error is None and w.ran.is_set()
    assert ctl.load("m") == ModelLoad(0, 0)
    assert ctl.totals() == {"admitted": 5, "shed": 20, "expired": 0, "cancelled": 0}


def test_concurrency_never_exceeds_the_slot_count_and_nothing_is_lost():
    ctl = AdmissionController(max_inflight=3, max_queue=1000, poll_interval=0.01)
    lock = threading.Lock()
    running = peak = done = 0

    def job():
        nonlocal running, peak, done
        with ctl.admit("m"):
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.002)
            with lock:
                running -= 1
                done += 1

    threads = [threading.Thread(target=job) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    print(f"\nlimits: 200 jobs through 3 slots, peak concurrency {peak}, completed {done}")
    assert peak <= 3 and done == 200
    assert ctl.totals()["admitted"] == 200 and ctl.load("m") == ModelLoad(0, 0)


def test_waiting_line_is_fifo():
    ctl = AdmissionController(max_inflight=1, max_queue=10)
    order: list[str] = []
    first = Worker(ctl, log=order, name="w0")
    first.start()
    assert first.ran.wait(WAIT_S)
    waiters = []
    for i in range(1, 6):
        w = Worker(ctl, log=order, name=f"w{i}")
        w.release.set()
        w.start()
        assert wait_until(lambda i=i: ctl.load("m").queued == i)
        waiters.append(w)
    first.release.set()
    for w in [first, *waiters]:
        w.join(WAIT_S)
    assert order == [f"w{i}" for i in range(6)]


def test_models_are_limited_independently():
    ctl = AdmissionController(max_inflight=1, max_queue=0)
    hold = Worker(ctl, model="a")
    hold.start()
    assert hold.ran.wait(WAIT_S)
    with pytest.raises(Overloaded, match="'a'"):
        with ctl.admit("a"):
            pass
    with ctl.admit("b"):
        assert ctl.load("b") == ModelLoad(1, 0)
    hold.release.set()
    hold.join(WAIT_S)


def test_deadline_passing_in_the_queue_means_the_work_is_never_run():
    ctl = AdmissionController(max_inflight=1, max_queue=4, poll_interval=0.01)
    hold = Worker(ctl)
    hold.start()
    assert hold.ran.wait(WAIT_S)
    late = Worker(ctl, deadline=deadline_from_remaining(0.15))
    late.release.set()
    late.start()
    late.join(WAIT_S)
    assert isinstance(late.error, DeadlineExpired) and late.error.code == "DEADLINE_EXCEEDED"
    print(f"\nlimits: queued request with a 150 ms deadline refused "
          f"{(late.refused_at - late.deadline) * 1e3:.0f} ms after it")
    assert not late.ran.is_set()
    assert late.refused_at >= late.deadline  # not before its deadline (slot held meanwhile)
    assert ctl.load("m") == ModelLoad(1, 0)  # the line is clean again
    hold.release.set()
    hold.join(WAIT_S)
    assert ctl.totals() == {"admitted": 1, "shed": 0, "expired": 1, "cancelled": 0}


def test_already_expired_deadline_is_refused_without_touching_the_model():
    ctl = AdmissionController(max_inflight=1, max_queue=1)
    with pytest.raises(DeadlineExpired, match="not executed"):
        with ctl.admit("m", deadline=time.monotonic() - 0.001):
            pytest.fail("ran past its deadline")
    assert ctl.load("m") == ModelLoad(0, 0)


def test_caller_that_goes_away_while_queued_is_never_run():
    ctl = AdmissionController(max_inflight=1, max_queue=4, poll_interval=0.01)
    hold = Worker(ctl)
    hold.start()
    assert hold.ran.wait(WAIT_S)
    alive = threading.Event()
    alive.set()
    gone = Worker(ctl, is_active=alive.is_set)
    gone.release.set()
    gone.start()
    assert wait_until(lambda: ctl.load("m").queued == 1)
    alive.clear()
    gone.join(WAIT_S)
    assert isinstance(gone.error, CallerGone) and gone.error.code == "CANCELLED"
    assert not gone.ran.is_set()
    hold.release.set()
    hold.join(WAIT_S)
    assert ctl.totals()["cancelled"] == 1 and ctl.load("m") == ModelLoad(0, 0)


def test_caller_gone_at_handover_passes_the_slot_on():
    """The slot given to a dead waiter goes to the next one; nothing leaks."""
    # A poll interval no test run reaches: only the handover check can notice.
    ctl = AdmissionController(max_inflight=1, max_queue=4, poll_interval=3600.0)
    hold = Worker(ctl)
    hold.start()
    assert hold.ran.wait(WAIT_S)
    alive = threading.Event()
    alive.set()
    doomed = Worker(ctl, is_active=alive.is_set)
    doomed.release.set()
    doomed.start()
    assert wait_until(lambda: ctl.load("m").queued == 1)
    nxt = Worker(ctl)
    nxt.release.set()
    nxt.start()
    assert wait_until(lambda: ctl.load("m").queued == 2)
    alive.clear()
    hold.release.set()
    for w in (hold, doomed, nxt):
        w.join(WAIT_S)
    assert isinstance(doomed.error, CallerGone) and not doomed.ran.is_set()
    assert nxt.error is None and nxt.ran.is_set()
    assert ctl.load("m") == ModelLoad(0, 0)


def test_outcome_hook_sees_every_decision_and_its_failure_is_harmless():
    seen: list[tuple[str, str]] = []

    def hook(model: str, outcome: str) -> None:
        seen.append((model, outcome))
        raise RuntimeError("metrics backend down")

    ctl = AdmissionController(max_inflight=1, max_queue=0, on_outcome=hook)
    with ctl.admit("m"):
        with pytest.raises(Overloaded):
            with ctl.admit("m"):
                pass
    assert seen == [("m", "admitted"), ("m", "shed")]


@pytest.mark.parametrize(("inflight", "queue"), [(0, 1), (-1, 0), (1, -1)])
def test_nonsense_limits_are_refused(inflight, queue):
    with pytest.raises(ValueError, match="per model must be"):
        AdmissionController(inflight, queue)

