"""The export's single fsync pass before the rename, and the copies it avoids (issue 5)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
from jaxport.artifact import goldens, manifest, weights
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api, trace, write
from jaxport.exporter import goldens as export_goldens


def _fn(p, x):
    return {"y": x @ p["w"] + p["b"], "s": (p["w"] * p["scale"]).sum()}


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((8, 4)).astype(np.float32),
            "b": rng.standard_normal(4).astype(np.float32),
            "scale": np.float32(0.5) * np.ones((), np.float32)}


_INPUTS = {"x": jax.ShapeDtypeStruct((2, 8), np.float32)}


class _SyncSpy:
    """Records every os.fsync (as the path of the fd) and os.replace, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, ...]] = []
        real_fsync, real_replace = os.fsync, os.replace

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            real_fsync(fd)

        def replace(src, dst) -> None:
            self.events.append(("replace", os.fspath(src), os.fspath(dst)))
            real_replace(src, dst)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)

    def check_published(self, out: Path) -> None:
        """Every file and directory of `out` was fsync'd under its staging name before the
        rename that published it, and the parent directory after it."""
        moves = [e for e in self.events if e[0] == "replace" and e[2] == str(out.resolve())]
        assert len(moves) == 1, self.events
        at = self.events.index(moves[0])
        staging = Path(moves[0][1])
        synced_before = {e[1] for e in self.events[:at] if e[0] == "fsync"}
        expected = {str(staging)} | {str(staging / p.relative_to(out)) for p in out.rglob("*")}
        assert expected - synced_before == set()
        assert ("fsync", str(out.resolve().parent)) in self.events[at + 1:]


def test_export_fsyncs_every_file_and_directory_before_the_rename(tmp_path, monkeypatch):
    spy = _SyncSpy(monkeypatch)
    out = tmp_path / "m" / "1"
    api.export(_fn, _params(), _INPUTS, out, quiet=True, goldens=2)
    spy.check_published(out)
    # weights (several files per array), goldens and the manifest are all covered
    names = {p.name for p in out.rglob("*")}
    assert {"zarr.json", "manifest.json", "model.mlirbc", "goldens"} <= names


def test_forced_replace_and_batched_export_fsync_before_the_rename(tmp_path, monkeypatch):
    out = tmp_path / "m" / "1"
    api.export(_fn, _params(), _INPUTS, out, quiet=True, goldens=1)
    spy = _SyncSpy(monkeypatch)
    api.export(lambda p, x: x @ p["w"], _params(), _INPUTS, out, quiet=True, goldens=1,
               force=True, batch_sizes=(1, 2))
    spy.check_published(out)
    assert (out / "model.b2.mlirbc").exists()


def test_a_failed_fsync_publishes_nothing_and_keeps_the_old_artifact(tmp_path, monkeypatch):
    out = tmp_path / "m" / "1"
    api.export(_fn, _params(), _INPUTS, out, quiet=True, goldens=1)
    before = (out / "manifest.json").read_bytes()
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if "/weights/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output error"):
        api.export(_fn, _params(), _INPUTS, out, quiet=True, goldens=1, force=True)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["1"]  # no partial dirs
    assert (out / "manifest.json").read_bytes() == before


def test_fsync_tree_syncs_files_and_directories(tmp_path, monkeypatch):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    (tmp_path / "g").write_bytes(b"y")
    spy = _SyncSpy(monkeypatch)
    write.fsync_tree(tmp_path)
    synced = [e[1] for e in spy.events]
    assert sorted(synced) == sorted(str(tmp_path / p) for p in ("a/b/f", "g", "a/b", "a", "."))
    # files of a directory before the directory itself, children before parents
    assert synced.index(str(tmp_path / "a" / "b" / "f")) < synced.index(str(tmp_path / "a" / "b"))
    assert synced[-1] == str(tmp_path)


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.arange(24, dtype=np.float32).reshape(4, 6).T,  # not C-contiguous
    np.arange(6, dtype=">i4"),  # big-endian: hashed as little-endian
    np.arange(5, dtype=np.float32).astype(ml_dtypes.bfloat16),
    np.array([True, False, True]),
    np.float64(2.5) * np.ones(()),
    np.zeros((0, 3), np.int8),
], ids=["f32", "transposed", "big-endian", "bf16", "bool", "scalar", "empty"])
def test_array_sha256_is_the_digest_of_little_endian_c_order_bytes(array):
    reference = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C").tobytes()
    assert weights.array_sha256(array) == hashlib.sha256(reference).hexdigest()


def test_array_sha256_hashes_the_arrays_own_buffer():
    a = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)
    assert np.shares_memory(weights._c_bytes(a), a)
    assert not np.shares_memory(weights._c_bytes(a.T), a)  # a copy only when needed


def _aligned(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.empty(n + 64, np.uint8)
    off = -raw.ctypes.data % 64
    out = raw[off:off + n].view(dtype).reshape(shape)
    out[...] = np.arange(out.size).reshape(shape)
    return out


def test_params_on_device_keeps_jax_arrays_and_transfers_numpy_once():
    on_device = jax.device_put(np.ones((4, 4), np.float32))
    aligned = _aligned((64, 64), np.float32)
    host = np.arange(7, dtype=np.int32)
    out = export_goldens.params_on_device({"d": on_device, "a": aligned, "h": [host]})
    assert out["d"] is on_device
    assert isinstance(out["a"], jax.Array) and isinstance(out["h"][0], jax.Array)
    # CPU: a 64-byte aligned numpy buffer is used in place, not copied
    assert np.shares_memory(np.asarray(out["a"]), aligned)
    np.testing.assert_array_equal(np.asarray(out["h"][0]), host)


def test_check_params_keeps_jax_arrays_without_a_host_copy():
    d = jax.device_put(np.ones((3,), np.float32))
    checked = trace.check_params({"d": d, "n": [1.0, 2.0] * np.ones(2, np.float64)})
    assert checked["d"] is d
    assert isinstance(checked["n"], np.ndarray)


def test_jax_array_params_export_the_same_artifact_as_numpy_params(tmp_path):
    host = _params()
    device = {k: jax.device_put(v) for k, v in host.items()}
    m_np = api.export(_fn, host, _INPUTS, tmp_path / "np", quiet=True, goldens=2)
    m_jax = api.export(_fn, device, _INPUTS, tmp_path / "jax", quiet=True, goldens=2)
    params = [a for a in m_np.programs[0].arguments
              if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
    assert [a.sha256 for a in params] == [
        a.sha256 for a in m_jax.programs[0].arguments
        if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
    for arg in params:
        np.testing.assert_array_equal(weights.read_parameter(tmp_path / "jax", arg),
                                      np.asarray(host[arg.name.split(".")[1]]))
    for case_np, case_jax in zip(m_np.goldens, m_jax.goldens, strict=True):
        for name, rel in case_np.outputs.items():
            np.testing.assert_array_equal(
                goldens.load_npy(tmp_path / "jax" / case_jax.outputs[name], np.float32),
                goldens.load_npy(tmp_path / "np" / rel, np.float32))
    manifest.verify_files(tmp_path / "jax", manifest.load(tmp_path / "jax"))


_TWO_DEVICES = r"""
import sys
import jax, numpy as np
from jaxport.artifact import manifest, weights
from jaxport.exporter import api, goldens
assert len(jax.devices()) == 2
d0, d1 = jax.devices()
params = {"w": jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), d0),
          "b": jax.device_put(np.ones(4, np.float32), d1), "h": np.float32(2) * np.ones(4)}
moved = goldens.params_on_device(params)
assert {d for a in jax.tree.leaves(moved) for d in a.devices()} == {d0}, moved
m = api.export(lambda p, x: x @ p["w"] + p["b"] * p["h"], params,
               {"x": jax.ShapeDtypeStruct((2, 8), np.float32)}, sys.argv[1], quiet=True)
manifest.verify_files(sys.argv[1], m)
print("ok")
"""


def test_params_on_two_devices_are_gathered_on_one_for_goldens(tmp_path):
    """Committed params on different devices cannot go into one jitted call as they are."""
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES, str(tmp_path / "art")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_a_directory_fsync_the_file_system_refuses_is_tolerated_a_file_fsync_is_not(
        tmp_path, monkeypatch):
    import errno

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    real_fsync = os.fsync

    def no_dir_fsync(fd: int) -> None:
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", no_dir_fsync)
    write.fsync_tree(tmp_path)  # directories refused: tolerated

    def no_file_fsync(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "fsync", no_file_fsync)
    with pytest.raises(OSError, match="Invalid argument"):
        write.fsync_tree(tmp_path)  # a file that cannot be made durable fails the export


def test_slab_writes_of_a_big_array_round_trip_and_report_progress(tmp_path, monkeypatch):
    """Arrays above the slab size go to TensorStore in chunk-aligned slabs, edge chunk too."""
    import json

    from jaxport.exporter.progress import Progress

    monkeypatch.setattr(weights, "_SLAB_BYTES", 1 << 20)
    big = np.arange(10_000 * 1024, dtype=np.float32).reshape(10_000, 1024)  # 39 MiB: 3 chunks
    progress = Progress(quiet=True)
    progress.start_bytes("w", big.nbytes)
    spec = weights.write_parameter(tmp_path, "weights/big", big, progress)
    assert progress._done == big.nbytes
    files = [p for p in (tmp_path / "weights" / "big" / "c").rglob("*") if p.is_file()]
    assert len(files) == 3
    arg = manifest_pb2.Argument(name="big", shape=list(big.shape),
                                dtype=manifest.dtype_message(np.float32),
                                tensorstore_spec_json=json.dumps(spec))
    np.testing.assert_array_equal(weights.read_parameter(tmp_path, arg), big)
