"""Per-model inference statistics (what the ModelStatistics RPC reports), without grpc.

Durations are cumulative nanoseconds split like Triton's: queue (waiting for an execution slot),
compute_input (host -> device), compute_infer (execution), compute_output (device -> host).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Timings:
    """Where the time of one successful inference went, in nanoseconds."""

    queue_ns: int = 0
    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0
    # Inferences (batch rows) the request carried, and program executions it accounts for:
    # with dynamic batching only the first request of each batch counts the execution.
    inferences: int = 1
    executions: int = 1
    # Rows of the execution this request accounts for (when `executions` is 1): the key of
    # Triton's per-batch-size statistics (`batch_stats`). 0 = same as `inferences`.
    batch_rows: int = 0


@dataclass
class Duration:
    """A count of events and their cumulative duration."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns


@dataclass
class StatisticsSnapshot:
    """A consistent copy of a model's counters."""

    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    # Per executed batch size (real rows, padding excluded), ascending: Triton's batch_stats.
    batches: tuple[BatchSizeStatistics, ...] = ()


@dataclass
class BatchSizeStatistics:
    """Program executions of one batch size and their compute split (Triton's
    InferBatchStatistics): shows how full dynamic batches are."""

    batch_size: int
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


class ModelStatistics:
    """Thread-safe accumulator of one model version's request statistics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._s = StatisticsSnapshot()
        self._batches: dict[int, BatchSizeStatistics] = {}

    def record_success(self, total_ns: int, timings: Timings) -> None:
        """Count one successful request: `timings.inferences` inferences and
        `timings.executions` program executions (Triton's inference vs execution count)."""
        with self._lock:
            s = self._s
            s.inference_count += timings.inferences
            s.execution_count += timings.executions
            s.last_inference_ms = int(time.time() * 1000)
            s.success.add(total_ns)
            s.queue.add(timings.queue_ns)
            s.compute_input.add(timings.input_ns)
            s.compute_infer.add(timings.infer_ns)
            s.compute_output.add(timings.output_ns)
            if timings.executions:
                rows = timings.batch_rows or timings.inferences
                b = self._batches.get(rows)
                if b is None:
                    b = self._batches[rows] = BatchSizeStatistics(rows)
                b.compute_input.add(timings.input_ns)
                b.compute_infer.add(timings.infer_ns)
                b.compute_output.add(timings.output_ns)

    def record_failure(self, total_ns: int) -> None:
        """Count one failed request."""
        with self._lock:
            self._s.fail.add(total_ns)
            self._s.last_inference_ms = int(time.time() * 1000)

    def snapshot(self) -> StatisticsSnapshot:
        """A copy that later requests do not change."""
        with self._lock:
            s = self._s
            return StatisticsSnapshot(
                s.inference_count, s.execution_count, s.last_inference_ms,
                Duration(s.success.count, s.success.ns), Duration(s.fail.count, s.fail.ns),
                Duration(s.queue.count, s.queue.ns),
                Duration(s.compute_input.count, s.compute_input.ns),
                Duration(s.compute_infer.count, s.compute_infer.ns),
                Duration(s.compute_output.count, s.compute_output.ns),
                tuple(
                    BatchSizeStatistics(
                        b.batch_size, Duration(b.compute_input.count, b.compute_input.ns),
                        Duration(b.compute_infer.count, b.compute_infer.ns),
                        Duration(b.compute_output.count, b.compute_output.ns))
                    for _, b in sorted(self._batches.items())
                ),
            )
