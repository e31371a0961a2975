"""What hostile traffic meets inside a process, in process (issue 18): what callers can cause at
any rate (undecodable messages, callers that leave) is logged through `Throttled`, at most one
record per interval per key, counting what it left out; the heap trimmer hands freed heap back
only after traffic. (Live: tests/reliability's fuzz campaign and drain tests, and the worker's
frames in tests/front/test_worker.py.)"""

from __future__ import annotations

import logging
import threading

from jaxport.bridge.logs import Throttled


def test_throttled_logs_once_per_interval_and_counts_what_it_left_out(caplog):
    now = [0.0]
    throttled = Throttled(logging.getLogger("t.throttle"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="t.throttle"):
        assert throttled.log(logging.WARNING, "k", "hostile", {"a": 1})
        assert not throttled.log(logging.WARNING, "k", "hostile", {"a": 2})
        assert not throttled.log(logging.WARNING, "k", "hostile", {"a": 3})
        assert throttled.log(logging.WARNING, "other", "hostile", {})
        now[0] = 10.0
        assert throttled.log(logging.WARNING, "k", "hostile", {"a": 4})
    assert [(r.fields.get("a"), r.fields["suppressed"]) for r in caplog.records] == [
        (1, 0), (None, 0), (4, 2)]


def test_the_heap_trimmer_trims_only_after_traffic():
    from jaxport.bridge.core import HeapTrimmer

    finished = [0]
    trims: list[int] = []
    trimmed = threading.Event()
    trimmer = HeapTrimmer(lambda: finished[0], interval_s=0.01)

    def trim(pad: int) -> int:
        trims.append(finished[0])
        trimmed.set()
        return 1

    trimmer._trim = trim  # the real malloc_trim works too; this one reports each call
    assert trimmer.start()
    try:
        finished[0] = 5  # RPCs finished since the trimmer looked
        assert trimmed.wait(30)
    finally:
        trimmer.stop()
    assert trims and set(trims) == {5}
