"""Execution worker behind the native front: today's servicer, reached over a Unix socket.

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

Framing (every integer little-endian). A frame is a 24-byte header then `length` payload bytes:

    u32 length    payload bytes that follow the header
    u8  type      frame type (below)
    u8  method    index of the RPC in `inference.GRPCInferenceService` as declared in
                  proto/inference/grpc_service.proto (0 = ServerLive, ... 5 = ModelInfer,
                  6 = ModelStreamInfer, 7 = ModelConfig, ...); both sides derive it from
                  the descriptor
    u16 code      gRPC status code (replies and stream ends; 0 otherwise)
    u64 id        call id chosen by the front, unique per connection while in flight
    i64 aux       CALL / STREAM_OPEN: the call's remaining time in microseconds when sent
                  (-1 = no deadline); REPLY / STREAM_END: byte length of the status message
                  at the start of the payload; otherwise 0

    type                      direction        payload
    1 CALL                    front -> worker  serialized request message (unary RPC)
    2 REPLY                   worker -> front  status message (utf-8, `aux` bytes), then the
                                               serialized response when code == 0
    3 READY                   worker -> front  none; sent once the initial repository load is
                                               done (at once to a connection made after that)
    4 CANCEL                  front -> worker  none; the caller went away: `is_active()` turns
                                               false (admission stops waiting for a slot);
                                               a stream's request iterator ends
    5 STREAM_OPEN             front -> worker  none; starts ModelStreamInfer call `id`
    6 STREAM_MSG              front -> worker  one serialized ModelInferRequest of stream `id`
    7 STREAM_HALF_CLOSE       front -> worker  none; the client sent its last request
    8 STREAM_REPLY            worker -> front  one serialized ModelStreamInferResponse
    9 STREAM_END              worker -> front  final status of stream `id` (as REPLY, no body)
    10 METRICS                front -> worker  none; answered by a REPLY whose body is the
                                               worker's Prometheus registry in text format
                                               (empty with --metrics-port -1)

Shared memory (both directions, any frame type): a payload of at least SHM_THRESHOLD (1 MiB)
bytes is not sent through the socket. The frame's type byte has the SHM bit (0x80) set,
`length` is still the payload size, only the 24-byte header goes through the socket, and it
carries one file descriptor (SCM_RIGHTS, sent with the header's bytes): a memfd holding exactly
the payload. The receiver takes the descriptors that arrive with the bytes in order (each
belongs to the next SHM header it reads), maps the memfd read-only, and closes and unmaps it
once done; every memfd serves one frame. An SHM header without a descriptor, or with a memfd
shorter than `length`, is a malformed frame. Why 1 MiB: below it a payload fits the socket
buffer (one copy in, one out, no wake-up in between), while a memfd costs ~6 system calls and
a mapping; above it the socket moves the payload in ~200 KiB pieces, each a wake-up of the
other process. The front hands a mapped reply to gRPC without copying it.

Several calls are in flight per connection: frames of different ids interleave freely. At
most `--worker-threads` calls run at once (as the Python server); a call beyond that many is
answered RESOURCE_EXHAUSTED (as grpcio's `maximum_concurrent_rpcs`). Threads take turns reading
the socket (leader/followers): a call runs on the thread that read its frame while the next
idle thread reads on, and one thread more than the calls running is kept idle, so a frame is
always read at once.
ModelInfer calls for a model with dynamic batching whose frames are already whole in the read
buffer behind the one just read form a group (`Connection._group`, at most GROUP_MAX): one
thread starts them all, then finishes each (`InferenceServicer.infer_together`), instead of a
thread per call blocked on its batch. Each call keeps its own answer, error, deadline, CANCEL
and slot. Calls for other models never group: run one after another they would wait behind
each other's executions.
A request that does not parse is INTERNAL "Exception deserializing request!" (grpcio's words);
a response larger than `--max-message-bytes` is RESOURCE_EXHAUSTED for that call. A call's
slot is free again before its answer is sent.
A malformed frame (unknown type, payload over the limit) closes the connection.

In `--listen-fd` mode (how the front starts workers) the worker exits when its last connection
closes, so it never outlives the front. SIGTERM: stop accepting, let in-flight calls finish for
up to `--grace-period-s`; exit statuses as `jaxport serve`: 0 drained, 3 calls were cut at the
end of the grace period, 4 a second signal during the drain.
"""

from __future__ import annotations

import argparse
import array
import logging
import mmap
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from jaxport.bridge.settings import Settings, SettingsError
from jaxport.bridge.status import CODE_NAMES, DESERIALIZE_FAILED, status_of

log = logging.getLogger("jaxport.bridge.worker")

HEADER = struct.Struct("<IBBHQq")
CALL, REPLY, READY, CANCEL = 1, 2, 3, 4
STREAM_OPEN, STREAM_MSG, STREAM_HALF_CLOSE, STREAM_REPLY, STREAM_END = 5, 6, 7, 8, 9
METRICS = 10
NO_DEADLINE = -1
#: Flag bit of the type byte: the payload is in the memfd sent with the header (SCM_RIGHTS).
SHM = 0x80
#: Payloads of at least this many bytes are sent in a memfd (see the module docstring).
SHM_THRESHOLD = 1 << 20
#: Room for the descriptors that can arrive with one read (frames are read ahead).
_ANCILLARY = socket.CMSG_SPACE(64 * array.array("i").itemsize)
#: Bytes read from the socket at once (one recv serves every small frame that arrived).
READ_BUFFER = 256 * 1024
#: Room for the header fields of a request around its largest allowed message.
FRAME_SLACK = 64 * 1024
#: Frames below this many bytes are written joined to their header (one copy, one write);
#: larger ones header first, then the payload as it is.
SMALL_FRAME = 64 * 1024
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

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)

    def invocation_metadata(self) -> tuple[()]:
        return ()


class _Call:
    """A unary call accepted by `Connection._dispatch` (slot taken, context registered), run
    by calling it. `request`: its parsed message when it was parsed to be grouped."""

    __slots__ = ("call_id", "conn", "context", "method", "payload", "request")

    def __init__(self, conn: Connection, method: Method, call_id: int, context: CallContext,
                 payload: bytes | bytearray | mmap.mmap) -> None:
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


def _parse(method: Method, payload: bytes | bytearray | mmap.mmap) -> Any:
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


def _memfd_with(parts: tuple[bytes, ...]) -> int | None:
    """A memfd holding `parts` back to back (written with write(2): the kernel allocates the
    pages, no page faults here), or None if none can be made (then the socket carries it)."""
    try:
        fd = os.memfd_create("jaxport-frame", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                view = view[os.write(fd, view):]
    except OSError:
        os.close(fd)
        return None
    return fd


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


class _Slots:
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
        self.sock = sock
        self._write_lock = threading.Lock()
        self._calls: dict[int, CallContext] = {}
        self._streams: dict[int, _Stream] = {}
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self._rbuf = bytearray(READ_BUFFER)
        self._rview = memoryview(self._rbuf)
        self._lo = self._hi = 0  # unread bytes are _rbuf[_lo:_hi]
        self._lead = threading.Lock()  # held by the one thread reading the socket
        self._done = False  # the connection is closed: threads leave
        self._threads_lock = threading.Lock()
        self._threads = self._idle = 0  # this connection's threads; those not in a call
        self._fds: deque[int] = deque()  # descriptors received, not yet claimed by a frame

    # -- writing -----------------------------------------------------------------------------

    def send(self, ftype: int, method: int, code: int, call_id: int, aux: int,
             *parts: bytes) -> None:
        length = sum(len(p) for p in parts)
        try:
            if length >= SHM_THRESHOLD:
                fd = _memfd_with(parts)
                if fd is not None:
                    try:
                        header = HEADER.pack(length, ftype | SHM, method, code, call_id, aux)
                        with self._write_lock:
                            self.sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                          array.array("i", [fd]))])
                    finally:
                        os.close(fd)  # the descriptor in flight holds its own reference
                    return
            header = HEADER.pack(length, ftype, method, code, call_id, aux)
            with self._write_lock:
                if length < SMALL_FRAME:
                    self.sock.sendall(b"".join((header, *parts)))
                else:  # a large response: no extra copy of it
                    self.sock.sendall(header)
                    for p in parts:
                        self.sock.sendall(p)
        except OSError:
            self.closed.set()  # the front went away; the reader notices too

    def send_status(self, ftype: int, method: int, call_id: int, code: int, message: str,
                    body: bytes = b"") -> None:
        self.send_statuses(ftype, [(method, call_id, code, message, body)])

    def send_statuses(self, ftype: int,
                      replies: Sequence[tuple[int, int, int, str, bytes]]) -> None:
        """Status frames (REPLY / STREAM_END), each (method, call id, code, message, body):
        those under SMALL_FRAME bytes in one write (one system call and one wake-up of the
        front for a group of calls, not one each), larger ones through `send`."""
        small: list[bytes] = []
        for method, call_id, code, message, body in replies:
            text = message.encode("utf-8", "replace")
            if len(text) + len(body) < SMALL_FRAME:
                small += (HEADER.pack(len(text) + len(body), ftype, method, code, call_id,
                                      len(text)), text, body)
            else:
                self.send(ftype, method, code, call_id, len(text), text, body)
        if small:
            try:
                with self._write_lock:
                    self.sock.sendall(b"".join(small))
            except OSError:
                self.closed.set()  # the front went away; the reader notices too

    # -- reading -----------------------------------------------------------------------------

    def _fill(self, n: int) -> bool:
        """At least `n` (<= READ_BUFFER) bytes buffered; False at end of stream."""
        if self._lo + n > READ_BUFFER:  # no room after the unread bytes: move them to the front
            rest = self._hi - self._lo
            self._rbuf[:rest] = self._rbuf[self._lo:self._hi]
            self._lo, self._hi = 0, rest
        while self._hi - self._lo < n:
            k = self._recv_into(self._rview[self._hi:])
            if k == 0:
                return False
            self._hi += k
        return True

    def _recv_into(self, view: memoryview) -> int:
        """recv into `view`, keeping the descriptors that come with the bytes (in order: each
        belongs to the next shared-memory frame header read)."""
        k, ancdata, flags, _ = self.sock.recvmsg_into([view], _ANCILLARY)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                self._fds.extend(fds)
        if flags & socket.MSG_CTRUNC:
            raise OSError("more file descriptors arrived than one read accepts")
        return k

    def _take(self, n: int) -> bytes | bytearray | None:
        """The next `n` bytes (None at end of stream). Small ones come out of the read buffer
        (one recv serves many frames); a large one is read straight into its own buffer
        (protobuf parses a bytearray, so it is copied once, by the kernel)."""
        if n <= READ_BUFFER:
            if not self._fill(n):
                return None
            out = bytes(self._rview[self._lo:self._lo + n])
            self._lo += n
            if self._lo == self._hi:
                self._lo = self._hi = 0
            return out
        buf = bytearray(n)
        view = memoryview(buf)
        got = self._hi - self._lo
        view[:got] = self._rview[self._lo:self._hi]
        self._lo = self._hi = 0
        while got < n:
            k = self._recv_into(view[got:])
            if k == 0:
                return None
            got += k
        return buf

    def _read_frame(self) -> tuple[int, int, int, int, bytes | bytearray | mmap.mmap] | None:
        """(type, method, id, aux, payload) of the next frame; None when the connection must
        close (end of stream, a frame over the limit, a shared-memory frame without its
        descriptor). A shared-memory payload is a read-only mapping of its memfd."""
        if not self._fill(HEADER.size):
            return None
        length, ftype, method, _code, call_id, aux = HEADER.unpack_from(self._rbuf, self._lo)
        self._lo += HEADER.size
        if length > self.worker.max_frame_bytes:
            log.error("frame too large, closing", extra={"fields": {"bytes": length}})
            return None
        if ftype & SHM:
            if not self._fds:
                log.error("shared-memory frame without a descriptor, closing")
                return None
            fd = self._fds.popleft()
            try:
                if os.fstat(fd).st_size < length:
                    log.error("memfd smaller than its frame, closing", extra={"fields": {
                        "bytes": length}})
                    return None
                payload: bytes | bytearray | mmap.mmap = (
                    mmap.mmap(fd, length, mmap.MAP_SHARED | mmap.MAP_POPULATE,
                              mmap.PROT_READ) if length else b"")
            finally:
                os.close(fd)
            return ftype & ~SHM, method, call_id, aux, payload
        payload = self._take(length) if length else b""
        if payload is None:
            return None
        return ftype, method, call_id, aux, payload

    def serve(self) -> None:
        """Serve the connection on this thread and as many more as calls need (below)."""
        if self.worker.ready.is_set():
            self.send(READY, 0, 0, 0, 0)
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
                    frame = self._read_frame()
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
        avail = self._hi - self._lo
        if avail < HEADER.size:
            return None
        length, ftype, index, _code, call_id, _aux = HEADER.unpack_from(self._rbuf, self._lo)
        start = self._lo + HEADER.size
        if ftype != CALL or index != method.index or avail < HEADER.size + length \
                or length > self.worker.max_frame_bytes:
            return None
        try:  # parsed where it lies (the message copies what it keeps)
            request = _parse(method, self._rview[start:start + length])
        except Exception:
            return None
        if not self.worker.servicer.joins_batch(request):
            return None
        frame = self._read_frame()  # that whole frame, from the buffer: no read, no wait
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
        replies: list[tuple[int, int, int, str, bytes]] = []
        for call, result in zip(group, results, strict=True):
            try:
                code, message, body = self._answer(call.method, result)
            finally:
                self._forget(call.call_id)
                self.worker.slots.release()
            replies.append((call.method.index, call.call_id, code, message, body))
        self.send_statuses(REPLY, replies)
        for call, (_index, _id, code, _message, _body) in zip(group, replies, strict=True):
            self.worker.observe(call.method.full_name, code)

    def _close(self) -> None:
        self.closed.set()
        while self._fds:
            os.close(self._fds.popleft())
        with self._lock:
            for ctx in self._calls.values():
                ctx.cancel()
            for stream in self._streams.values():
                stream.context.cancel()
                stream.close()
        self.sock.close()
        self.worker.connection_closed(self)

    def _dispatch(self, ftype: int, method_index: int, call_id: int, aux: int,
                  payload: bytes | bytearray) -> bool | Callable[[], None]:
        """Handle one frame: True when done, False for a malformed frame, or the call to run
        (on the reading thread, once it has handed the lead on)."""
        methods = self.worker.methods
        if ftype == CANCEL:
            with self._lock:
                ctx = self._calls.get(call_id)
                stream = self._streams.get(call_id)
            if ctx is not None:
                ctx.cancel()
            if stream is not None:  # no more requests will come: end the servicer's loop
                stream.context.cancel()
                stream.close()
            return True
        if ftype == METRICS:
            self.send_status(REPLY, 0, call_id, 0, "", self.worker.metrics_text())
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
            self.send_status(end, method_index, call_id, grpc.StatusCode.UNAVAILABLE.value[0],
                             "worker is shutting down")
            return True
        if not self.worker.slots.acquire(blocking=False):
            self.send_status(end, method_index, call_id,
                             grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], CONCURRENCY_EXCEEDED)
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
               payload: bytes | bytearray, request: Any = None) -> None:
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
        finally:
            # Free the slot before answering: a call the front sends once it has the answer
            # must find it free.
            self._forget(call_id)
            self.worker.slots.release()
        self.send_status(REPLY, method.index, call_id, code, message, body)
        self.worker.observe(method.full_name, code)

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
                    self.send(STREAM_REPLY, method.index, 0, call_id, 0, body)
            except Exception as exc:
                code, message = _status(exc, method.full_name)
            if code == 0 and stream.context.cancelled():
                # The caller went away (CANCEL): counted as grpcio's server counts it.
                code, message = grpc.StatusCode.CANCELLED.value[0], "Cancelled"
        finally:
            self._forget(call_id)
            self.worker.slots.release()  # before the end frame, as for unary calls
        self.send_status(STREAM_END, method.index, call_id, code, message)
        self.worker.observe(method.full_name, code)


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
        self.slots = _Slots(settings.worker_threads)
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
        """One call finished: `jaxport_grpc_requests_total`, as the interceptor's observer."""
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
            conn.send(READY, 0, 0, 0, 0)

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
        """Refuse new calls, let in-flight ones finish for up to the grace period."""
        self.core.state.set_draining()
        try:
            self.listener.close()
        except OSError:
            pass
        drained = self.slots.wait_idle(self.settings.grace_period_s)
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
