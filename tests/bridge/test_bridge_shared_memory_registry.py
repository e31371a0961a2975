"""The shared-memory registry (model core, no server): real files, real mmap, real /dev/shm."""

from __future__ import annotations

import os
import threading
from multiprocessing import shared_memory as mp_shm
from pathlib import Path

import numpy as np
import pytest
from jaxport.bridge.settings import Settings
from jaxport.bridge.shared_memory import SharedMemoryRegistry, disabled_error, key_file_name
from jaxport.protocol import codecs
from jaxport.protocol.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)

Ref = codecs.SharedMemoryRef


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory standing in for /dev/shm (same open/mmap path; tests stay isolated)."""
    return tmp_path


@pytest.fixture
def registry(root: Path):
    reg = SharedMemoryRegistry(root=root)
    yield reg
    reg.close()


def make_object(root: Path, name: str, size: int) -> Path:
    path = root / name
    path.write_bytes(bytes(size))
    return path


def test_register_status_unregister(root: Path, registry: SharedMemoryRegistry) -> None:
    make_object(root, "obj", 8192)
    registry.register("a", "/obj", 0, 4096)
    registry.register("b", "obj", 4096, 100)  # key without the leading '/' works too
    assert [(s.name, s.key, s.offset, s.byte_size) for s in registry.status()] == [
        ("a", "/obj", 0, 4096), ("b", "obj", 4096, 100)]
    assert [s.name for s in registry.status("b")] == ["b"]
    registry.unregister("a")
    assert [s.name for s in registry.status()] == ["b"]
    registry.unregister("a")  # unknown name: no error (Triton's behaviour)
    registry.unregister()
    assert registry.status() == []


def test_bytes_at_offsets_are_the_objects_bytes(root: Path,
                                                registry: SharedMemoryRegistry) -> None:
    path = make_object(root, "obj", 3 * 4096)
    data = np.arange(3 * 4096, dtype=np.uint8)
    path.write_bytes(data.tobytes())
    registry.register("r", "/obj", 5000, 2000)  # not page-aligned: mapping starts below it
    view = registry.resolve("input", "x", Ref("r", 100, 10))
    assert bytes(view) == data[5010:5110].tobytes()
    view[:4] = b"\xff\xfe\xfd\xfc"  # writable (outputs), and shared with the file
    del view
    assert path.read_bytes()[5010:5014] == b"\xff\xfe\xfd\xfc"


def test_real_dev_shm_object() -> None:
    block = mp_shm.SharedMemory(create=True, size=4096)
    registry = SharedMemoryRegistry()
    try:
        block.buf[:8] = np.arange(2, dtype=np.float32).tobytes()
        registry.register("real", "/" + block.name, 0, 4096)
        view = registry.resolve("input", "x", Ref("real", 8))
        np.testing.assert_array_equal(np.frombuffer(view, np.float32), [0.0, 1.0])
        del view
    finally:
        registry.close()
        block.close()
        block.unlink()


def test_duplicate_name(root: Path, registry: SharedMemoryRegistry) -> None:
    make_object(root, "obj", 64)
    registry.register("a", "/obj", 0, 64)
    with pytest.raises(AlreadyExistsError, match="region 'a' is already registered"):
        registry.register("a", "/obj", 0, 32)


@pytest.mark.parametrize("key", ["", "/", "a/b", "/../etc/passwd", "..", "/.", "x\x00y",
                                 "x" * 256, "sp ace", "//x"])
def test_keys_must_be_plain_names(root: Path, registry: SharedMemoryRegistry, key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a plain name"):
        registry.register("r", key, 0, 8)


def test_key_file_name() -> None:
    assert key_file_name("/input0") == "input0"
    assert key_file_name("jaxport_1.in-2") == "jaxport_1.in-2"


def test_missing_key_symlink_directory(root: Path, registry: SharedMemoryRegistry,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    with pytest.raises(InvalidArgumentError, match=r"region 'r': shared memory key '/nope' "
                                                   "does not exist"):
        registry.register("r", "/nope", 0, 8)
    outside = make_object(tmp_path_factory.mktemp("outside"), "secret", 64)
    (root / "link").symlink_to(outside)
    with pytest.raises(InvalidArgumentError, match="'/link' read-write: it is a symbolic link"):
        registry.register("r", "/link", 0, 8)
    (root / "dir").mkdir()
    with pytest.raises(InvalidArgumentError, match="cannot open shared memory key '/dir'"):
        registry.register("r", "/dir", 0, 8)
    assert registry.status() == []


def test_range_beyond_object_and_bad_sizes(root: Path, registry: SharedMemoryRegistry) -> None:
    make_object(root, "obj", 4096)
    with pytest.raises(InvalidArgumentError, match=r"region 'r': offset 4000 \+ byte_size 200 "
                                                   "= 4200 bytes lies beyond shared memory key "
                                                   "'/obj', which holds 4096 bytes"):
        registry.register("r", "/obj", 4000, 200)
    with pytest.raises(InvalidArgumentError, match="byte_size must be > 0, got 0"):
        registry.register("r", "/obj", 0, 0)
    with pytest.raises(InvalidArgumentError, match="region name must be 1-256 characters"):
        registry.register("", "/obj", 0, 8)
    assert registry.status() == []


def test_resolve_errors(root: Path, registry: SharedMemoryRegistry) -> None:
    path = make_object(root, "obj", 8192)
    with pytest.raises(NotFoundError, match="input 'x': shared memory region 'r' is not "
                                            "registered"):
        registry.resolve("input", "x", Ref("r", 8))
    with pytest.raises(NotFoundError, match="region 'zz' is not registered"):
        registry.status("zz")
    registry.register("r", "/obj", 4096, 4096)
    with pytest.raises(InvalidArgumentError, match=r"output 'y': shared_memory_offset 4000 \+ "
                                                   "shared_memory_byte_size 200 = 4200 bytes "
                                                   r"lies beyond shared memory region 'r' \(4096"):
        registry.resolve("output", "y", Ref("r", 200, 4000))
    # The client truncates the object after registering: refused instead of a SIGBUS.
    os.truncate(path, 4096)
    with pytest.raises(FailedPreconditionError, match="input 'x': shared memory key '/obj' of "
                                                      "region 'r' now holds 4096 bytes, less "
                                                      "than the 8192 registered"):
        registry.resolve("input", "x", Ref("r", 8))


def test_unregister_while_a_request_holds_the_bytes(root: Path,
                                                    registry: SharedMemoryRegistry) -> None:
    path = make_object(root, "obj", 4096)
    path.write_bytes(np.full(1024, 3, np.float32).tobytes())
    registry.register("r", "/obj", 0, 4096)
    held = np.frombuffer(registry.resolve("input", "x", Ref("r", 4096)), np.float32)
    registry.unregister("r")  # mapping stays until the request lets go
    np.testing.assert_array_equal(held, np.full(1024, 3, np.float32))
    with pytest.raises(NotFoundError):
        registry.resolve("input", "x", Ref("r", 8))


def test_region_limit(root: Path) -> None:
    make_object(root, "obj", 64)
    registry = SharedMemoryRegistry(root=root, max_regions=2)
    registry.register("a", "/obj", 0, 8)
    registry.register("b", "/obj", 8, 8)
    with pytest.raises(ResourceExhaustedError, match="cannot register shared memory region "
                                                     "'c': 2 regions are registered"):
        registry.register("c", "/obj", 16, 8)
    registry.close()


def test_concurrent_register_resolve_unregister(root: Path,
                                                registry: SharedMemoryRegistry) -> None:
    make_object(root, "obj", 1 << 16)
    failures: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for n in range(50):
                name = f"w{i}-{n}"
                registry.register(name, "/obj", (i * 4096) % (1 << 16), 4096)
                view = registry.resolve("input", "x", Ref(name, 64, 8))
                assert len(view) == 64
                registry.unregister(name)
                del view
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert registry.status() == []


def test_setting_flag_env_and_default(tmp_path: Path) -> None:
    assert Settings.from_argv(["--repository", str(tmp_path)], {}).system_shared_memory is False
    assert Settings.from_argv(["--repository", str(tmp_path), "--system-shared-memory"],
                              {}).system_shared_memory is True
    assert Settings.from_argv(["--repository", str(tmp_path)],
                              {"JAXPORT_SYSTEM_SHARED_MEMORY": "1"}).system_shared_memory is True


def test_disabled_error_names_the_flag_and_stays_short() -> None:
    err = disabled_error("input '" + "x" * 100_000 + "' uses shared memory")
    assert err.code == "FAILED_PRECONDITION"
    assert "--system-shared-memory" in err.message
    assert "JAXPORT_SYSTEM_SHARED_MEMORY=1" in err.message
    assert len(err.message) < 600
