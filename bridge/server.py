"""gRPC server assembly and lifecycle of `jaxport serve`.

Start: bind (port 0 = any free port) -> report the bound ports (stdout line, `--port-file`)
-> load the repository in the background (health NOT_SERVING, ServerReady false until done)
-> serve. SIGTERM/SIGINT: report not ready, stop accepting new RPCs, let in-flight ones finish
for up to `grace_period_s`, cancel what still runs then, and exit: status `EXIT_DRAINED` (0) when
everything finished, `EXIT_CUT` (3) when requests were cut (the "stopped" log line says how
many). A second SIGTERM/SIGINT during the drain exits at once with `EXIT_FORCED` (4).

Besides `inference.GRPCInferenceService` the server exposes `grpc.health.v1.Health` (for
Kubernetes probes; service "" and "inference.GRPCInferenceService") and server reflection (for
`grpcurl`). Interceptors, outermost first: bearer-token auth (optional), then the one error
mapping interceptor. The objects behind the servicer, the process set-up and the exit statuses
are `jaxport.bridge.core`'s, shared with the native front's workers and Ray Serve replicas.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2
from jaxport.bridge import security
from jaxport.bridge.core import (
    EXIT_CUT,
    EXIT_DRAINED,
    EXIT_FORCED,
    HeapTrimmer,
    build_core,
    exit_now,
    load_all,
    prepare_process,
)
from jaxport.bridge.interceptor import ErrorInterceptor
from jaxport.bridge.limits import grpc_message_size_options
from jaxport.bridge.settings import Settings
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

log = logging.getLogger("jaxport.bridge.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name

# After the grace period, how long grpc gets to finish cancelling the calls that remain.
CANCEL_WAIT_S = 1.0


@dataclass(frozen=True)
class Drain:
    """How a stop went: `cut` RPCs were still running when the grace period ended (they were
    cancelled); `finished` False if grpc's server had not finished stopping even then."""

    cut: int
    finished: bool
    seconds: float

    @property
    def exit_status(self) -> int:
        """`EXIT_DRAINED` or `EXIT_CUT`."""
        return EXIT_DRAINED if self.cut == 0 and self.finished else EXIT_CUT


class BindError(RuntimeError):
    """The gRPC or metrics address cannot be bound (in use, bad host...)."""


class Bridge:
    """One bridge: repository, core, gRPC server, health, metrics; built from Settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        core = build_core(settings)
        self.metrics, self.state, self.repository = core.metrics, core.state, core.repository
        self.admission, self.core, self.servicer = core.admission, core.inference, core.servicer
        self.health = health.HealthServicer()
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)

        interceptors: list[grpc.ServerInterceptor] = []
        if settings.auth_token_file is not None:
            token = security.read_token_file(settings.auth_token_file)
            interceptors.append(security.TokenAuthInterceptor(token))
        self.interceptor = ErrorInterceptor(self.metrics.record_rpc if self.metrics else None)
        interceptors.append(self.interceptor)
        options: list[tuple[str, Any]] = [
            *grpc_message_size_options(settings.max_message_bytes),
            ("grpc.so_reuseport", 0),  # a port in use must fail loudly, not be shared
        ]
        self.server = grpc.server(
            futures.ThreadPoolExecutor(settings.worker_threads, thread_name_prefix="grpc"),
            interceptors=interceptors,
            options=options,
            # One RPC per worker at most: beyond it grpc answers RESOURCE_EXHAUSTED at once
            # instead of parking calls in the executor's unbounded queue, unseen by admission.
            maximum_concurrent_rpcs=settings.worker_threads,
        )
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        _enable_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME, REFLECTION_V1),
            self.server,
        )
        self._credentials = security.server_credentials(
            settings.tls_cert, settings.tls_key, settings.tls_client_ca
        )
        self.port = 0
        self.metrics_port = -1

    def start(self) -> None:
        """Bind and start serving RPCs (models load separately, see `load_repository`)."""
        address = f"{self.settings.host}:{self.settings.port}"
        try:
            if self._credentials is None:
                port = self.server.add_insecure_port(address)
            else:
                port = self.server.add_secure_port(address, self._credentials)
        except RuntimeError as exc:
            raise BindError(f"cannot listen on {address}: {exc}") from None
        if not port:
            raise BindError(f"cannot listen on {address} (address in use?)")
        self.port = port
        if self.metrics is not None:
            try:
                self.metrics_port = self.metrics.serve(self.settings.host,
                                                       self.settings.metrics_port)
            except OSError as exc:
                raise BindError(f"cannot serve metrics on {self.settings.host}:"
                                f"{self.settings.metrics_port}: {exc.strerror}") from None
        self.server.start()

    def load_repository(self) -> None:
        """Load every model per the policy, then report the server ready."""
        load_all(self.repository, self.state)
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace: float | None = None) -> Drain:
        """Refuse new work, let in-flight RPCs finish for up to `grace` seconds, cancel what
        remains; always returns (within about `grace` + `CANCEL_WAIT_S`)."""
        grace = self.settings.grace_period_s if grace is None else grace
        start = time.monotonic()
        self.state.set_draining()
        self.health.enter_graceful_shutdown()
        log.info("draining", extra={"fields": {"grace_period_s": grace,
                                               "in_flight": self.interceptor.active}})
        # No new RPCs from now on; grpc cancels every call still open when `grace` ends.
        stopped = self.server.stop(grace)
        cut = 0
        if not self.interceptor.wait_idle(grace):
            cut = self.interceptor.active
            log.warning("grace period over: cancelling the requests still in flight",
                        extra={"fields": {"grace_period_s": grace, "cut": cut}})
        # Handlers are done (or cancelled): grpc only has to retire the calls. Never wait on it
        # without a bound: a call grpc fails to retire must not keep the process alive.
        finished = stopped.wait(max(0.0, start + grace - time.monotonic()) + CANCEL_WAIT_S)
        if not finished:
            log.warning("grpc server did not finish stopping; exiting anyway",
                        extra={"fields": {"wait_s": CANCEL_WAIT_S}})
        if self.metrics is not None and cut == 0 and finished:
            self.metrics.stop()  # (else the process leaves at once, endpoint and all)
        drain = Drain(cut, finished, time.monotonic() - start)
        log.info("stopped", extra={"fields": {
            "drained": cut == 0, "cut": cut, "seconds": round(drain.seconds, 3),
            "exit_status": drain.exit_status}})
        return drain


def _write_port_file(path: Path, content: dict[str, int]) -> None:
    """Atomic write: a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(content) + "\n")
    os.replace(tmp, path)


def run(settings: Settings) -> int:
    """`jaxport serve` after argument parsing: serve until SIGTERM/SIGINT; the exit status."""
    prepare_process(settings)
    stop = threading.Event()
    bridge: Bridge | None = None

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("second signal: exiting now", extra={"fields": {
                "signal": name, "cut": bridge.interceptor.active if bridge else 0,
                "exit_status": EXIT_FORCED}})
            exit_now(EXIT_FORCED)
        log.info("signal received", extra={"fields": {"signal": name}})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        bridge = Bridge(settings)
        bridge.start()
    except (BindError, security.SecurityConfigError) as exc:
        print(f"jaxport serve: error: {exc}", file=sys.stderr)
        return 1
    report = {"grpc_port": bridge.port, "metrics_port": bridge.metrics_port, "pid": os.getpid()}
    if settings.port_file is not None:
        try:
            _write_port_file(settings.port_file, report)
        except OSError as exc:
            print(f"jaxport serve: error: cannot write --port-file {settings.port_file}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            bridge.stop(grace=0)
            return 1
    print(f"jaxport serve: listening on {settings.host}:{bridge.port}", flush=True)
    if bridge.metrics_port >= 0:
        print(f"jaxport serve: metrics on http://{settings.host}:{bridge.metrics_port}/metrics",
              flush=True)
    log.info("listening", extra={"fields": {**report, "engine": settings.engine,
                                            "repository": str(settings.repository)}})

    def load() -> None:
        try:
            bridge.load_repository()
            print("jaxport serve: ready", flush=True)
        except Exception:
            log.exception("repository load crashed")
            stop.set()

    threading.Thread(target=load, name="repository-load", daemon=True).start()
    HeapTrimmer(lambda: bridge.interceptor.finished).start()
    stop.wait()
    drain = bridge.stop()
    if drain.cut or not drain.finished:
        # Handlers that were cancelled may still hold grpc's worker threads (non-daemon, joined
        # at interpreter exit): leave without waiting for them.
        exit_now(drain.exit_status)
    return drain.exit_status


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
"""The v1 reflection service (grpcurl and current gRPC tools ask for it first)."""


def _enable_reflection(names: tuple[str, ...], server: grpc.Server) -> None:
    """Server reflection as `grpc.reflection.v1alpha.ServerReflection` and, beside it,
    `grpc.reflection.v1.ServerReflection`.

    grpcio-reflection (1.85) ships only v1alpha. v1's messages are v1alpha's, field for field
    (grpc/reflection/v1/reflection.proto only renamed the package), so one v1alpha servicer
    answers both, its messages read and written unchanged under the v1 method name.
    """
    reflection.enable_server_reflection(names, server)
    servicer = reflection.ReflectionServicer(names)
    handler = grpc.method_handlers_generic_handler(REFLECTION_V1, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        ),
    })
    server.add_generic_rpc_handlers((handler,))
