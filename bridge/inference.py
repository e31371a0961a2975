"""One inference request through the model core (no grpc): admission, execution, accounting.

The servicer hands `InferenceCore.start` its decode step, which validates the request once
(`Model.prepare` -> `Prepared`); this module decides when the request may execute (per-model
slots and bounded queue of `jaxport.bridge.limits.AdmissionController`, deadline and caller
liveness honoured), runs it on the `Model`, and records the outcome once in the model's
statistics and the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future

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

    def start(
        self,
        model: Model,
        prepare: Callable[[], Prepared],
        *,
        deadline: float | None = None,
        is_active: Callable[[], bool] | None = None,
    ) -> Started:
        """Decode and validate (`prepare`, once), then either execute on the request's program
        (after waiting for an admission slot) or hand the request to the model's batcher
        without waiting for its batch; `Started.finish()` gives the outputs by name. One
        thread can start the requests of several calls, then finish each
        (`jaxport.bridge.worker` does so for frames that arrived together).

        `prepare` runs inside the accounting so a malformed request counts as a failure of
        the model it named; a failure here is accounted for and raised, otherwise `finish()`
        accounts, once. `deadline` is absolute `time.monotonic()` time.
        """
        begun = time.perf_counter_ns()
        try:
            prepared = prepare()
            if prepared.program is None:
                # The model's batcher is its queue (bounded) and runs one batch at a time;
                # holding an admission slot while waiting to be batched would cap batches at
                # max_inflight rows.
                return Started(self, model, begun, prepared, model.submit(prepared, deadline))
            queued = time.perf_counter_ns()
            # acquire/release rather than `admit()`'s context manager: a generator per request.
            admission = self.admission
            admission.acquire(model.key, deadline=deadline, is_active=is_active)
            try:
                admitted = time.perf_counter_ns()
                outputs, t = model.execute(prepared)
            finally:
                admission.release(model.key)
        except Exception as exc:
            self._account(model, begun, _code_of(exc), None)
            raise
        timings = Timings(admitted - queued, t.input_ns, t.infer_ns, t.output_ns,
                          t.inferences, t.executions, t.batch_rows)
        self._account(model, begun, Code.OK, timings)
        return Started(self, model, begun, prepared, None, outputs)

    def _account(self, model: Model, begun: int, code: Code, timings: Timings | None) -> None:
        """Record one request's outcome once: the model's statistics and the metrics."""
        total = time.perf_counter_ns() - begun
        if code == Code.OK and timings is not None:
            model.statistics.record_success(total, timings)
        else:
            model.statistics.record_failure(total)
        if self.metrics is not None:
            self.metrics.record_request(model.name, model.version, code, total / 1e9,
                                        timings if code == Code.OK else None)


def _code_of(exc: BaseException) -> Code:
    return exc.code if isinstance(exc, ProtocolError) else Code.INTERNAL


class Started:
    """A request `InferenceCore.start` began: `finish()` returns its outputs by name (waiting
    for its batch if it joined one) or raises its error, accounted for once."""

    __slots__ = ("_begun", "_core", "_future", "_model", "_outputs", "_prepared")

    def __init__(self, core: InferenceCore, model: Model, begun: int, prepared: Prepared,
                 future: Future | None, outputs: dict[str, np.ndarray] | None = None) -> None:
        self._core, self._model, self._begun = core, model, begun
        self._prepared, self._future, self._outputs = prepared, future, outputs

    def finish(self) -> dict[str, np.ndarray]:
        if self._outputs is not None:
            return self._outputs  # executed (and accounted for) by `start`
        try:
            outputs, timings = self._model.finish(self._prepared, self._future)
        except Exception as exc:
            self._core._account(self._model, self._begun, _code_of(exc), None)
            raise
        self._core._account(self._model, self._begun, Code.OK, timings)
        return outputs
