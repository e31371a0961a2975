"""The wire level between the native front (`bridge/front`, Go) and its execution workers:
the frame header, frame types, shared-memory (memfd) payloads, and reading and writing whole
frames on one Unix socket. No servicer, no calls: `jaxport.bridge.connection` gives frames
their meaning, `jaxport.bridge.worker` is the process.

The protocol (header layout, types with direction and payload, the memfd rule, limits,
errors) is specified once, in docs/frames.md; this module and `bridge/front/frame.go` /
`shm.go` implement it.
"""

from __future__ import annotations

import array
import logging
import mmap
import os
import socket
import struct
import threading
from collections import deque
from collections.abc import Sequence

log = logging.getLogger("jaxport.bridge.worker")  # the worker process's one logger name

HEADER = struct.Struct("<IBBHQq")
CALL, REPLY, READY, CANCEL = 1, 2, 3, 4
STREAM_OPEN, STREAM_MSG, STREAM_HALF_CLOSE, STREAM_REPLY, STREAM_END = 5, 6, 7, 8, 9
METRICS = 10
NO_DEADLINE = -1
#: Flag bit of the type byte: the payload is in the memfd sent with the header (SCM_RIGHTS).
SHM = 0x80
#: Payloads of at least this many bytes are sent in a memfd (docs/frames.md says why).
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

Payload = bytes | bytearray | mmap.mmap
Frame = tuple[int, int, int, int, Payload]
"""(type, method, id, aux, payload) of a frame read; a shared-memory payload is a mapping."""
Status = tuple[int, int, int, str, bytes]
"""(method, call id, code, status message, body) of a REPLY or STREAM_END to write."""


def memfd_with(parts: tuple[bytes, ...]) -> int | None:
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


class FrameSocket:
    """Whole frames over one connected Unix socket: any thread writes (one write lock), one
    thread at a time reads (the caller's lead). A frame over `max_frame_bytes`, or a
    shared-memory frame without its memfd, ends reading (`read_frame` gives None)."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self.closed = threading.Event()  # a write failed or `close` ran
        self._write_lock = threading.Lock()
        self._rbuf = bytearray(READ_BUFFER)
        self._rview = memoryview(self._rbuf)
        self._lo = self._hi = 0  # unread bytes are _rbuf[_lo:_hi]
        self._fds: deque[int] = deque()  # descriptors received, not yet claimed by a frame

    def close(self) -> None:
        """Close the socket and every descriptor received but not claimed."""
        self.closed.set()
        while self._fds:
            os.close(self._fds.popleft())
        self.sock.close()

    # -- writing -----------------------------------------------------------------------------

    def send(self, ftype: int, method: int, code: int, call_id: int, aux: int,
             *parts: bytes) -> None:
        """One frame whose payload is `parts` joined (in a memfd from SHM_THRESHOLD bytes)."""
        length = sum(len(p) for p in parts)
        try:
            if length >= SHM_THRESHOLD:
                fd = memfd_with(parts)
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

    def send_statuses(self, ftype: int, replies: Sequence[Status]) -> None:
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

    def read_frame(self) -> Frame | None:
        """(type, method, id, aux, payload) of the next frame; None when the connection must
        close (end of stream, a frame over the limit, a shared-memory frame without its
        descriptor). A shared-memory payload is a read-only mapping of its memfd."""
        if not self._fill(HEADER.size):
            return None
        length, ftype, method, _code, call_id, aux = HEADER.unpack_from(self._rbuf, self._lo)
        self._lo += HEADER.size
        if length > self.max_frame_bytes:
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
                payload: Payload = (
                    mmap.mmap(fd, length, mmap.MAP_SHARED | mmap.MAP_POPULATE,
                              mmap.PROT_READ) if length else b"")
            finally:
                os.close(fd)
            return ftype & ~SHM, method, call_id, aux, payload
        payload = self._take(length) if length else b""
        if payload is None:
            return None
        return ftype, method, call_id, aux, payload

    def buffered(self) -> tuple[int, int, int, int, memoryview] | None:
        """(type, method, id, aux, payload view) of the next frame if it already lies whole in
        the read buffer (no read, no wait), within the limit; else None. Nothing is consumed:
        `read_frame` takes it. A shared-memory header gives its type with the SHM bit and an
        empty view."""
        avail = self._hi - self._lo
        if avail < HEADER.size:
            return None
        length, ftype, method, _code, call_id, aux = HEADER.unpack_from(self._rbuf, self._lo)
        start = self._lo + HEADER.size
        if ftype & SHM:
            return ftype, method, call_id, aux, self._rview[start:start]
        if avail < HEADER.size + length or length > self.max_frame_bytes:
            return None
        return ftype, method, call_id, aux, self._rview[start:start + length]
