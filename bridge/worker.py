"""Execution worker of the front: a process that loads artifacts with an engine and executes
already-validated tensors, nothing else (no requests, no repository, no statistics).

    python -m jaxport.bridge.worker --listen-fd 3 --compiled-shapes N --max-frame-bytes N
                                    [--cpu-devices N] [--threads N] [--log-level LEVEL]
    python -m jaxport.bridge.worker --socket PATH ...   # binds PATH (tests, by hand)

The front (`bridge/front/workers`, Go) starts it with a listening Unix socket as descriptor 3
and connects; the frames (docs/frames.md, version 2) are `jaxport.bridge.frames`, their
meaning `jaxport.bridge.connection`. Every flag comes from the front (its `config` package
defines them once); none has a default of its own here except the thread count.

With `--listen-fd` the worker exits when the front's connection closes (and the front asks
the kernel for SIGKILL when it dies: PDEATHSIG), so it never outlives the front. SIGTERM and
SIGINT exit at once: the front stops a worker only when nothing needs it.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from jaxport.bridge import logs
from jaxport.bridge.connection import Connection, Executor
from jaxport.bridge.frames import VERSION
from jaxport.protocol.errors import FailedPreconditionError

log = logging.getLogger("jaxport.bridge.worker")


class Worker:
    """The loaded models of this process (by the number the front gave each), its execution
    queue and its connections."""

    def __init__(self, listener: socket.socket, *, compiled_shapes: int, max_frame_bytes: int,
                 threads: int, exit_on_disconnect: bool) -> None:
        from jaxport.bridge.loading import Loaded

        self.listener = listener
        self.compiled_shapes = compiled_shapes
        self.max_frame_bytes = max_frame_bytes
        self.exit_on_disconnect = exit_on_disconnect
        self.executor = Executor(threads)
        self.models: dict[int, Loaded] = {}
        self._keys: dict[int, str] = {}
        self._lock = threading.Lock()
        self._loads = 0  # loads and unloads so far, read by the heap trimmer
        self.stop = threading.Event()

    def hello(self) -> dict[str, Any]:
        """The HELLO payload (docs/frames.md)."""
        import jax

        devices = jax.devices()
        return {"version": VERSION, "pid": os.getpid(), "platform": devices[0].platform,
                "devices": len(devices), "jax": jax.__version__}

    def load(self, number: int, key: str, location: str, engine: str) -> dict[str, Any]:
        """Load model `number` (`key` names it in logs and messages); the LOAD answer."""
        from jaxport.bridge.loading import load

        with self._lock:
            if number in self._keys:
                raise FailedPreconditionError(
                    f"model {number} is loaded already on this worker (as {self._keys[number]})")
            self._keys[number] = key
        try:
            loaded = load(location, engine=engine, compiled_shapes=self.compiled_shapes)
        except BaseException:
            with self._lock:
                self._keys.pop(number, None)
            raise
        with self._lock:
            self.models[number] = loaded
            self._loads += 1
        return loaded.describe()

    def unload(self, number: int) -> None:
        """Forget model `number` (executions holding it finish first); unknown numbers too."""
        with self._lock:
            self.models.pop(number, None)
            self._keys.pop(number, None)
            self._loads += 1

    def accept_loop(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # listener closed
            threading.Thread(target=Connection(self, sock).serve, name="worker-conn",
                             daemon=True).start()

    def connection_closed(self, conn: Connection) -> None:
        if self.exit_on_disconnect:
            log.info("front disconnected, exiting")
            self.stop.set()

    def loads(self) -> int:
        return self._loads


# -- the process -----------------------------------------------------------------------------

# Heap arenas glibc may use (M_ARENA_MAX). Its default is 8 per core, and a new arena for each
# thread that finds the others busy, each keeping its own high-water mark of freed tensor
# buffers; two keep allocation contention low on a few cores.
MALLOC_ARENAS = 2
# How often the heap trimmer returns free heap pages to the system after loads and unloads.
HEAP_TRIM_INTERVAL_S = 5.0


def _libc() -> Any:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def keep_heap_memory(arenas: int = MALLOC_ARENAS) -> bool:
    """Let glibc reuse freed heap memory for large buffers instead of mmap/munmap each time:
    every multi-MiB tensor otherwise lands in freshly mapped pages, and first-touch page
    faults dominate (measured: a 16 MiB round trip 2-3x faster). Cost: freed memory stays in
    the heap, at most `arenas` high-water marks, handed back by `trim_heap_after`. glibc
    only; False (and nothing changed) elsewhere."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    m_arena_max, m_trim_threshold, m_top_pad, m_mmap_threshold = -8, -1, -2, -3
    return all(mallopt(opt, value) == 1 for opt, value in (
        (m_arena_max, arenas), (m_mmap_threshold, 1 << 30), (m_trim_threshold, 1 << 30),
        (m_top_pad, 64 << 20)))


def trim_heap_after(worker: Worker, interval_s: float = HEAP_TRIM_INTERVAL_S) -> None:
    """A daemon thread: every `interval_s`, if models were loaded or unloaded since the last
    look, `malloc_trim(0)` (the host copies of a load's weights go back to the system)."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return

    def run() -> None:
        seen = worker.loads()
        while not worker.stop.wait(interval_s):
            if worker.loads() != seen:
                seen = worker.loads()
                trim(0)

    threading.Thread(target=run, name="heap-trim", daemon=True).start()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m jaxport.bridge.worker",
        description="Execution worker of jaxport-front: loads artifacts and executes "
                    "validated tensors over the frame protocol (docs/frames.md).")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="Unix socket path to bind and listen on")
    where.add_argument("--listen-fd", type=int,
                       help="an inherited listening Unix socket; exit when the front's "
                            "connection closes (how the front starts workers)")
    parser.add_argument("--compiled-shapes", type=_positive, required=True,
                        help="executables a shape-polymorphic program keeps (an LRU)")
    parser.add_argument("--max-frame-bytes", type=_positive, required=True,
                        help="largest frame payload accepted or sent")
    parser.add_argument("--cpu-devices", type=int, default=0,
                        help="CPU devices of this process, for sharded artifacts (0: jax's "
                             "default)")
    parser.add_argument("--threads", type=int, default=0,
                        help="executions at once (0: the CPU count)")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Serve until the front disconnects (with --listen-fd) or a signal."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    logs.configure(args.log_level)
    from jaxport.bridge.engines import configure_jax

    configure_jax(args.cpu_devices)
    keep_heap_memory()
    if args.listen_fd is not None:
        listener = socket.socket(fileno=args.listen_fd)
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(args.socket)
        except OSError as exc:
            print(f"jaxport worker: error: cannot bind {args.socket}: {exc.strerror}",
                  file=sys.stderr)
            return 1
        listener.listen(8)
    threads = args.threads if args.threads > 0 else (os.cpu_count() or 1)
    worker = Worker(listener, compiled_shapes=args.compiled_shapes,
                    max_frame_bytes=args.max_frame_bytes, threads=threads,
                    exit_on_disconnect=args.listen_fd is not None)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal received, exiting", extra={"fields": {
            "signal": signal.Signals(signum).name}})
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    import jax

    jax.devices()  # the backend is up before the first HELLO
    trim_heap_after(worker)
    threading.Thread(target=worker.accept_loop, name="worker-accept", daemon=True).start()
    log.info("worker listening", extra={"fields": {
        "socket": args.socket, "listen_fd": args.listen_fd, "pid": os.getpid(),
        "threads": threads}})
    worker.stop.wait()
    if args.socket:
        try:
            os.unlink(args.socket)
        except OSError:
            pass
    # Executions still running belong to a front that is gone: no joining them.
    logging.shutdown()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
