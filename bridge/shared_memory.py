"""Registered system (POSIX) shared-memory regions: Triton's `system_shared_memory` extension.

Model core (no grpc). A client on the same host creates an object in /dev/shm (`shm_open`),
registers a region of it under a name (`SystemSharedMemoryRegister`: name, key, offset,
byte_size), and then sends tensors by reference: an input's bytes are read from the region,
a requested output is written into it, and only metadata crosses gRPC. This removes the
protobuf/gRPC copies that cap large tensors at ~2.5% of memcpy bandwidth.

Trust boundary (see docs/security.md):
- A key names an object directly in /dev/shm: one plain name (an optional leading '/', as
  `shm_open` takes it, then letters, digits and `._-`), opened without following symlinks,
  regular files only. Anything the server user can read and write there can be registered, so
  the extension is OFF unless `--system-shared-memory` is given.
- The region stays shared with the client, which may write it at any time. Inputs are used in
  place (a read-only `np.frombuffer` view, no copy): a client writing its own input region
  while its request runs changes only its own result, like a caller mutating a buffer it
  passed to a function. The server never writes an input region and reads no region except
  for the request that names it.
- A client that truncates the object below the registered range after registering would make
  the server fault (SIGBUS) when it touches the missing pages; every access first checks the
  object's current size and refuses with FAILED_PRECONDITION, which closes that hole except for
  a truncation racing the check (the reason to enable this only for trusted local clients).
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from jaxport.protocol.codecs import SharedMemoryRef
from jaxport.protocol.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    clip,
)

__all__ = [
    "DISABLED_HINT",
    "EXTENSION",
    "MAX_REGIONS",
    "SHM_ROOT",
    "RegionStatus",
    "SharedMemoryRegistry",
    "disabled_error",
    "key_file_name",
]

EXTENSION = "system_shared_memory"
SHM_ROOT = Path("/dev/shm")
# Each registered region holds one file descriptor and one mapping.
MAX_REGIONS = 1024
_MAX_NAME = 256
_KEY = re.compile(r"/?([A-Za-z0-9._-]{1,255})")
DISABLED_HINT = (
    "system shared memory is disabled on this server; start it with --system-shared-memory "
    "(env JAXPORT_SYSTEM_SHARED_MEMORY=1) to allow same-host clients to pass tensors through "
    "/dev/shm (see docs/security.md)"
)


def disabled_error(what: str) -> FailedPreconditionError:
    """The one error every shared-memory use gets while the extension is off."""
    return FailedPreconditionError(f"{clip(what, 160)}: {DISABLED_HINT}")


def key_file_name(key: str) -> str:
    """The /dev/shm file name a key designates; InvalidArgumentError unless it is a plain name."""
    match = _KEY.fullmatch(key)
    if match is None or match.group(1) in (".", ".."):
        raise InvalidArgumentError(
            f"shared memory key {clip(key)!r} is not a plain name: expected an optional "
            "leading '/' and then 1-255 letters, digits, '.', '_' or '-' (a POSIX shm_open "
            "name like '/input0'); keys name objects directly in /dev/shm"
        )
    return match.group(1)


@dataclass(frozen=True)
class RegionStatus:
    """One registered region as SystemSharedMemoryStatus reports it."""

    name: str
    key: str
    offset: int
    byte_size: int


class _Region:
    """An open object and the mapping of [offset, offset + byte_size) of it."""

    __slots__ = ("byte_size", "delta", "fd", "key", "map", "name", "offset")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int,
                 mapping: mmap.mmap, delta: int) -> None:
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self.fd, self.map, self.delta = fd, mapping, delta

    def status(self) -> RegionStatus:
        return RegionStatus(self.name, self.key, self.offset, self.byte_size)

    def release(self) -> None:
        """Close the descriptor and unmap, unless a request still holds a view (then the
        mapping goes when the last view does)."""
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            self.map.close()
        except BufferError:
            pass  # exported views alive: mmap unmaps when the last one is released


class SharedMemoryRegistry:
    """Thread-safe table of named regions; `resolve` hands tensors their bytes."""

    def __init__(self, root: Path = SHM_ROOT, max_regions: int = MAX_REGIONS) -> None:
        self._root = root
        self._max = max_regions
        self._lock = threading.Lock()
        self._regions: dict[str, _Region] = {}

    # -- register / unregister / status -----------------------------------------------------

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map [offset, offset + byte_size) of /dev/shm/<key> under `name`.

        INVALID_ARGUMENT for a bad name/key/size, a key that does not exist or cannot be
        opened read-write, or a range beyond the object; ALREADY_EXISTS for a taken name (as
        Triton); RESOURCE_EXHAUSTED beyond MAX_REGIONS.
        """
        if not name or len(name) > _MAX_NAME:
            raise InvalidArgumentError(
                f"shared memory region name must be 1-{_MAX_NAME} characters, got "
                f"{len(name)}")
        file_name = key_file_name(key)
        if byte_size <= 0:
            raise InvalidArgumentError(
                f"shared memory region '{clip(name)}': byte_size must be > 0, got {byte_size}")
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(
                    f"shared memory region '{clip(name)}' is already registered (key "
                    f"{self._regions[name].key!r}); unregister it first or use another name")
            if len(self._regions) >= self._max:
                raise ResourceExhaustedError(
                    f"cannot register shared memory region '{clip(name)}': {self._max} "
                    "regions are registered already; unregister some first")
            self._regions[name] = self._open(name, key, file_name, offset, byte_size)

    def _open(self, name: str, key: str, file_name: str, offset: int, byte_size: int
              ) -> _Region:
        where = f"shared memory region '{clip(name)}'"
        path = self._root / file_name
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise InvalidArgumentError(
                f"{where}: shared memory key {key!r} does not exist (no {path}); create it "
                "(shm_open / tritonclient.utils.shared_memory.create_shared_memory_region) "
                "before registering") from None
        except OSError as exc:
            reason = ("it is a symbolic link (not followed)" if exc.errno == errno.ELOOP
                      else exc.strerror or str(exc))
            raise InvalidArgumentError(
                f"{where}: cannot open shared memory key {key!r} read-write: {reason}"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise InvalidArgumentError(
                    f"{where}: shared memory key {key!r} is not a shared memory object")
            if offset + byte_size > info.st_size:
                raise InvalidArgumentError(
                    f"{where}: offset {offset} + byte_size {byte_size} = "
                    f"{offset + byte_size} bytes lies beyond shared memory key {key!r}, "
                    f"which holds {info.st_size} bytes")
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            mapping = mmap.mmap(fd, offset + byte_size - start, mmap.MAP_SHARED,
                                mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except BaseException:
            os.close(fd)
            raise
        return _Region(name, key, offset, byte_size, fd, mapping, offset - start)

    def unregister(self, name: str = "") -> None:
        """Forget one region, or every region when `name` is empty.

        An unknown name is not an error (Triton's behaviour), so cleanup code may run twice.
        Requests already holding the region's bytes finish on them.
        """
        with self._lock:
            if name:
                gone = [self._regions.pop(name)] if name in self._regions else []
            else:
                gone = list(self._regions.values())
                self._regions.clear()
        for region in gone:
            region.release()

    def status(self, name: str = "") -> list[RegionStatus]:
        """One region (NOT_FOUND if unknown, as Triton) or all, sorted by name."""
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise NotFoundError(
                        f"shared memory region '{clip(name)}' is not registered")
                return [region.status()]
            return [r.status() for _, r in sorted(self._regions.items())]

    def close(self) -> None:
        """Unregister everything (server shutdown, tests)."""
        self.unregister("")

    # -- tensor access ----------------------------------------------------------------------

    def resolve(self, kind: str, tensor: str, ref: SharedMemoryRef) -> memoryview:
        """The writable bytes [ref.offset, ref.offset + ref.byte_size) of region ref.region.

        `kind`/`tensor` ("input"/"output", its name) word the errors: NOT_FOUND for an unknown
        region (as Triton), INVALID_ARGUMENT for a range beyond the region, FAILED_PRECONDITION
        when the object was truncated after registering.
        """
        where = f"{kind} '{clip(tensor)}'"
        with self._lock:
            region = self._regions.get(ref.region)
            if region is None:
                raise NotFoundError(
                    f"{where}: shared memory region '{clip(ref.region)}' is not registered "
                    "(SystemSharedMemoryRegister it first)")
            if ref.offset + ref.byte_size > region.byte_size:
                raise InvalidArgumentError(
                    f"{where}: shared_memory_offset {ref.offset} + shared_memory_byte_size "
                    f"{ref.byte_size} = {ref.offset + ref.byte_size} bytes lies beyond shared "
                    f"memory region '{clip(ref.region)}' ({region.byte_size} bytes)")
            size = os.fstat(region.fd).st_size
            if size < region.offset + region.byte_size:
                raise FailedPreconditionError(
                    f"{where}: shared memory key {region.key!r} of region "
                    f"'{clip(ref.region)}' now holds {size} bytes, less than the "
                    f"{region.offset + region.byte_size} registered (truncated after "
                    "registering); re-create it and register the region again")
            start = region.delta + ref.offset
            return memoryview(region.map)[start:start + ref.byte_size]
