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
mapping interceptor.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2
from jaxport.bridge import logs, security
from jaxport.bridge.batcher import BatchingConfig
from jaxport.bridge.engines import configure_jax
from jaxport.bridge.inference import InferenceCore
from jaxport.bridge.interceptor import ErrorInterceptor
from jaxport.bridge.limits import AdmissionController, grpc_message_size_options
from jaxport.bridge.loading import LoadError, load_model
from jaxport.bridge.metrics import Metrics
from jaxport.bridge.model import Model
from jaxport.bridge.repository import Repository
from jaxport.bridge.servicer import InferenceServicer, ServerState
from jaxport.bridge.settings import Settings
from jaxport.bridge.shared_memory import SharedMemoryRegistry
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

log = logging.getLogger("jaxport.bridge.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name

# Exit statuses of `jaxport serve` after a signal (1: cannot bind/serve, 2: usage, in cli).
EXIT_DRAINED = 0  # every RPC in flight finished within the grace period
EXIT_CUT = 3  # the grace period ended with RPCs still running: they were cancelled
EXIT_FORCED = 4  # a second SIGTERM/SIGINT during the drain: exited at once
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


@dataclass(frozen=True)
class Core:
    """Everything that answers requests, transport aside. `jaxport serve` (Bridge), the native
    front's execution workers (jaxport.bridge.worker) and Ray Serve replicas build it the same
    way, with `build_core`, and put their own transport in front of `servicer`."""

    metrics: Metrics | None
    state: ServerState
    repository: Repository
    admission: AdmissionController
    inference: InferenceCore
    servicer: InferenceServicer


def build_core(settings: Settings,
               servicer_class: type[InferenceServicer] = InferenceServicer) -> Core:
    """The core objects for `settings`: metrics (if enabled), repository with its loader,
    admission control, the inference core and the servicer (`servicer_class`: a transport
    that refuses some RPCs, as Ray replicas do, passes a subclass). Nothing is loaded or
    bound."""
    metrics = Metrics() if settings.metrics_enabled else None
    state = ServerState()
    repository = Repository(
        settings.repository,
        functools.partial(_load, settings=settings),
        single_model=settings.model_name,
        version_policy=settings.model_version_policy,
        on_change=metrics.record_model if metrics else None,
    )
    admission = AdmissionController(
        settings.max_inflight_per_model,
        settings.max_queue_per_model,
        on_outcome=metrics.record_admission if metrics else None,
    )
    inference = InferenceCore(admission, metrics)
    servicer = servicer_class(
        repository, inference, state,
        SharedMemoryRegistry() if settings.system_shared_memory else None)
    return Core(metrics, state, repository, admission, inference, servicer)


def load_all(repository: Repository, state: ServerState) -> None:
    """Load every model per the policy, then mark the server ready (ServerReady true)."""
    statuses = repository.load_all()
    ready = sum(s.state == "READY" for s in statuses)
    state.set_ready()
    log.info("server ready", extra={"fields": {
        "models_ready": ready, "models_failed": len(statuses) - ready}})


def prepare_process(settings: Settings) -> None:
    """Process-wide set-up of a process that executes models: JSON logs, JAX settings, heap
    settings (the heap trimmer starts with the traffic counter it watches)."""
    logs.configure(settings.log_level)
    configure_jax(settings.cpu_devices)
    keep_heap_memory()


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


def _load(name: str, version: int, path: Path, *, settings: Settings) -> Model:
    model = load_model(name, version, path, engine=settings.engine,
                       compiled_shapes=settings.compiled_shapes)
    batching = settings.batching_for(name)
    listed = any(m.name == name for m in settings.batching_models)
    if batching is not None and model.manifest.dimensions:
        names = ", ".join(d.name for d in model.manifest.dimensions)
        raise LoadError(
            f"{model.label} has symbolic dimensions ({names}): dynamic batching of a "
            "shape-polymorphic model is not built; serve it without --batching (each request "
            "then runs unpadded at its own size)")
    # --batching alone skips models without batch sizes; a model named in --batching-models
    # must batch: a LoadError (naming the model) fails its load.
    if batching is not None and (model.batch_sizes or listed):
        if not model.batch_sizes:
            raise LoadError(
                f"{model.label} is named in --batching-models but was exported without "
                "--batch-sizes; export it with batch sizes or drop it from the list")
        delay_us, preferred = batching
        model.enable_batching(BatchingConfig(
            model.batch_sizes,
            preferred_batch_sizes=[b for b in preferred if b <= max(model.batch_sizes)],
            max_queue_delay_us=delay_us,
            max_queue_size=settings.batch_queue_size,
        ))
    return model


# Heap arenas glibc may use (M_ARENA_MAX). Its default is 8 per core, and a new arena for each
# thread that finds the others busy: every grpc worker thread then keeps its own high-water mark
# of freed message buffers (issue 18: RSS 284 -> 727 MiB and 10 more threads under hostile
# load). Two arenas keep allocation contention low on a few cores.
MALLOC_ARENAS = 2
# How often the heap trimmer returns free heap pages to the system after traffic.
HEAP_TRIM_INTERVAL_S = 5.0


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_heap_memory(arenas: int = MALLOC_ARENAS) -> bool:
    """Let glibc reuse freed heap memory for large buffers instead of mmap/munmap each time.

    Every multi-MiB tensor otherwise lands in freshly mapped pages, and first-touch page faults
    dominate (measured here: protobuf serialize of a 64 MiB response 246 ms -> 25 ms, a 16 MiB
    ModelInfer round trip 2-3x faster). Cost: freed memory stays in the heap, one high-water
    mark per arena, hence at most `arenas` arenas, and `HeapTrimmer` handing free pages back
    once traffic pauses. glibc only; False (and nothing changed) elsewhere.
    """
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    m_arena_max, m_trim_threshold, m_top_pad, m_mmap_threshold = -8, -1, -2, -3
    return all(mallopt(opt, value) == 1 for opt, value in (
        (m_arena_max, arenas), (m_mmap_threshold, 1 << 30), (m_trim_threshold, 1 << 30),
        (m_top_pad, 64 << 20)))


class HeapTrimmer:
    """Every `interval_s`, if RPCs finished since the last look, `malloc_trim(0)`: the free
    pages of every arena go back to the system (a burst of large messages costs RSS while it
    lasts, not for the life of the process). A daemon thread; glibc only."""

    def __init__(self, finished: Callable[[], int], interval_s: float = HEAP_TRIM_INTERVAL_S
                 ) -> None:
        libc = _libc()
        self._trim = getattr(libc, "malloc_trim", None)
        self._finished = finished
        self._interval = interval_s
        self._stop = threading.Event()

    def start(self) -> bool:
        """Start trimming; False where there is no malloc_trim."""
        if self._trim is None:
            return False
        seen = self._finished()
        threading.Thread(target=self._run, args=(seen,), name="heap-trim", daemon=True).start()
        return True

    def stop(self) -> None:
        self._stop.set()

    def _run(self, seen: int) -> None:
        while not self._stop.wait(self._interval):
            now = self._finished()
            if now != seen:
                seen = now
                self._trim(0)


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
            _exit_now(EXIT_FORCED)
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
        _exit_now(drain.exit_status)
    return drain.exit_status


def _exit_now(status: int) -> None:
    """Flush what was logged and printed, then end the process without joining threads."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


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
