"""Admission control: bounded concurrency per model, bounded waiting, deadlines honoured.

Each model gets `max_inflight` execution slots and a FIFO waiting line of at most `max_queue`
requests. A request that finds both full is shed at once with `Overloaded`
(RESOURCE_EXHAUSTED): the bridge never queues without bound, so a burst above capacity costs
the excess callers a fast, retryable error instead of costing everyone memory and latency.

A request is never executed for a caller that can no longer use the answer: if its deadline
passes while it waits (or before it gets here) it fails with `DeadlineExpired`
(DEADLINE_EXCEEDED); if the caller cancels or disconnects while it waits it fails with
`CallerGone` (CANCELLED). Both are checked again right before the slot is handed to the caller.
Work already running is not interrupted (a compiled XLA call cannot be), so `max_inflight`
bounds that waste.

No grpc import: the servicer passes plain callables (`context.is_active`) and absolute
monotonic deadlines; the exceptions are `jaxport.protocol.errors.ProtocolError`s carrying
their status name in `code` for the one status table (`jaxport.bridge.status`). (The message
size limit is the front's, `--max-message-bytes`.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jaxport.protocol.errors import (
    DeadlineExceededError,
    ProtocolError,
    ResourceExhaustedError,
)

__all__ = [
    "DEFAULT_MAX_INFLIGHT_PER_MODEL",
    "DEFAULT_MAX_QUEUE_PER_MODEL",
    "OUTCOMES",
    "AdmissionController",
    "AdmissionError",
    "CallerGone",
    "DeadlineExpired",
    "ModelLoad",
    "Overloaded",
    "deadline_from_remaining",
]

log = logging.getLogger(__name__)

# Two cores run one XLA call each well; a few more overlap host-side conversion with compute.
DEFAULT_MAX_INFLIGHT_PER_MODEL = 4
# Enough to absorb a 64-client burst per model without shedding, small enough to bound memory.
DEFAULT_MAX_QUEUE_PER_MODEL = 64

# Outcome labels reported to the `on_outcome` hook (metrics) and counted in `totals()`.
OUTCOMES = ("admitted", "shed", "expired", "cancelled")


class AdmissionError(ProtocolError):
    """A request refused before execution; `code` is the gRPC status name it maps to."""

    code = "UNAVAILABLE"


class Overloaded(AdmissionError, ResourceExhaustedError):
    """All slots and the waiting line of the model are full: retry later, with backoff."""

    code = "RESOURCE_EXHAUSTED"


class DeadlineExpired(AdmissionError, DeadlineExceededError):
    """The caller's deadline passed before the request could start; it was not executed."""

    code = "DEADLINE_EXCEEDED"


class CallerGone(AdmissionError):
    """The caller cancelled or disconnected before the request started; it was not executed."""

    code = "CANCELLED"


@dataclass(frozen=True)
class ModelLoad:
    """Current load of one model: requests executing and requests waiting."""

    inflight: int
    queued: int


def deadline_from_remaining(
    remaining: float | None, clock: Callable[[], float] = time.monotonic
) -> float | None:
    """Absolute monotonic deadline from gRPC's `context.time_remaining()` (None: no deadline)."""
    return None if remaining is None else clock() + remaining


class _Waiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False


class _Gate:
    __slots__ = ("inflight", "waiters")

    def __init__(self) -> None:
        self.inflight = 0
        self.waiters: deque[_Waiter] = deque()


class AdmissionController:
    """Per-model slots plus a bounded FIFO line; see the module docstring for the contract.

    Call `admit()` only with a model key that has been resolved to a loaded model (so callers
    cannot grow internal state with invented names); idle models hold no state at all.
    """

    def __init__(
        self,
        max_inflight: int = DEFAULT_MAX_INFLIGHT_PER_MODEL,
        max_queue: int = DEFAULT_MAX_QUEUE_PER_MODEL,
        *,
        poll_interval: float = 0.05,
        on_outcome: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_inflight < 1:
            raise ValueError(f"max in-flight requests per model must be >= 1, got {max_inflight}")
        if max_queue < 0:
            raise ValueError(f"max queued requests per model must be >= 0, got {max_queue}")
        self.max_inflight = max_inflight
        self.max_queue = max_queue
        self._poll = poll_interval
        self._on_outcome = on_outcome
        self._clock = clock
        self._lock = threading.Lock()
        self._gates: dict[str, _Gate] = {}
        self._totals = dict.fromkeys(OUTCOMES, 0)

    def load(self, model: str) -> ModelLoad:
        """Requests executing and waiting for `model` right now."""
        with self._lock:
            gate = self._gates.get(model)
            return ModelLoad(gate.inflight, len(gate.waiters)) if gate else ModelLoad(0, 0)

    def totals(self) -> dict[str, int]:
        """Cumulative count of each outcome over all models since start."""
        with self._lock:
            return dict(self._totals)

    @contextmanager
    def admit(
        self,
        model: str,
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] | None = None,
    ) -> Iterator[None]:
        """Hold one execution slot of `model` for the body, or raise an `AdmissionError`.

        deadline: absolute time on this controller's clock (see `deadline_from_remaining`).
        is_active: returns False once the caller has cancelled or disconnected.
        """
        self._acquire(model, deadline, is_active)
        try:
            yield
        finally:
            self._release(model)

    def acquire(
        self,
        model: str,
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] | None = None,
    ) -> None:
        """`admit` without the context manager (the per-request path): take one slot of
        `model` or raise an `AdmissionError`; every successful call needs one `release`."""
        self._acquire(model, deadline, is_active)

    def release(self, model: str) -> None:
        """Give back the slot an `acquire` took."""
        self._release(model)

    def _count(self, model: str, outcome: str) -> None:
        # Called with the lock held; the hook must be cheap and must not call back in.
        self._totals[outcome] += 1
        if self._on_outcome is not None:
            try:
                self._on_outcome(model, outcome)
            except Exception:  # a metrics failure must never fail a request
                log.exception("admission outcome hook failed")

    def _refusal(self, model: str, deadline: float | None, is_active: Callable[[], bool] | None):
        """The error to raise if the caller can no longer use an answer, else None."""
        if deadline is not None and self._clock() >= deadline:
            return "expired", DeadlineExpired(
                f"deadline exceeded before model {model!r} could run the request; not executed"
            )
        if is_active is not None and not is_active():
            return "cancelled", CallerGone(
                f"caller went away before model {model!r} ran the request; not executed"
            )
        return None

    def _acquire(
        self, model: str, deadline: float | None, is_active: Callable[[], bool] | None
    ) -> None:
        refusal = self._refusal(model, deadline, is_active)
        with self._lock:
            if refusal is not None:
                self._count(model, refusal[0])
                log.info("request not executed: model=%s outcome=%s", model, refusal[0])
                raise refusal[1]
            gate = self._gates.setdefault(model, _Gate())
            if gate.inflight < self.max_inflight and not gate.waiters:
                gate.inflight += 1
                self._count(model, "admitted")
                return
            if len(gate.waiters) >= self.max_queue:
                self._count(model, "shed")
                if not gate.inflight and not gate.waiters:
                    del self._gates[model]
                raise Overloaded(
                    f"model {model!r} is at capacity ({self.max_inflight} running, "
                    f"{self.max_queue} waiting); retry later with backoff"
                )
            waiter = _Waiter()
            gate.waiters.append(waiter)
        self._wait(model, waiter, deadline, is_active)

    def _wait(
        self,
        model: str,
        waiter: _Waiter,
        deadline: float | None,
        is_active: Callable[[], bool] | None,
    ) -> None:
        while True:
            timeout = self._poll
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - self._clock()))
            waiter.event.wait(timeout)
            refusal = None if waiter.event.is_set() else self._refusal(model, deadline, is_active)
            with self._lock:
                if waiter.granted:
                    break
                if refusal is None:
                    continue
                gate = self._gates[model]
                gate.waiters.remove(waiter)
                if not gate.inflight and not gate.waiters:
                    del self._gates[model]
                self._count(model, refusal[0])
            log.info("request not executed: model=%s outcome=%s (while queued)", model, refusal[0])
            raise refusal[1]
        # The slot is ours; a caller that is gone or late by now still must not run.
        refusal = self._refusal(model, deadline, is_active)
        with self._lock:
            if refusal is None:
                self._count(model, "admitted")
                return
            self._count(model, refusal[0])
        self._release(model)
        log.info("request not executed: model=%s outcome=%s (at start)", model, refusal[0])
        raise refusal[1]

    def _release(self, model: str) -> None:
        with self._lock:
            gate = self._gates[model]
            if gate.waiters:
                # Hand the slot straight to the oldest waiter: FIFO, and no thundering herd.
                waiter = gate.waiters.popleft()
                waiter.granted = True
                waiter.event.set()
                return
            gate.inflight -= 1
            if not gate.inflight:
                del self._gates[model]
