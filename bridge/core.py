"""Core assembly and process set-up shared by every transport: what answers requests, not how
they arrive.

The native front's execution workers (`jaxport.bridge.worker`), Ray Serve replicas
(`jaxport.bridge.ray`) and `jaxport serve`'s Python server build the same objects here:
`build_core` (metrics, repository with its loader, admission, inference core, servicer),
`load_all` (the initial repository load, then ready), `prepare_process` (logs, JAX, heap
settings) and `HeapTrimmer`. Each puts its own transport in front of `Core.servicer`.

Exit statuses after a signal, the same for `jaxport serve` and the workers: `EXIT_DRAINED`
(0) every call in flight finished within the grace period, `EXIT_CUT` (3) calls were cut when
it ended, `EXIT_FORCED` (4) a second SIGTERM/SIGINT during the drain (1: cannot bind/serve,
2: usage, in cli). `exit_now` ends a process with one of them without joining threads.

No grpc server here (nor health, reflection, interceptors): those belong to a transport.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxport.bridge import logs
from jaxport.bridge.batcher import BatchingConfig
from jaxport.bridge.engines import configure_jax
from jaxport.bridge.inference import InferenceCore
from jaxport.bridge.limits import AdmissionController
from jaxport.bridge.loading import LoadError, load_model
from jaxport.bridge.metrics import Metrics
from jaxport.bridge.model import Model
from jaxport.bridge.repository import Repository
from jaxport.bridge.servicer import InferenceServicer, ServerState
from jaxport.bridge.settings import Settings
from jaxport.bridge.shared_memory import SharedMemoryRegistry

log = logging.getLogger("jaxport.bridge.core")

# Exit statuses after a signal (1: cannot bind/serve, 2: usage, in cli).
EXIT_DRAINED = 0  # every call in flight finished within the grace period
EXIT_CUT = 3  # the grace period ended with calls still running: they were cancelled
EXIT_FORCED = 4  # a second SIGTERM/SIGINT during the drain: exited at once


@dataclass(frozen=True)
class Core:
    """Everything that answers requests, transport aside. The native front's execution
    workers (jaxport.bridge.worker), Ray Serve replicas and `jaxport serve`'s Python server
    build it the same way, with `build_core`, and put their own transport in front of
    `servicer`."""

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


def exit_now(status: int) -> None:
    """Flush what was logged and printed, then end the process with `status` without joining
    threads (calls that were cut may still hold some)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


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
    """Every `interval_s`, if calls finished since the last look, `malloc_trim(0)`: the free
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
