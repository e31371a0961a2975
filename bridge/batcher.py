"""Dynamic batching onto fixed-shape programs (model core: no grpc import).

A model exported with `--batch-sizes 1,8,32` has one fixed-shape program per batch size. The
batcher gathers concurrent requests (each a dict of arrays sharing a leading batch dimension
b_i), concatenates their rows, pads up to the smallest exported batch size that fits, runs the
program once through `execute(batch_size, inputs) -> outputs` and hands each request its own
rows back. Rules it keeps:

- Padding never leaks: padding rows are copies of the last real row (so a row-wise runtime
  check trips on padding only if it trips on a real row) and are dropped from every output.
- A request larger than the largest exported program is REJECTED (INVALID_ARGUMENT), never
  split: the model's ModelConfig advertises `max_batch_size` = the largest exported size, as
  Triton does, and a split request could be half-executed when a check trips.
- Per-request errors stay per-request. `row_errors(outputs, batch_size)` (optional) returns
  one exception-or-None per row of the padded batch (e.g. a per-row checkify evaluation); a
  request fails with the first error among its own rows. When `execute` itself raises for a
  batch holding several requests, each request is re-run alone so a failure caused by one
  request's rows reaches only that request.
- The queue is bounded (`max_queue_size` requests); a full queue rejects with UNAVAILABLE.
- A request whose deadline passed while it was queued is answered DEADLINE_EXCEEDED and never
  executed (its rows do not take space in a batch).

Completion handles are `concurrent.futures.Future`s resolving to a dict of output arrays, so
a thread-per-RPC server calls `.result()` and an asyncio server wraps them with
`asyncio.wrap_future`.

Lifetime: when `execute` is a bound method (e.g. `Model.execute_batch`) the batcher holds it
weakly, so dropping the model (unload/reload) lets its weights go; the idle worker notices
within `IDLE_POLL_S` and exits.
"""

from __future__ import annotations

import bisect
import inspect
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
from jaxport.protocol.errors import (
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    ProtocolError,
    UnavailableError,
)

__all__ = [
    "BadProgramOutputError",
    "BatchStats",
    "BatchTiming",
    "BatcherClosedError",
    "BatchingConfig",
    "BatchingError",
    "DynamicBatcher",
    "Execute",
    "InvalidBatchError",
    "QueueFullError",
    "RowErrors",
]

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0

Arrays = Mapping[str, np.ndarray]
Execute = Callable[[int, dict[str, np.ndarray]], Mapping[str, np.ndarray]]
"""`execute(batch_size, inputs)`: run the program exported for `batch_size` on full batches."""
RowErrors = Callable[[Mapping[str, np.ndarray], int], Sequence[BaseException | None]]
"""`row_errors(outputs, batch_size)`: one error-or-None per row of the padded batch."""


class BatchingError(ProtocolError):
    """Base of the batcher's errors; each carries the gRPC status name the servicer maps."""


class InvalidBatchError(BatchingError, InvalidArgumentError):
    """The request cannot be batched as sent (bad batch dimension, too large, wrong inputs)."""


class QueueFullError(BatchingError, UnavailableError):
    """The bounded queue is full; the caller should retry later."""


class BatcherClosedError(BatchingError, UnavailableError):
    """The batcher is shutting down and takes no new requests."""


class BadProgramOutputError(BatchingError, InternalError):
    """A program returned an output without the expected leading batch dimension (a bug)."""


@dataclass(frozen=True)
class BatchingConfig:
    """How one model batches.

    batch_sizes: the exported program sizes (any order; kept ascending).
    preferred_batch_sizes: row counts that dispatch at once without waiting; default the
        largest exported size (Triton's default), i.e. wait up to the delay to fill it.
    max_queue_delay_us: how long the oldest queued request may wait for others.
    max_queue_size: queued requests beyond which new ones are rejected (UNAVAILABLE).
    """

    batch_sizes: Sequence[int]
    preferred_batch_sizes: Sequence[int] = ()
    max_queue_delay_us: int = 1000
    max_queue_size: int = 1024

    def __post_init__(self) -> None:
        sizes = sorted({int(s) for s in self.batch_sizes})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"batch_sizes must be positive integers, got {list(self.batch_sizes)}")
        preferred = sorted({int(s) for s in self.preferred_batch_sizes}) or [sizes[-1]]
        bad = [p for p in preferred if not 1 <= p <= sizes[-1]]
        if bad:
            raise ValueError(
                f"preferred batch sizes {bad} are outside 1..{sizes[-1]} "
                f"(the largest exported batch size)"
            )
        if self.max_queue_delay_us < 0:
            raise ValueError(f"max_queue_delay_us must be >= 0, got {self.max_queue_delay_us}")
        if self.max_queue_size < 1:
            raise ValueError(f"max_queue_size must be >= 1, got {self.max_queue_size}")
        object.__setattr__(self, "batch_sizes", tuple(sizes))
        object.__setattr__(self, "preferred_batch_sizes", tuple(preferred))

    @property
    def max_batch_size(self) -> int:
        """Largest exported batch size: the most rows one request may carry."""
        return self.batch_sizes[-1]

    def program_for(self, rows: int) -> int:
        """Smallest exported batch size holding `rows` rows."""
        return self.batch_sizes[bisect.bisect_left(self.batch_sizes, rows)]


def pad_rows(parts: Sequence[np.ndarray], size: int) -> np.ndarray:
    """`parts` (same trailing shape and dtype, >= 1 row in all) concatenated along dimension
    0 and padded to `size` rows with copies of the last real row.

    The one padding rule of the bridge: the batcher pads its batches with it, and
    `Model.execute` pads a lone request onto the smallest exported program that fits. Copies of
    a real row (never zeros) mean a row-wise runtime check trips on padding only if it trips on
    a real row, and padding can produce no NaN or division by zero of its own.
    """
    first = parts[0]
    buf = np.empty((size, *first.shape[1:]), dtype=first.dtype)
    offset = 0
    for part in parts:
        buf[offset : offset + part.shape[0]] = part
        offset += part.shape[0]
    if offset < size:
        buf[offset:] = buf[offset - 1]
    return buf


@dataclass
class BatchStats:
    """Counters for metrics and benchmarks (read with `DynamicBatcher.stats()`)."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    padded_rows: int = 0
    isolated_reruns: int = 0
    rejected_queue_full: int = 0
    expired: int = 0
    batch_size_counts: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchTiming:
    """Where one request's time went: waiting to be batched, and its batch's execution."""

    queue_ns: int
    execute_ns: int
    batch_size: int
    rows: int = 1  # rows of this request
    first: bool = True  # first request of its batch (accounts for the one execution)
    batch_rows: int = 1  # real rows of the whole batch (padding excluded)


@dataclass(eq=False)
class _Pending:
    inputs: dict[str, np.ndarray]
    rows: int
    future: Future
    enqueued_ns: int
    deadline_ns: int | None = None  # time.monotonic_ns() instant


class DynamicBatcher:
    """Gathers concurrent requests into fixed-size batches and runs them on one worker thread.

    `input_names`/`output_names` are the model's inputs/outputs; every one of them has a
    leading batch dimension (a model with an unbatched input or output cannot be batched:
    requests could not be concatenated or the output could not be split per request).
    """

    def __init__(
        self,
        execute: Execute,
        config: BatchingConfig,
        input_names: Sequence[str],
        output_names: Sequence[str] | None = None,
        *,
        row_errors: RowErrors | None = None,
        name: str = "model",
    ) -> None:
        self._execute_ref: Callable[[], Execute | None]
        if inspect.ismethod(execute):
            self._execute_ref = weakref.WeakMethod(execute)
        else:
            self._execute_ref = lambda: execute
        self._config = config
        self._input_names = tuple(input_names)
        self._output_names = tuple(output_names) if output_names is not None else None
        self._row_errors = row_errors
        self._name = name
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._stats = BatchStats()
        self._worker = threading.Thread(
            target=self._run, name=f"batcher-{name}", daemon=True
        )
        self._worker.start()

    @property
    def config(self) -> BatchingConfig:
        """How this batcher batches (what ModelConfig's `dynamic_batching` advertises)."""
        return self._config

    def stats(self) -> BatchStats:
        """A snapshot of the counters."""
        with self._cond:
            s = self._stats
            return BatchStats(
                s.requests, s.batches, s.rows, s.padded_rows, s.isolated_reruns,
                s.rejected_queue_full, s.expired, dict(s.batch_size_counts),
            )

    def submit(self, inputs: Arrays, deadline: float | None = None, *,
               rows: int | None = None) -> Future:
        """Queue one request; the future resolves to its outputs (its rows only).

        `deadline` is a `time.monotonic()` instant: if it passes before the request's batch is
        formed, the future fails with DeadlineExceededError and nothing runs for it.
        `rows`: given by a caller that has validated the request already (exactly the model's
        inputs as arrays sharing a leading dimension of `rows`, see `check_rows`; what
        `jaxport.bridge.model.Model.prepare` does), which is then trusted and not checked
        again. Without it the request is checked here: InvalidBatchError for a request that
        cannot be batched. Raises QueueFullError when the queue is full and
        BatcherClosedError after `close()`.
        """
        if rows is None:
            arrays, rows = self._validate(inputs)
        else:
            arrays = dict(inputs)
        pending = _Pending(arrays, rows, Future(), time.monotonic_ns(),
                           None if deadline is None else int(deadline * 1e9))
        with self._cond:
            if self._closed:
                raise BatcherClosedError(f"model {self._name!r} is shutting down")
            if len(self._queue) >= self._config.max_queue_size:
                self._stats.rejected_queue_full += 1
                raise QueueFullError(
                    f"model {self._name!r}: batching queue is full "
                    f"({self._config.max_queue_size} requests waiting); retry later"
                )
            self._queue.append(pending)
            self._stats.requests += 1
            self._cond.notify()
        return pending.future

    def infer(self, inputs: Arrays, timeout: float | None = None) -> dict[str, np.ndarray]:
        """Submit and wait: the outputs of this request, or its own error raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self.submit(inputs, deadline).result(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop taking requests, finish the queued ones, and stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._worker.join(timeout)

    # -- request side ------------------------------------------------------------------

    def _validate(self, inputs: Arrays) -> tuple[dict[str, np.ndarray], int]:
        names = set(inputs)
        expected = set(self._input_names)
        if names != expected:
            missing = sorted(expected - names)
            extra = sorted(names - expected)
            raise InvalidBatchError(
                f"model {self._name!r}: inputs must be exactly {sorted(expected)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unexpected {extra}" if extra else "")
            )
        arrays = {name: np.asarray(inputs[name]) for name in self._input_names}
        return arrays, self.check_rows(arrays)

    def check_rows(self, arrays: Arrays) -> int:
        """The batch rows of a request holding every input as an array: every input has a
        leading batch dimension, all the same, 1..max_batch_size. InvalidBatchError otherwise."""
        rows: int | None = None
        first = ""
        for name in self._input_names:
            a = arrays[name]
            if a.ndim == 0:
                raise InvalidBatchError(
                    f"model {self._name!r}: input {name!r} is a scalar but needs a leading "
                    f"batch dimension"
                )
            if rows is None:
                rows, first = a.shape[0], name
            elif a.shape[0] != rows:
                raise InvalidBatchError(
                    f"model {self._name!r}: inputs disagree on the batch dimension: "
                    f"{first!r} has {rows} rows, {name!r} has {a.shape[0]}"
                )
        assert rows is not None
        if rows < 1:
            raise InvalidBatchError(
                f"model {self._name!r}: batch dimension of input {first!r} is 0; send >= 1 row"
            )
        if rows > self._config.max_batch_size:
            raise InvalidBatchError(
                f"model {self._name!r}: request batch size {rows} exceeds the model's "
                f"max_batch_size {self._config.max_batch_size} (exported batch sizes "
                f"{list(self._config.batch_sizes)}); split the request"
            )
        return rows

    # -- worker side -------------------------------------------------------------------

    def _take_batch(self) -> list[_Pending] | None:
        """Block until a batch is due; pop and return it (None when closed and drained)."""
        cfg = self._config
        delay_ns = cfg.max_queue_delay_us * 1000
        with self._cond:
            while True:
                self._expire_locked()
                while not self._queue:
                    if self._closed or self._execute_ref() is None:
                        return None
                    self._cond.wait(IDLE_POLL_S)
                    self._expire_locked()
                rows = 0
                count = 0
                due = False
                for p in self._queue:
                    if rows + p.rows > cfg.max_batch_size:
                        due = True  # the next request cannot join: this batch is full
                        break
                    rows += p.rows
                    count += 1
                    if rows >= cfg.preferred_batch_sizes[-1] or rows in cfg.preferred_batch_sizes:
                        due = True
                        break
                deadline = self._queue[0].enqueued_ns + delay_ns
                now = time.monotonic_ns()
                if due or now >= deadline or self._closed:
                    batch = [self._queue.popleft() for _ in range(count)]
                    break
                self._cond.wait((deadline - now) / 1e9)
        # A caller that cancelled its future before dispatch is dropped here.
        return [p for p in batch if p.future.set_running_or_notify_cancel()]

    def _expire_locked(self) -> None:
        """Fail (without running) every queued request whose deadline has passed."""
        now = time.monotonic_ns()
        if not any(p.deadline_ns is not None and p.deadline_ns <= now for p in self._queue):
            return
        keep: deque[_Pending] = deque()
        for p in self._queue:
            if p.deadline_ns is not None and p.deadline_ns <= now:
                if p.future.set_running_or_notify_cancel():
                    p.future.set_exception(DeadlineExceededError(
                        f"model {self._name!r}: deadline exceeded while waiting to be batched; "
                        "request not executed"))
                self._stats.expired += 1
            else:
                keep.append(p)
        self._queue = keep

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            if not batch:
                continue
            try:
                self._dispatch(batch)
            except BaseException as exc:  # never let the worker die with futures pending
                log.exception("batcher %s: unexpected failure", self._name)
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)

    def _dispatch(self, batch: list[_Pending]) -> None:
        try:
            results = self._run_batch(batch)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            # The failure may come from one request's rows: isolate by re-running each alone.
            with self._cond:
                self._stats.isolated_reruns += 1
            for p in batch:
                try:
                    (result,) = self._run_batch([p])
                except Exception as own:
                    p.future.set_exception(own)
                else:
                    self._resolve(p, result)
            return
        for p, result in zip(batch, results, strict=True):
            self._resolve(p, result)

    @staticmethod
    def _resolve(p: _Pending, result: dict[str, np.ndarray] | BaseException) -> None:
        if isinstance(result, BaseException):
            p.future.set_exception(result)
        else:
            p.future.set_result(result)

    def _run_batch(
        self, batch: list[_Pending]
    ) -> list[dict[str, np.ndarray] | BaseException]:
        """Concatenate, pad, execute once, split. Raises what `execute` raises."""
        rows = sum(p.rows for p in batch)
        size = self._config.program_for(rows)
        inputs: dict[str, np.ndarray] = {}
        for name in self._input_names:
            parts = [p.inputs[name] for p in batch]
            first = parts[0]
            for part in parts:
                if part.shape[1:] != first.shape[1:] or part.dtype != first.dtype:
                    raise InvalidBatchError(
                        f"model {self._name!r}: input {name!r} of shape {part.shape} "
                        f"{part.dtype} cannot be batched with shape {first.shape} {first.dtype}"
                    )
            inputs[name] = pad_rows(parts, size)

        execute = self._execute_ref()
        if execute is None:
            raise BatcherClosedError(f"model {self._name!r} was unloaded")
        t0 = time.monotonic_ns()
        outputs = execute(size, inputs)
        t1 = time.monotonic_ns()
        for i, p in enumerate(batch):
            # Read by callers for queue/compute metrics (Future allows plain attributes).
            p.future.batch_timing = BatchTiming(  # type: ignore[attr-defined]
                t0 - p.enqueued_ns, t1 - t0, size, p.rows, i == 0, rows)
        names = self._output_names if self._output_names is not None else tuple(outputs)
        for name in names:
            out = outputs[name]
            if np.ndim(out) == 0 or np.shape(out)[0] != size:
                raise BadProgramOutputError(
                    f"model {self._name!r}: output {name!r} has shape {np.shape(out)}, "
                    f"expected a leading batch dimension of {size}"
                )
        errors = self._row_errors(outputs, size) if self._row_errors is not None else None

        with self._cond:
            st = self._stats
            st.batches += 1
            st.rows += rows
            st.padded_rows += size - rows
            st.batch_size_counts[size] = st.batch_size_counts.get(size, 0) + 1

        results: list[dict[str, np.ndarray] | BaseException] = []
        offset = 0
        for p in batch:
            stop = offset + p.rows
            own = None
            if errors is not None:
                own = next((e for e in errors[offset:stop] if e is not None), None)
            if own is not None:
                results.append(own)
            else:
                results.append({n: np.asarray(outputs[n])[offset:stop] for n in names})
            offset = stop
        return results
