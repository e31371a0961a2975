"""Calls over one connection from the native front: what the frames of
`jaxport.bridge.frames` mean to the servicer. `Connection` reads frames, turns CALL /
STREAM_* frames into calls of the `InferenceServicer` with a `CallContext` (what the servicer
reads of a `grpc.ServicerContext`), groups ModelInfer calls for a dynamic batcher, and answers
through the one error table (`jaxport.bridge.status`). The process around it is
`jaxport.bridge.worker`.

What the front sees (ids and interleaving, CANCEL, the concurrency and size limits, errors,
grouping) is specified in docs/frames.md. How: threads take turns reading the socket
(leader/followers, `Connection._follow`): a call runs on the thread that read its frame while
the next idle thread reads on, and one thread more than the calls running is kept idle, so a
frame is always read at once. Grouped calls (`Connection._group`) start on one thread
(`InferenceServicer.infer_together`) instead of a thread per call blocked on its batch.
"""

from __future__ import annotations

import logging
import mmap
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from jaxport.bridge.frames import (
    CALL,
    CANCEL,
    METRICS,
    READY,
    REPLY,
    STREAM_END,
    STREAM_HALF_CLOSE,
    STREAM_MSG,
    STREAM_OPEN,
    STREAM_REPLY,
    FrameSocket,
    Payload,
    Status,
)
from jaxport.bridge.logs import Throttled
from jaxport.bridge.status import DESERIALIZE_FAILED, status_of

if TYPE_CHECKING:
    from jaxport.bridge.worker import Worker

log = logging.getLogger("jaxport.bridge.worker")  # the worker process's one logger name
#: Calls that ended because their caller went away, logged as grpcio's server logged them.
_GONE_LOG = Throttled(log)

#: Most calls one thread starts together (`Connection._group`).
GROUP_MAX = 256
CONCURRENCY_EXCEEDED = "Concurrent RPC limit exceeded!"  # grpcio's maximum_concurrent_rpcs


class _Aborted(Exception):
    """`context.abort(code, details)` from a handler: that status, as grpc would send it."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class CallContext:
    """What the servicer reads of a `grpc.ServicerContext`: the deadline and liveness.

    `time_remaining()` counts from the moment the frame arrived, with the remaining time the
    front measured when it sent it; `is_active()` is false once the caller cancelled or the
    deadline passed (as grpc's).
    """

    def __init__(self, timeout_us: int) -> None:
        self._deadline = (None if timeout_us < 0
                          else time.monotonic() + timeout_us / 1e6)
        self._cancelled = False  # set once, read by the call's thread (no wait on it)

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def is_active(self) -> bool:
        if self._cancelled:
            return False
        return self._deadline is None or time.monotonic() < self._deadline

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        """True once the front sent CANCEL: the caller went away."""
        return self._cancelled

    def gone(self, method: str) -> tuple[int, str]:
        """The status a call whose caller went away is counted with (DEADLINE_EXCEEDED once
        its deadline passed, else CANCELLED, as grpcio's server counted it), logged at INFO
        at most once per interval per method, without a traceback."""
        remaining = self.time_remaining()
        code = (grpc.StatusCode.DEADLINE_EXCEEDED if remaining is not None and remaining <= 0
                else grpc.StatusCode.CANCELLED)
        _GONE_LOG.log(logging.INFO, f"gone:{method}", "call ended by cancellation",
                      {"method": method, "code": code.name})
        return code.value[0], code.value[1].title()

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)

    def invocation_metadata(self) -> tuple[()]:
        return ()


class _Call:
    """A unary call accepted by `Connection._dispatch` (slot taken, context registered), run
    by calling it. `request`: its parsed message when it was parsed to be grouped."""

    __slots__ = ("call_id", "conn", "context", "method", "payload", "request")

    def __init__(self, conn: Connection, method: Method, call_id: int, context: CallContext,
                 payload: Payload) -> None:
        self.conn, self.method, self.call_id = conn, method, call_id
        self.context, self.payload = context, payload
        self.request: Any = None

    def __call__(self) -> None:
        self.conn._unary(self.method, self.call_id, self.context, self.payload, self.request)


@dataclass(frozen=True)
class Method:
    """One RPC of the service: its wire index, handler and request parser."""

    index: int
    name: str
    full_name: str
    streaming: bool
    parse: Callable[[bytes], Any]
    handler: Callable[..., Any]


def service_methods(servicer: Any) -> list[Method]:
    """Every RPC of `inference.GRPCInferenceService` in declaration order (the wire index)."""
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = []
    for m in service.methods:
        cls = message_factory.GetMessageClass(m.input_type)
        methods.append(Method(
            index=m.index, name=m.name, full_name=f"/{service.full_name}/{m.name}",
            streaming=m.client_streaming or m.server_streaming,
            parse=cls.FromString, handler=getattr(servicer, m.name)))
    return methods


def _parse(method: Method, payload: Payload | memoryview) -> Any:
    """The request message; a shared-memory payload is unmapped once parsed (the message
    holds its own copy of every field)."""
    if not isinstance(payload, mmap.mmap):
        return method.parse(payload)
    view = memoryview(payload)
    try:
        return method.parse(view)
    finally:
        view.release()
        try:
            payload.close()
        except BufferError:  # still exported somewhere: unmapped when collected
            pass


def _status(exc: BaseException, method: str) -> tuple[int, str]:
    if isinstance(exc, _Aborted):
        return exc.code.value[0], exc.details
    code, details = status_of(exc, method)
    return code.value[0], details


class _Stream:
    """Requests of one ModelStreamInfer call, fed by the connection's reader."""

    _END = object()

    def __init__(self, context: CallContext) -> None:
        self.context = context
        self._cond = threading.Condition()
        self._items: list[Any] = []

    def put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify()

    def close(self) -> None:
        self.put(self._END)

    def __iter__(self) -> Iterator[Any]:
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                item = self._items.pop(0)
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class Slots:
    """At most `limit` calls at once (non-blocking), and a wait for none in flight."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._busy = 0
        self._cond = threading.Condition()

    def acquire(self, blocking: bool = False) -> bool:
        with self._cond:
            if self._busy >= self._limit:
                return False
            self._busy += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._busy -= 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)


class Connection:
    """One socket from the front: reads frames, runs calls, writes replies."""

    def __init__(self, worker: Worker, sock: socket.socket) -> None:
        self.worker = worker
        self.frames = FrameSocket(sock, worker.max_frame_bytes)
        self._calls: dict[int, CallContext] = {}
        self._streams: dict[int, _Stream] = {}
        self._lock = threading.Lock()
        self._lead = threading.Lock()  # held by the one thread reading the socket
        self._done = False  # the connection is closed: threads leave
        self._threads_lock = threading.Lock()
        self._threads = self._idle = 0  # this connection's threads; those not in a call

    def serve(self) -> None:
        """Serve the connection on this thread and as many more as calls need (below)."""
        if self.worker.ready.is_set():
            self.frames.send(READY, 0, 0, 0, 0)
        with self._threads_lock:
            self._threads = self._idle = 1
        self._follow()

    def _follow(self) -> None:
        """Leader/followers: the idle thread holding `_lead` reads the next frame; a call is
        then executed by the thread that read it, while the next idle thread reads on. No
        hand-off between a reader and an executing thread on a call's path, and since at most
        `--worker-threads` calls hold a slot and one more thread is kept idle, a frame (a
        CANCEL, a call to refuse) is always read at once."""
        while True:
            with self._lead:
                if self._done:
                    return
                job = None
                try:
                    frame = self.frames.read_frame()
                    if frame is not None:
                        job = self._dispatch(*frame)
                        if job is False:
                            log.error("bad frame, closing", extra={"fields": {
                                "type": frame[0], "method": frame[1]}})
                except OSError as exc:
                    log.info("connection error", extra={"fields": {"error": str(exc)}})
                    frame = None
                if frame is None or job is False:
                    self._done = True
                    self._close()
                    return
                if type(job) is _Call and job.method.index == self.worker.infer_index:
                    job = self._group(job)
            if job is None or job is True:
                continue
            with self._threads_lock:
                self._idle -= 1
                spawn = self._idle == 0
                if spawn:
                    self._threads += 1
                    self._idle += 1
            if spawn:
                threading.Thread(target=self._follow, name="worker-call", daemon=True).start()
            try:
                job()
            except Exception:  # never lose a thread: the idle count must stay true
                log.exception("call failed outside the servicer")
            finally:
                with self._threads_lock:
                    self._idle += 1

    def _group(self, first: _Call) -> Callable[[], None]:
        """`first` (a ModelInfer call) and the ModelInfer calls right behind it, when they go
        to a dynamic batcher: every complete frame already read that is one joins the group
        (no wait for more), and one thread starts them all before waiting for any
        (`InferenceServicer.infer_together`): a batch of N requests costs one thread instead
        of N, each blocked on its future and woken in turn (in process: 57 instead of
        160-186 us of CPU per request at 64 in flight). Answers, statistics and errors are
        the calls' own, as if each had run alone."""
        if not isinstance(first.payload, bytes | bytearray):
            return first  # a shared-memory frame: a large request, batched the usual way
        try:
            first.request = _parse(first.method, first.payload)
        except Exception:
            return first  # answered by the usual path: INTERNAL, grpcio's words
        if not self.worker.servicer.joins_batch(first.request):
            return first
        group = [first]
        while len(group) < GROUP_MAX:
            call = self._next_batched(first.method)
            if call is None:
                break
            if type(call) is _Call:
                group.append(call)
        if len(group) == 1:
            return first
        return lambda: self._together(group)

    def _next_batched(self, method: Method) -> _Call | bool | None:
        """The next frame if it is already in the read buffer, whole, and a ModelInfer call
        for a dynamic batcher: consumed and dispatched (a `_Call`, or True when `_dispatch`
        answered it at once, e.g. no slot); else None and nothing is consumed."""
        ahead = self.frames.buffered()
        if ahead is None:
            return None
        ftype, index, call_id, _aux, view = ahead
        if ftype != CALL or index != method.index:
            return None
        try:  # parsed where it lies (the message copies what it keeps)
            request = _parse(method, view)
        except Exception:
            return None
        if not self.worker.servicer.joins_batch(request):
            return None
        frame = self.frames.read_frame()  # that whole frame, from the buffer: no read, no wait
        assert frame is not None and frame[2] == call_id
        call = self._dispatch(*frame)
        if type(call) is _Call:
            call.request = request
        return call

    def _together(self, group: list[_Call]) -> None:
        """Run a group from `_group`; every call is answered and frees its slot, whatever
        happens, and the replies leave together (`send_statuses`)."""
        try:
            results: list[Any] = self.worker.servicer.infer_together(
                [(call.request, call.context) for call in group])
        except Exception as exc:  # not expected: infer_together answers per call
            log.exception("grouped calls failed")
            results = [exc] * len(group)
        replies: list[Status] = []
        for call, result in zip(group, results, strict=True):
            try:
                code, message, body = self._answer(call.method, result)
            finally:
                self._forget(call.call_id)
                self.worker.slots.release()
            replies.append((call.method.index, call.call_id, code, message, body))
        for call, (_index, _id, code, _message, _body) in zip(group, replies, strict=True):
            self.worker.observe(call.method.full_name, code)
        self.frames.send_statuses(REPLY, replies)

    def _close(self) -> None:
        with self._lock:
            for ctx in self._calls.values():
                ctx.cancel()
            for stream in self._streams.values():
                stream.context.cancel()
                stream.close()
        self.frames.close()
        self.worker.connection_closed(self)

    def _dispatch(self, ftype: int, method_index: int, call_id: int, aux: int,
                  payload: Payload) -> bool | Callable[[], None]:
        """Handle one frame: True when done, False for a malformed frame, or the call to run
        (on the reading thread, once it has handed the lead on)."""
        methods = self.worker.methods
        if ftype == CANCEL:
            with self._lock:
                ctx = self._calls.get(call_id)
                stream = self._streams.get(call_id)
            if ctx is not None or stream is not None:
                log.debug("caller went away", extra={"fields": {"call": call_id}})
            if ctx is not None:
                ctx.cancel()
            if stream is not None:  # no more requests will come: end the servicer's loop
                stream.context.cancel()
                stream.close()
            return True
        if ftype == METRICS:
            self.frames.send_status(REPLY, 0, call_id, 0, "", self.worker.metrics_text())
            return True
        if ftype in (STREAM_MSG, STREAM_HALF_CLOSE):
            with self._lock:
                stream = self._streams.get(call_id)
            if stream is None:
                return True  # the stream already ended (e.g. it failed): drop late messages
            if ftype == STREAM_HALF_CLOSE:
                stream.close()
                return True
            try:
                stream.put(_parse(methods[method_index], payload))
            except Exception:  # grpcio: any deserializer failure
                stream.put(_Aborted(grpc.StatusCode.INTERNAL, DESERIALIZE_FAILED))
            return True
        if ftype not in (CALL, STREAM_OPEN) or method_index >= len(methods):
            return False
        method = methods[method_index]
        if method.streaming != (ftype == STREAM_OPEN):
            return False
        context = CallContext(aux)
        end = REPLY if ftype == CALL else STREAM_END
        if self.worker.stop.is_set():  # SIGTERM: refuse like a draining server
            self.frames.send_status(end, method_index, call_id,
                                    grpc.StatusCode.UNAVAILABLE.value[0],
                                    "worker is shutting down")
            return True
        if not self.worker.slots.acquire(blocking=False):
            self.frames.send_status(end, method_index, call_id,
                                    grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
                                    CONCURRENCY_EXCEEDED)
            return True
        with self._lock:
            if ftype == CALL:
                self._calls[call_id] = context
            else:
                self._streams[call_id] = _Stream(context)
        if ftype == CALL:
            return _Call(self, method, call_id, context, payload)
        return lambda: self._stream(method, call_id)

    def _forget(self, call_id: int) -> None:
        with self._lock:
            self._calls.pop(call_id, None)
            self._streams.pop(call_id, None)

    # -- calls -------------------------------------------------------------------------------

    def _unary(self, method: Method, call_id: int, context: CallContext,
               payload: Payload, request: Any = None) -> None:
        try:
            try:
                if request is None:
                    request = _parse(method, payload)
            except Exception:  # grpcio: any deserializer failure
                code, message, body = grpc.StatusCode.INTERNAL.value[0], DESERIALIZE_FAILED, b""
            else:
                try:
                    response = method.handler(request, context)
                except Exception as exc:
                    response = exc
                code, message, body = self._answer(method, response)
            if code == 0 and context.cancelled():
                (code, message), body = context.gone(method.full_name), b""
        finally:
            # Free the slot before answering: a call the front sends once it has the answer
            # must find it free.
            self._forget(call_id)
            self.worker.slots.release()
        # Counted before the answer leaves: a caller that scrapes /metrics once answered sees
        # its call.
        self.worker.observe(method.full_name, code)
        self.frames.send_status(REPLY, method.index, call_id, code, message, body)

    def _answer(self, method: Method, response: Any) -> tuple[int, str, bytes]:
        """(code, status message, serialized body) of a unary call's response, or of the
        exception its handler raised (the one error table); a response over the message
        limit is RESOURCE_EXHAUSTED."""
        if isinstance(response, Exception):
            return (*_status(response, method.full_name), b"")
        try:
            body = response.SerializeToString()
        except Exception as exc:
            return (*_status(exc, method.full_name), b"")
        code, message = self.worker.check_size(len(body))
        return code, message, b"" if code else body

    def _stream(self, method: Method, call_id: int) -> None:
        with self._lock:
            stream = self._streams[call_id]
        try:
            code, message = 0, ""
            try:
                for response in method.handler(iter(stream), stream.context):
                    body = response.SerializeToString()
                    code, message = self.worker.check_size(len(body))
                    if code:
                        break  # the stream ends with RESOURCE_EXHAUSTED, as grpc's would
                    self.frames.send(STREAM_REPLY, method.index, 0, call_id, 0, body)
            except Exception as exc:
                code, message = _status(exc, method.full_name)
            if code == 0 and stream.context.cancelled():
                code, message = stream.context.gone(method.full_name)
        finally:
            self._forget(call_id)
            self.worker.slots.release()  # before the end frame, as for unary calls
        self.worker.observe(method.full_name, code)
        self.frames.send_status(STREAM_END, method.index, call_id, code, message)
