"""Client side of the system shared memory extension: POSIX shared-memory objects in /dev/shm.

A `SharedMemoryRegion` is an object this process creates (or opens) and maps; the server is
told about it with `InferenceClient.register_system_shared_memory(region)` and tensors then
travel through it (`InferenceClient.infer(..., shared_memory_inputs=..., shared_memory_outputs=
...)`). Only works when client and server share a host and the server enables the extension
(`jaxport serve --system-shared-memory`).
"""

from __future__ import annotations

import mmap
import os
import re
from pathlib import Path
from types import TracebackType

import numpy as np
from jaxport.protocol import codecs, dtypes
from jaxport.protocol.errors import InvalidArgumentError

__all__ = ["SHM_ROOT", "SharedMemoryRegion"]

SHM_ROOT = Path("/dev/shm")
_KEY = re.compile(r"/?([A-Za-z0-9._-]{1,255})")


class SharedMemoryRegion:
    """`byte_size` bytes of /dev/shm/<key>, mapped here, registered with a server as `name`.

    `create=True` (default) makes a new object (it must not exist) and removes it on `close()`;
    `create=False` maps an existing one and leaves it in place.
    """

    def __init__(self, name: str, key: str, byte_size: int, *, create: bool = True) -> None:
        match = _KEY.fullmatch(key)
        if match is None or match.group(1) in (".", ".."):
            raise InvalidArgumentError(
                f"shared memory key {key!r} is not a plain name like '/input0' (letters, "
                "digits, '.', '_', '-')")
        if byte_size <= 0:
            raise InvalidArgumentError(f"shared memory region '{name}': byte_size must be > 0")
        self.name, self.key, self.byte_size = name, key, byte_size
        self._path = SHM_ROOT / match.group(1)
        self._created = create
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create
                                                            else 0)
        fd = os.open(self._path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, byte_size)
            self._map: mmap.mmap | None = mmap.mmap(fd, byte_size)
        except BaseException:
            if create:
                self._path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)

    def view(self, offset: int = 0, byte_size: int | None = None) -> memoryview:
        """`byte_size` bytes (default: to the end) at `offset`, writable; bounds checked."""
        if self._map is None:
            raise InvalidArgumentError(f"shared memory region '{self.name}' is closed")
        size = self.byte_size - offset if byte_size is None else byte_size
        if offset < 0 or size < 0 or offset + size > self.byte_size:
            raise InvalidArgumentError(
                f"shared memory region '{self.name}': {size} bytes at offset {offset} lie "
                f"beyond its {self.byte_size} bytes")
        return memoryview(self._map)[offset:offset + size]

    def write(self, array: np.ndarray, offset: int = 0) -> codecs.SharedMemoryRef:
        """Put an array's wire bytes (little-endian, row-major) at `offset`; its reference."""
        data = np.asarray(array)
        try:
            row = dtypes.by_numpy(data.dtype)
        except dtypes.UnsupportedDtypeError as exc:
            raise InvalidArgumentError(str(exc)) from None
        target = self.view(offset, data.nbytes)
        wire = np.frombuffer(target, dtype=row.numpy, count=data.size)
        np.copyto(wire.reshape(data.shape), data, casting="equiv")
        return codecs.SharedMemoryRef(self.name, data.nbytes, offset)

    def resolve(self, kind: str, tensor: str, ref: codecs.SharedMemoryRef) -> memoryview:
        """A `codecs.SharedMemoryResolver` over this one region."""
        if ref.region != self.name:
            raise InvalidArgumentError(
                f"{kind} '{tensor}': shared memory region '{ref.region}' is not mapped here")
        return self.view(ref.offset, ref.byte_size)

    def close(self) -> None:
        """Unmap (once no array made from `view()` is alive) and remove the object if this
        region created it."""
        if self._map is not None:
            mapping, self._map = self._map, None
            try:
                mapping.close()
            except BufferError:
                pass  # views still alive: the mapping goes with the last of them
            if self._created:
                self._path.unlink(missing_ok=True)

    def __enter__(self) -> SharedMemoryRegion:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
