"""What the frames of one connection from the front mean to the worker: LOAD, EXECUTE, UNLOAD
and CANCEL (docs/frames.md, version 2), answered with one REPLY each. The wire is
`jaxport.bridge.frames`; the process, its loaded models and its execution threads are
`jaxport.bridge.worker`.

Threads take turns reading the connection (leader/followers, `Connection`) and never wait for
work while they read: a LOAD runs on a thread of its own; an EXECUTE that finds one of the
worker's `--threads` execution slots free (`Executor`) runs on the thread that read it, while
another reads on; one that finds none waits in arrival order for the next slot. A request
waiting there is answered at once, without executing, when its CANCEL arrives; one whose
deadline passed while it waited is answered DEADLINE_EXCEEDED when its turn comes. The worker
validates nothing about a request: the front did that (docs/frames.md says what a malformed
frame is, and what the worker checks anyway).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from jaxport.bridge.frames import (
    CANCEL,
    EXECUTE,
    HELLO,
    LOAD,
    NO_DEADLINE,
    PRELUDE,
    UNLOAD,
    VERSION,
    Frame,
    FrameSocket,
    MalformedFrame,
    Payload,
    decode_json,
    decode_tensors,
    encode_json,
    encode_tensors,
    release,
)
from jaxport.protocol.errors import Code, ProtocolError, clip

if TYPE_CHECKING:
    from jaxport.bridge.worker import Worker

log = logging.getLogger("jaxport.bridge.worker")

#: gRPC status numbers by name (`Code` lists them in the numbering's order).
STATUS = {code: number for number, code in enumerate(Code)}
#: XLA's runtime errors start with the status code's name (`RESOURCE_EXHAUSTED: Out of memory`).
_XLA_CODE = re.compile(r"^([A-Z_]+): ")
#: Longest error message sent back (the traceback goes to the worker's log only).
MAX_MESSAGE = 4000


def status_of(exc: BaseException) -> tuple[int, str]:
    """(gRPC status number, one-line message) for an exception raised by a load or an
    execution: a ProtocolError keeps its code and message; an XLA runtime error keeps the code
    its text starts with; anything else is INTERNAL with its type and text."""
    if isinstance(exc, ProtocolError):
        return STATUS[exc.code], exc.message
    text = " ".join(str(exc).split()) or type(exc).__name__
    match = _XLA_CODE.match(text)
    if match and match.group(1) in Code.__members__ and match.group(1) != "OK":
        return STATUS[Code[match.group(1)]], clip(text, MAX_MESSAGE)
    return STATUS[Code.INTERNAL], clip(f"{type(exc).__name__}: {text}", MAX_MESSAGE)


class Execution:
    """One EXECUTE request, from the frame that carried it to its REPLY."""

    __slots__ = ("arrays", "call_id", "cancelled", "conn", "deadline", "model", "payload",
                 "program")

    def __init__(self, conn: Connection, call_id: int, aux: int, model: int, program: int,
                 arrays: Sequence[np.ndarray], payload: Payload) -> None:
        self.conn, self.call_id = conn, call_id
        # The deadline counts from the moment the frame was read (docs/frames.md, aux).
        self.deadline = None if aux == NO_DEADLINE else time.monotonic() + aux / 1e6
        self.model, self.program = model, program
        self.arrays, self.payload = arrays, payload
        self.cancelled = False

    def run(self) -> None:
        """Execute (unless cancelled or expired) and answer; every path answers once."""
        conn = self.conn
        try:
            if self.cancelled:
                code, message, body = STATUS[Code.CANCELLED], "Cancelled", []
            elif self.deadline is not None and time.monotonic() >= self.deadline:
                code, message, body = STATUS[Code.DEADLINE_EXCEEDED], "Deadline Exceeded", []
            else:
                code, message, body = self._execute()
        finally:
            self.arrays = ()
            release(self.payload)
            conn.forget(self.call_id)
        conn.frames.reply(self.call_id, code, message, *body)

    def _execute(self) -> tuple[int, str, list[bytes | memoryview]]:
        loaded = self.conn.worker.models.get(self.model)
        if loaded is None:
            return (STATUS[Code.FAILED_PRECONDITION],
                    f"model {self.model} is not loaded on this worker", [])
        program = loaded.programs.get(self.program)
        if program is None:
            return (STATUS[Code.FAILED_PRECONDITION], f"model {self.model} serves programs "
                    f"{sorted(loaded.programs)}, not program {self.program}", [])
        try:
            results = program.execute(self.arrays)
            body = encode_tensors(results)
        except Exception as exc:
            code, message = status_of(exc)
            log.warning("execution failed", exc_info=True, extra={"fields": {
                "model": self.model, "program": self.program, "code": code}})
            return code, message, []
        size = sum(memoryview(p).nbytes for p in body)
        limit = self.conn.frames.max_frame_bytes
        if size > limit:
            return (STATUS[Code.RESOURCE_EXHAUSTED],
                    f"the results take {size} bytes, over the frame limit of {limit} "
                    "(--max-frame-bytes)", [])
        return 0, "", body


class Executor:
    """The worker's execution slots: at most `threads` executions at once; an EXECUTE that
    finds none free waits in arrival order and is run by the next thread that finishes one. A
    waiting request cancelled leaves the queue and is answered at once."""

    def __init__(self, threads: int) -> None:
        self._limit = threads
        self._busy = 0
        self._queue: deque[Execution] = deque()
        self._lock = threading.Lock()

    def start(self, job: Execution) -> bool:
        """True: a slot is the caller's, to `run` the job in; False: it waits in the queue."""
        with self._lock:
            if self._busy < self._limit:
                self._busy += 1
                return True
            self._queue.append(job)
            return False

    def run(self, job: Execution | None) -> None:
        """Run `job` in the caller's slot, then every job that waits, then free the slot."""
        while job is not None:
            try:
                job.run()
            except Exception:  # never lose a slot
                log.exception("execution error")
            with self._lock:
                job = self._queue.popleft() if self._queue else None
                if job is None:
                    self._busy -= 1

    def cancel(self, job: Execution) -> bool:
        """Mark `job` cancelled; True (and it left the queue) if it had not started."""
        with self._lock:
            job.cancelled = True
            try:
                self._queue.remove(job)
            except ValueError:
                return False
        return True


class Connection:
    """One socket from the front: reads frames, starts requests, answers each once.

    Threads take turns reading (leader/followers): the thread that reads an EXECUTE and gets
    an execution slot for it hands the reading on to an idle thread and executes it itself, so
    no hand-off between threads lies on an execution's path (BenchmarkExecuteMLP, 5 runs
    alternating on the shared 2-core machine: median 258 instead of 304 us per sequential MLP
    round trip), and one thread more than those executing is kept, so a frame (a CANCEL
    above all) is always read at once."""

    def __init__(self, worker: Worker, sock: socket.socket) -> None:
        self.worker = worker
        self.frames = FrameSocket(sock, worker.max_frame_bytes)
        self._executions: dict[int, Execution] = {}
        self._lock = threading.Lock()
        self._lead = threading.Lock()  # held by the one thread reading the socket
        self._done = False  # the connection is closed: threads leave
        self._idle = 0  # this connection's threads not executing (under _lock)
        self._started: Execution | None = None  # set by `_execute`, taken by `_read_one`

    def forget(self, call_id: int) -> None:
        with self._lock:
            self._executions.pop(call_id, None)

    def serve(self) -> None:
        """HELLO, then read and dispatch frames (on this thread and as many more as
        executions need) until the connection ends or a frame is malformed (then it closes:
        docs/frames.md, Errors)."""
        self.frames.send(HELLO, 0, encode_json(self.worker.hello()), aux=VERSION)
        self._idle = 1
        self._follow()

    def _follow(self) -> None:
        while True:
            with self._lead:
                if self._done:
                    return
                job = self._read_one()
                if job is None:
                    continue
                with self._lock:  # this thread leaves the readers: keep one idle
                    self._idle -= 1
                    spawn = self._idle == 0
                    if spawn:
                        self._idle += 1
                if spawn:
                    threading.Thread(target=self._follow, name="worker-conn",
                                     daemon=True).start()
            self.worker.executor.run(job)
            with self._lock:
                self._idle += 1

    def _read_one(self) -> Execution | None:
        """Read and dispatch one frame; an execution to run now in a slot just taken, or
        None. At the end of the connection (or a malformed frame) close it."""
        try:
            frame = self.frames.read()
            why = "" if frame is None else self._dispatch(frame)
        except OSError as exc:
            log.info("connection error", extra={"fields": {"error": str(exc)}})
            frame, why = None, ""
        if frame is not None and why:
            log.error("malformed frame, closing the connection", extra={"fields": {
                "type": frame.ftype, "id": frame.call_id, "error": why}})
            release(frame.payload)
        if frame is None or why:
            self._done = True
            self.frames.close()
            self.worker.connection_closed(self)
            return None
        job, self._started = self._started, None
        return job

    def _dispatch(self, frame: Frame) -> str:
        """Start or answer one frame; a non-empty string says why it is malformed."""
        if frame.ftype == EXECUTE:
            return self._execute(frame)
        if frame.ftype == CANCEL:
            with self._lock:
                job = self._executions.get(frame.call_id)
            if job is not None and self.worker.executor.cancel(job):
                job.run()  # not started: answered CANCELLED now, from this thread
            return ""  # a CANCEL for a request not waiting is ignored
        if frame.ftype == LOAD:
            try:
                request = decode_json(frame.payload)
                number, key = int(request["model"]), str(request["key"])
                location, engine = str(request["location"]), str(request["engine"])
            except (MalformedFrame, KeyError, TypeError, ValueError) as exc:
                self.frames.reply(frame.call_id, STATUS[Code.INTERNAL],
                                  f"malformed LOAD frame: {exc}")
                return ""
            threading.Thread(target=self._load, args=(frame.call_id, number, key, location,
                                                      engine), name=f"load-{key}",
                             daemon=True).start()
            return ""
        if frame.ftype == UNLOAD:
            try:
                number = int(decode_json(frame.payload)["model"])
            except (MalformedFrame, KeyError, TypeError, ValueError) as exc:
                self.frames.reply(frame.call_id, STATUS[Code.INTERNAL],
                                  f"malformed UNLOAD frame: {exc}")
                return ""
            self.worker.unload(number)
            self.frames.reply(frame.call_id, 0)
            return ""
        return f"frame type {frame.ftype} is not one the front sends"

    def _execute(self, frame: Frame) -> str:
        try:
            if len(frame.payload) < PRELUDE.size:
                raise MalformedFrame("EXECUTE payload shorter than its prelude")
            model, program = PRELUDE.unpack_from(frame.payload, 0)
            arrays = decode_tensors(frame.payload, PRELUDE.size)
        except MalformedFrame as exc:
            release(frame.payload)
            self.frames.reply(frame.call_id, STATUS[Code.INTERNAL],
                              f"malformed EXECUTE frame: {exc}")
            return ""
        job = Execution(self, frame.call_id, frame.aux, model, program, arrays, frame.payload)
        with self._lock:
            self._executions[frame.call_id] = job
        if self.worker.executor.start(job):
            self._started = job  # run by the thread that read it (`_follow`)
        return ""

    def _load(self, call_id: int, number: int, key: str, location: str, engine: str) -> None:
        started = time.perf_counter()
        try:
            body = encode_json(self.worker.load(number, key, location, engine))
        except Exception as exc:
            code, message = status_of(exc)
            if not isinstance(exc, ProtocolError):
                log.error("load crashed", exc_info=True, extra={"fields": {"model": key}})
            log.warning("load refused", extra={"fields": {"model": key, "code": code,
                                                          "error": message}})
            self.frames.reply(call_id, code, message)
            return
        log.info("loaded", extra={"fields": {
            "model": key, "number": number, "engine": engine, "pid": os.getpid(),
            "seconds": round(time.perf_counter() - started, 3)}})
        self.frames.reply(call_id, 0, "", body)
