"""One inference request through the model core (no grpc): admission, execution, accounting.

The servicer hands `InferenceCore.run` its decode step, which validates the request once
(`Model.prepare` -> `Prepared`); this module decides when the request may execute (per-model
slots and bounded queue of `jaxport.bridge.limits.AdmissionController`, deadline and caller
liveness honoured), runs it on the `Model`, and records the outcome once in the model's
statistics and the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from jaxport.bridge.limits import AdmissionController
from jaxport.bridge.metrics import Metrics
from jaxport.bridge.model import Model, Prepared
from jaxport.bridge.statistics import Timings
from jaxport.protocol.errors import Code, ProtocolError


class InferenceCore:
    """Runs requests on resolved models under admission control, accounting for each once."""

    def __init__(self, admission: AdmissionController, metrics: Metrics | None = None) -> None:
        self.admission = admission
        self.metrics = metrics

    def run(
        self,
        model: Model,
        prepare: Callable[[], Prepared],
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] | None = None,
    ) -> dict[str, np.ndarray]:
        """Decode and validate (`prepare`, once), wait for a slot, execute; outputs by name.

        `prepare` runs inside the accounting so a malformed request counts as a failure of
        the model it named. `deadline` is absolute `time.monotonic()` time.
        """
        start = time.perf_counter_ns()
        code = Code.OK
        timings: Timings | None = None
        try:
            prepared = prepare()
            if prepared.program is None:
                # The model's batcher is its queue (bounded) and runs one batch at a time;
                # holding an admission slot while waiting to be batched would cap batches at
                # max_inflight rows.
                outputs, timings = model.execute(prepared, deadline=deadline)
                return outputs
            queued = time.perf_counter_ns()
            # acquire/release rather than `admit()`'s context manager: a generator per request.
            admission = self.admission
            admission.acquire(model.key, deadline=deadline, is_active=is_active)
            try:
                admitted = time.perf_counter_ns()
                outputs, t = model.execute(prepared)
            finally:
                admission.release(model.key)
            timings = Timings(admitted - queued, t.input_ns, t.infer_ns, t.output_ns,
                              t.inferences, t.executions, t.batch_rows)
            return outputs
        except ProtocolError as exc:
            code = exc.code
            raise
        except Exception:
            code = Code.INTERNAL
            raise
        finally:
            total = time.perf_counter_ns() - start
            if code == Code.OK and timings is not None:
                model.statistics.record_success(total, timings)
            else:
                model.statistics.record_failure(total)
            if self.metrics is not None:
                self.metrics.record_request(model.name, model.version, code, total / 1e9,
                                            timings if code == Code.OK else None)
