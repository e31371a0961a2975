"""The wire between the front (`bridge/front/workers`, Go) and an execution worker: the frame
header, frame types, memfd payloads, the tensor block, and reading and writing whole frames on
one Unix socket. What the frames mean to the worker is `jaxport.bridge.connection`; the
process is `jaxport.bridge.worker`.

The protocol (version 2: header, types with direction and payload, the tensor block, the memfd
rule, limits, errors) is specified once, in docs/frames.md; this module and
`bridge/front/workers/frame.go` implement it and restate nothing of it.
"""

from __future__ import annotations

import array
import json
import logging
import math
import mmap
import os
import socket
import struct
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxport.protocol import dtypes

log = logging.getLogger("jaxport.bridge.worker")  # the worker process's one logger name

VERSION = 2
HEADER = struct.Struct("<IBBHQq")  # length, type, reserved, code, id, aux
HELLO, LOAD, EXECUTE, UNLOAD, CANCEL, REPLY = 1, 2, 3, 4, 5, 6
#: Types the front sends; the worker sends HELLO and REPLY only.
REQUESTS = frozenset((LOAD, EXECUTE, UNLOAD, CANCEL))
NO_DEADLINE = -1
#: Flag bit of the type byte: the payload is in the memfd sent with the header (SCM_RIGHTS).
SHM = 0x80
#: Payloads of at least this many bytes are sent in a memfd.
SHM_THRESHOLD = 1 << 20
#: Tensor data starts at a multiple of this many bytes from the start of the payload.
ALIGN = 64
#: The EXECUTE prelude: model number, program index.
PRELUDE = struct.Struct("<II")
BLOCK = struct.Struct("<II")  # tensor count, reserved
DESCRIPTOR = struct.Struct("<8sIIQQ")  # datatype, rank, reserved, offset, nbytes; dims follow
DIM = struct.Struct("<q")
#: Room for the descriptors that can arrive with one read.
_ANCILLARY = socket.CMSG_SPACE(64 * array.array("i").itemsize)
#: Bytes read from the socket at once (one recv serves every small frame that arrived).
READ_BUFFER = 256 * 1024
#: Frames below this many bytes are written joined to their header (one copy, one write).
SMALL_FRAME = 64 * 1024

Payload = bytes | bytearray | mmap.mmap


class MalformedFrame(ValueError):
    """A payload that does not follow docs/frames.md; the message says what is wrong."""


@dataclass(frozen=True)
class Frame:
    """One frame read: its type (SHM bit cleared), code, id, aux and payload (a read-only
    mapping when it came in a memfd)."""

    ftype: int
    code: int
    call_id: int
    aux: int
    payload: Payload


# -- tensor blocks ---------------------------------------------------------------------------

def _pad(n: int) -> int:
    return -n % ALIGN


def encode_tensors(arrays: Sequence[np.ndarray], start: int = 0) -> list[bytes | memoryview]:
    """The tensor block of `arrays` as parts to send back to back, for a block that begins
    `start` bytes into its payload (offsets count from the payload's start)."""
    head = [BLOCK.pack(len(arrays), 0)]
    size = start + BLOCK.size + sum(DESCRIPTOR.size + DIM.size * a.ndim for a in arrays)
    data: list[bytes | memoryview] = []
    offset = size + _pad(size)
    if offset > size:
        data.append(bytes(offset - size))
    for a in arrays:
        if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar 1-d)
            a = a.copy(order="C")
        datatype = dtypes.by_numpy(a.dtype).datatype.encode("ascii")
        head.append(DESCRIPTOR.pack(datatype, a.ndim, 0, offset, a.nbytes))
        head.extend(DIM.pack(int(d)) for d in a.shape)
        # ml_dtypes (bfloat16) do not export a buffer: view the bytes.
        data.append(memoryview(a.reshape(-1).view(np.uint8)))
        offset += a.nbytes
        if _pad(offset):
            data.append(bytes(_pad(offset)))
            offset += _pad(offset)
    return [b"".join(head), *data]


def decode_tensors(payload: Payload, start: int = 0) -> list[np.ndarray]:
    """The arrays of the tensor block at `start` in `payload`: read-only views of its bytes
    (no copy). MalformedFrame when the block is not one (docs/frames.md)."""
    view = memoryview(payload)
    end = len(view)
    if start + BLOCK.size > end:
        raise MalformedFrame("tensor block truncated")
    count, _ = BLOCK.unpack_from(view, start)
    at = start + BLOCK.size
    out = []
    for i in range(count):
        if at + DESCRIPTOR.size > end:
            raise MalformedFrame(f"tensor {i}: descriptor truncated")
        raw, rank, _, offset, nbytes = DESCRIPTOR.unpack_from(view, at)
        at += DESCRIPTOR.size
        if at + DIM.size * rank > end:
            raise MalformedFrame(f"tensor {i}: shape truncated")
        shape = tuple(DIM.unpack_from(view, at + DIM.size * k)[0] for k in range(rank))
        at += DIM.size * rank
        datatype = raw.rstrip(b"\0").decode("ascii", "replace")
        try:
            dtype = dtypes.by_datatype(datatype).numpy
        except dtypes.UnsupportedDtypeError:
            raise MalformedFrame(f"tensor {i}: unknown datatype {datatype!r}") from None
        if any(d < 0 for d in shape) or math.prod(shape) * dtype.itemsize != nbytes:
            raise MalformedFrame(f"tensor {i}: {nbytes} bytes for {datatype} {list(shape)}")
        if offset + nbytes > end:
            raise MalformedFrame(f"tensor {i}: bytes {offset}..{offset + nbytes} beyond the "
                                 f"payload of {end}")
        out.append(np.frombuffer(view, dtype, math.prod(shape), offset).reshape(shape))
    return out


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode_json(payload: Payload) -> Any:
    try:
        return json.loads(bytes(payload))
    except ValueError as exc:
        raise MalformedFrame(f"payload is not JSON: {exc}") from None


# -- the socket ------------------------------------------------------------------------------

def memfd_with(parts: Sequence[bytes | memoryview]) -> int | None:
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
    thread reads. `read` gives None when the connection must close (end of stream, a frame
    over `max_frame_bytes`, a shared-memory frame without its memfd)."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self._write_lock = threading.Lock()
        self._rbuf = bytearray(READ_BUFFER)
        self._rview = memoryview(self._rbuf)
        self._lo = self._hi = 0  # unread bytes are _rbuf[_lo:_hi]
        self._fds: deque[int] = deque()  # descriptors received, not yet claimed by a frame

    def close(self) -> None:
        """Close the socket and every descriptor received but not claimed."""
        while self._fds:
            os.close(self._fds.popleft())
        self.sock.close()

    # -- writing -----------------------------------------------------------------------------

    def send(self, ftype: int, call_id: int, *parts: bytes | memoryview, code: int = 0,
             aux: int = 0) -> bool:
        """One frame whose payload is `parts` joined (in a memfd from SHM_THRESHOLD bytes);
        False if the socket is gone (the reader notices too)."""
        length = sum(memoryview(p).nbytes for p in parts)
        try:
            if length >= SHM_THRESHOLD:
                fd = memfd_with(parts)
                if fd is not None:
                    try:
                        header = HEADER.pack(length, ftype | SHM, 0, code, call_id, aux)
                        with self._write_lock:
                            self.sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                                          array.array("i", [fd]))])
                    finally:
                        os.close(fd)  # the descriptor in flight holds its own reference
                    return True
            header = HEADER.pack(length, ftype, 0, code, call_id, aux)
            with self._write_lock:
                if length < SMALL_FRAME:
                    self.sock.sendall(b"".join((header, *parts)))
                else:  # a large answer: no extra copy of it
                    self.sock.sendall(header)
                    for p in parts:
                        self.sock.sendall(p)
            return True
        except OSError:
            return False

    def reply(self, call_id: int, code: int, message: str = "",
              *body: bytes | memoryview) -> bool:
        """The REPLY of request `call_id`: the body when `code` is 0, else the message."""
        if code:
            return self.send(REPLY, call_id, message.encode("utf-8", "replace"), code=code)
        return self.send(REPLY, call_id, *body)

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
        (one recv serves many frames); a large one is read straight into its own buffer."""
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

    def read(self) -> Frame | None:
        """The next frame; None when the connection must close (end of stream, a frame over
        the limit or with a non-zero reserved byte, a shared-memory frame without its
        descriptor or shorter than it says)."""
        if not self._fill(HEADER.size):
            return None
        length, ftype, _reserved, code, call_id, aux = HEADER.unpack_from(self._rbuf, self._lo)
        self._lo += HEADER.size
        if length > self.max_frame_bytes:
            log.error("frame over the limit, closing", extra={"fields": {
                "bytes": length, "limit": self.max_frame_bytes}})
            return None
        if _reserved:
            log.error("frame with a non-zero reserved byte, closing")
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
            return Frame(ftype & ~SHM, code, call_id, aux, payload)
        payload = self._take(length) if length else b""
        if payload is None:
            return None
        return Frame(ftype, code, call_id, aux, payload)


def release(payload: Payload) -> None:
    """Unmap a shared-memory payload once nothing uses its bytes (a view still exported keeps
    the mapping until it is collected)."""
    if isinstance(payload, mmap.mmap):
        try:
            payload.close()
        except BufferError:
            pass
