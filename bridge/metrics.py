"""Prometheus metrics of the bridge, on a dedicated registry served at `--metrics-port`.

Everything is registered on a `CollectorRegistry` owned by one `Metrics` object that is passed
explicitly (no process-global registry), so tests and embedders can run several bridges.

Metric families (labels in braces):
- `jaxport_inference_requests_total{model,version}`: ModelInfer/stream requests received
  for a resolved model;
- `jaxport_inference_success_total{model,version}`, `jaxport_inference_failure_total
  {model,version,code}`: their outcome (code = gRPC status name);
- `jaxport_inference_request_duration_seconds{model,version}` (histogram): end to end in the
  server, decode to encode;
- `jaxport_inference_queue_duration_seconds{model,version}` (histogram): waiting for an
  execution slot (admission);
- `jaxport_inference_compute_duration_seconds{model,version}` (histogram): device transfer in,
  execution, transfer out;
- `jaxport_admission_total{model,outcome}`: admitted / shed / expired / cancelled;
- `jaxport_grpc_requests_total{method,code}`: every RPC by final status, hostile ones included:
  a request that does not parse is INTERNAL (grpc's answer), a call its caller cancelled or
  let expire CANCELLED / DEADLINE_EXCEEDED (counted by the worker, `jaxport.bridge.connection`);
- `jaxport_model_ready{model,version}` (gauge, 1 = serving);
- `jaxport_model_load_seconds{model,version,phase}` (gauge): checksum, deserialize, weights,
  compile, warmup of the last load.
"""

from __future__ import annotations

import threading
from typing import Any

from jaxport.bridge.repository import READY, VersionStatus
from jaxport.bridge.statistics import Timings
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

# Latency buckets from 100 us to 30 s: covers a tiny MLP and a large-tensor request.
_BUCKETS = (
    1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
)


class Metrics:
    """The bridge's metric families on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        mv = ("model", "version")
        self.requests = Counter("jaxport_inference_requests", "Inference requests received",
                                mv, registry=r)
        self.success = Counter("jaxport_inference_success", "Successful inference requests",
                               mv, registry=r)
        self.failure = Counter("jaxport_inference_failure", "Failed inference requests",
                               (*mv, "code"), registry=r)
        self.request_seconds = Histogram(
            "jaxport_inference_request_duration_seconds", "Request time in the server", mv,
            buckets=_BUCKETS, registry=r)
        self.queue_seconds = Histogram(
            "jaxport_inference_queue_duration_seconds", "Time waiting for an execution slot",
            mv, buckets=_BUCKETS, registry=r)
        self.compute_seconds = Histogram(
            "jaxport_inference_compute_duration_seconds",
            "Transfer in + execution + transfer out", mv, buckets=_BUCKETS, registry=r)
        self.admission = Counter("jaxport_admission", "Admission control outcomes",
                                 ("model", "outcome"), registry=r)
        self.grpc = Counter("jaxport_grpc_requests", "RPCs by method and final status",
                            ("method", "code"), registry=r)
        self.model_ready = Gauge("jaxport_model_ready", "1 when the model version serves", mv,
                                 registry=r)
        self.load_seconds = Gauge("jaxport_model_load_seconds", "Last load time by phase",
                                  (*mv, "phase"), registry=r)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        # Labelled children per (model, version): `labels()` is a locked dict lookup with
        # string checks, five of them per request otherwise.
        self._per_model: dict[tuple[str, int], tuple[Any, ...]] = {}
        # The same for the per-request admission and RPC counters (bounded key sets: model
        # keys the admission controller was given after resolving a model, and grpc's
        # method x status names).
        self._admission_children: dict[tuple[str, str], Any] = {}
        self._rpc_children: dict[tuple[str, str], Any] = {}

    def _children(self, model: str, version: int) -> tuple[Any, ...]:
        children = self._per_model.get((model, version))
        if children is None:
            v = str(version)
            children = (self.requests.labels(model, v), self.success.labels(model, v),
                        self.request_seconds.labels(model, v),
                        self.queue_seconds.labels(model, v),
                        self.compute_seconds.labels(model, v))
            self._per_model[(model, version)] = children
        return children

    def record_request(self, model: str, version: int, code: str, seconds: float,
                       timings: Timings | None) -> None:
        """One finished inference request (code "OK" on success)."""
        requests, success, request_s, queue_s, compute_s = self._children(model, version)
        requests.inc()
        if code == "OK":
            success.inc()
        else:
            self.failure.labels(model, str(version), code).inc()
        request_s.observe(seconds)
        if timings is not None:
            queue_s.observe(timings.queue_ns / 1e9)
            compute_s.observe((timings.input_ns + timings.infer_ns + timings.output_ns) / 1e9)

    def record_admission(self, model_key: str, outcome: str) -> None:
        """Hook for `AdmissionController(on_outcome=...)`; `model_key` is `name/version`."""
        child = self._admission_children.get((model_key, outcome))
        if child is None:
            child = self.admission.labels(model_key.rsplit("/", 1)[0], outcome)
            self._admission_children[(model_key, outcome)] = child
        child.inc()

    def record_rpc(self, method: str, code: str) -> None:
        """One RPC finished with status `code`."""
        child = self._rpc_children.get((method, code))
        if child is None:
            child = self._rpc_children[(method, code)] = self.grpc.labels(method, code)
        child.inc()

    def record_model(self, status: VersionStatus) -> None:
        """Hook for `Repository(on_change=...)`: readiness and load-phase times."""
        v = str(status.version)
        self.model_ready.labels(status.name, v).set(1 if status.state == READY else 0)
        if status.model is not None:
            for phase, seconds in status.model.load_seconds.items():
                self.load_seconds.labels(status.name, v, phase).set(seconds)

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP endpoint (port 0 = free port); returns the bound port."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._server.server_port)

    def stop(self) -> None:
        """Stop the HTTP endpoint if it runs."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
