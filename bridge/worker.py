"""Execution worker behind the native front: the process that serves the Python servicer over a
Unix socket.

    python -m jaxport.bridge.worker --socket PATH [jaxport serve flags: --repository ...]
    python -m jaxport.bridge.worker --listen-fd N [...]     # a listening socket inherited

The native front (`bridge/front`, Go) terminates gRPC; it forwards each call as (method,
serialized request) to one of N workers. A worker runs exactly the objects `jaxport serve` runs
(`jaxport.bridge.core.build_core`: repository, admission, inference core, the same
`InferenceServicer`), maps exceptions through `jaxport.bridge.status.status_of` (the one
table), and answers (status code, message, serialized response). Protocol behaviour therefore
lives in one place; the front adds transport only. All `jaxport serve` settings apply
(`jaxport.bridge.settings.Settings`); the gRPC ones (port, TLS, tokens, metrics port) are the
front's business and are ignored here.

Layers: `jaxport.bridge.frames` (the wire: header, frame types, memfd payloads),
`jaxport.bridge.connection` (calls on one connection: contexts, streams, grouping,
leader/followers), this module (the process: `Worker`, flags, signals, lifecycle).

In `--listen-fd` mode (how the front starts workers) the worker exits when its last connection
closes, so it never outlives the front. SIGTERM: stop accepting, let in-flight calls finish for
up to `--grace-period-s`; exit statuses as `jaxport serve`: 0 drained, 3 calls were cut at the
end of the grace period, 4 a second signal during the drain.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

import grpc
from jaxport.bridge.connection import Connection, Slots, service_methods
from jaxport.bridge.frames import FRAME_SLACK, READY
from jaxport.bridge.settings import Settings, SettingsError
from jaxport.bridge.status import CODE_NAMES

log = logging.getLogger("jaxport.bridge.worker")


class Worker:
    """The core objects of `jaxport serve` behind a framed Unix-socket protocol."""

    def __init__(self, settings: Settings, listener: socket.socket,
                 exit_on_disconnect: bool = False) -> None:
        from jaxport.bridge.core import build_core

        self.settings = settings
        # The same core objects as `jaxport serve` (the front is the gRPC server here).
        self.core = build_core(settings)
        self.servicer = self.core.servicer
        self.methods = service_methods(self.servicer)
        self.infer_index = next(m.index for m in self.methods if m.name == "ModelInfer")
        self.slots = Slots(settings.worker_threads)
        self.max_frame_bytes = settings.max_message_bytes + FRAME_SLACK
        self.listener = listener
        self.exit_on_disconnect = exit_on_disconnect
        self.ready = threading.Event()
        self.stop = threading.Event()
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._ever_connected = False
        self.finished = 0

    def check_size(self, nbytes: int) -> tuple[int, str]:
        """(0, "") if a response of `nbytes` may be sent, else RESOURCE_EXHAUSTED in grpc's
        words (the front would refuse the frame; grpc refuses such a message too)."""
        limit = self.settings.max_message_bytes
        if nbytes <= limit:
            return 0, ""
        return (grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                f"Sent message larger than max ({nbytes} vs. {limit})")

    def observe(self, method: str, code: int) -> None:
        """One call finished: `jaxport_grpc_requests_total` by its final status."""
        self.finished += 1  # read by the heap trimmer (an int bump under the GIL)
        metrics = self.core.metrics
        if metrics is not None:
            try:
                metrics.record_rpc(method, CODE_NAMES.get(code, "UNKNOWN"))
            except Exception:
                log.exception("rpc observer failed")

    def metrics_text(self) -> bytes:
        """This worker's Prometheus registry in the text format (b"" when metrics are off)."""
        if self.core.metrics is None:
            return b""
        from prometheus_client import generate_latest

        return generate_latest(self.core.metrics.registry)

    def load(self) -> None:
        """Load the repository (as `jaxport serve`), then tell every connection READY."""
        from jaxport.bridge.core import load_all

        try:
            load_all(self.core.repository, self.core.state)
        except Exception:
            log.exception("repository load crashed")
            self.stop.set()
            return
        with self._lock:
            self.ready.set()
            connections = list(self._connections)
        for conn in connections:
            conn.frames.send(READY, 0, 0, 0, 0)

    def accept_loop(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # listener closed (shutdown)
            conn = Connection(self, sock)
            with self._lock:
                self._connections.add(conn)
                self._ever_connected = True
            threading.Thread(target=conn.serve, name="worker-conn", daemon=True).start()

    def connection_closed(self, conn: Connection) -> None:
        with self._lock:
            self._connections.discard(conn)
            last = not self._connections
        if last and self.exit_on_disconnect:
            log.info("front disconnected, exiting")
            self.stop.set()

    def run(self) -> bool:
        """Serve until stopped; True if every call in flight finished within the grace."""
        from jaxport.bridge.core import HeapTrimmer

        HeapTrimmer(lambda: self.finished).start()  # as `jaxport serve` does
        threading.Thread(target=self.load, name="repository-load", daemon=True).start()
        threading.Thread(target=self.accept_loop, name="worker-accept", daemon=True).start()
        self.stop.wait()
        return self.shutdown()

    def shutdown(self) -> bool:
        """Refuse new calls, let in-flight ones finish for up to the grace period. Behind the
        front (`--listen-fd`) the front has spent the grace period already when it signals
        its workers: what still runs then was cut, so the worker waits for nothing (else
        `jaxport serve` would end a grace period after its own, not within it)."""
        self.core.state.set_draining()
        try:
            self.listener.close()
        except OSError:
            pass
        grace = 0.0 if self.exit_on_disconnect else self.settings.grace_period_s
        drained = self.slots.wait_idle(grace)
        log.info("stopped", extra={"fields": {"drained": drained}})
        return drained


def _parse_args(argv: list[str]) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(
        prog="python -m jaxport.bridge.worker", add_help=True,
        description="Execution worker of the native front (framed protocol over a Unix socket);"
                    " every other flag is a `jaxport serve` flag.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="Unix socket path to bind and listen on")
    where.add_argument("--listen-fd", type=int,
                       help="an inherited listening Unix socket; exit when its last "
                            "connection closes (how the front starts workers)")
    own, rest = parser.parse_known_args(argv)
    return own, Settings.from_argv(rest)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM (or, with --listen-fd, until the front disconnects)."""
    try:
        own, settings = _parse_args(sys.argv[1:] if argv is None else argv)
    except SettingsError as exc:
        print(f"jaxport worker: error: {exc}", file=sys.stderr)
        return 2
    from jaxport.bridge.core import prepare_process

    prepare_process(settings)  # the process set-up of `jaxport serve`
    if own.listen_fd is not None:
        listener = socket.socket(fileno=own.listen_fd)
    else:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(own.socket)
        except OSError as exc:
            print(f"jaxport worker: error: cannot bind {own.socket}: {exc.strerror}",
                  file=sys.stderr)
            return 1
        listener.listen(64)
    worker = Worker(settings, listener, exit_on_disconnect=own.listen_fd is not None)

    from jaxport.bridge.core import EXIT_CUT, EXIT_DRAINED, EXIT_FORCED, exit_now

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        if worker.stop.is_set():
            log.warning("second signal: exiting now", extra={"fields": {
                "signal": name, "exit_status": EXIT_FORCED}})
            exit_now(EXIT_FORCED)
        log.info("signal received", extra={"fields": {"signal": name}})
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("worker listening", extra={"fields": {
        "socket": own.socket, "listen_fd": own.listen_fd, "pid": os.getpid()}})
    drained = worker.run()
    if own.socket:
        try:
            os.unlink(own.socket)
        except OSError:
            pass
    if not drained:
        exit_now(EXIT_CUT)
    return EXIT_DRAINED


if __name__ == "__main__":
    sys.exit(main())
