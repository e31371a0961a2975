"""Multi-platform export while `jax_enable_x64` is on: `@main`'s platform index is then an i64
scalar (jax types it like a dimension variable, the default int), so the manifest must say i64
and every consumer must bind an int64. Without x64 it stays i32."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from exporter_helpers import run_cli
from jaxport.artifact import manifest
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api, module
from jaxport.exporter.cli import verify_main

PLATFORMS = ("cuda", "cpu")


def _affine(params, x):
    return jnp.maximum(x @ params["w"] + params["b"], 0.0)  # no tanh: IREE lacks f64 tanh


def _params(dtype: type) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((4, 3)).astype(dtype),
            "b": rng.standard_normal((3,)).astype(dtype)}


def _count(params, n):
    return (n * params["k"]).sum(), n + 1


def _platform_index(m: manifest_pb2.Manifest) -> manifest_pb2.Argument:
    arg = m.programs[0].arguments[0]
    assert arg.role == manifest_pb2.ARGUMENT_ROLE_PLATFORM_INDEX and arg.index == 0
    assert list(arg.shape) == [] and arg.leaf_index == -1
    return arg


def _main_types(art: Path) -> list[str]:
    return module.main_signature((art / "model.mlir").read_text(encoding="utf-8"))


def _verify(art: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = verify_main([str(art), "--require-iree"])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_f64_model_for_two_platforms_has_an_i64_platform_index(tmp_path: Path, capsys) -> None:
    art = tmp_path / "f64" / "1"
    m = api.export(_affine, _params(np.float64),
                   {"x": jax.ShapeDtypeStruct((2, 4), np.float64)}, art,
                   platforms=PLATFORMS, goldens=2, quiet=True)
    arg = _platform_index(m)
    assert (arg.dtype.numpy, arg.dtype.mlir, arg.dtype.datatype, arg.byte_size) == (
        "int64", "i64", "INT64", 8)
    assert _main_types(art)[0] == "tensor<i64>"
    assert manifest.load(art).programs[0].arguments[0] == arg  # what was written
    rc, text = _verify(art, capsys)
    assert rc == 0, text
    assert "jaxport verify: OK" in text


def test_i64_input_for_two_platforms_passes_jaxport_verify_cli(tmp_path: Path) -> None:
    art = tmp_path / "i64" / "1"
    k = np.arange(5, dtype=np.int64)
    m = api.export(_count, {"k": k}, {"n": jax.ShapeDtypeStruct((5,), np.int64)}, art,
                   platforms=PLATFORMS, goldens=2, quiet=True, output_names=["total", "next"])
    assert _platform_index(m).dtype.mlir == "i64"
    proc = run_cli(["verify", str(art), "--require-iree"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jaxport verify: OK" in proc.stdout


def test_x64_enabled_by_the_caller_makes_the_platform_index_i64(tmp_path: Path, capsys) -> None:
    art = tmp_path / "f32x64" / "1"
    with jax.enable_x64(True):
        m = api.export(_affine, _params(np.float32),
                       {"x": jax.ShapeDtypeStruct((2, 4), np.float32)}, art,
                       platforms=PLATFORMS, goldens=1, quiet=True)
    assert _platform_index(m).dtype.mlir == "i64"
    assert _main_types(art)[0] == "tensor<i64>"
    rc, text = _verify(art, capsys)
    assert rc == 0, text


def test_without_x64_the_platform_index_stays_i32(tmp_path: Path) -> None:
    art = tmp_path / "f32" / "1"
    m = api.export(_affine, _params(np.float32),
                   {"x": jax.ShapeDtypeStruct((2, 4), np.float32)}, art,
                   platforms=PLATFORMS, goldens=0, quiet=True)
    arg = _platform_index(m)
    assert (arg.dtype.mlir, arg.byte_size) == ("i32", 4)
    assert _main_types(art)[0] == "tensor<i32>"


def test_manifest_refuses_a_non_integer_platform_index(tmp_path: Path) -> None:
    art = tmp_path / "bad" / "1"
    m = api.export(_affine, _params(np.float32),
                   {"x": jax.ShapeDtypeStruct((2, 4), np.float32)}, art,
                   platforms=PLATFORMS, goldens=0, quiet=True)
    m.programs[0].arguments[0].dtype.CopyFrom(manifest.dtype_message(np.float32))
    with pytest.raises(ArtifactError, match=r"platform_index.*int32 or int64 scalar"):
        manifest.validate(m)


def test_verify_refuses_a_manifest_that_misstates_the_platform_index(tmp_path: Path,
                                                                     capsys) -> None:
    art = tmp_path / "stale" / "1"
    api.export(_affine, _params(np.float64), {"x": jax.ShapeDtypeStruct((2, 4), np.float64)},
               art, platforms=PLATFORMS, goldens=1, quiet=True)
    m = manifest.load(art)
    arg = m.programs[0].arguments[0]
    arg.dtype.CopyFrom(manifest.dtype_message(np.int32))  # what jaxport used to write
    arg.byte_size = 4
    (art / manifest.MANIFEST_FILE).write_text(manifest.to_json(m), encoding="utf-8")
    rc = verify_main([str(art), "--checks", "jaxexport"])
    text = capsys.readouterr()
    assert rc == 1
    assert "jaxexport: fail" in text.out + text.err
    assert "tensor<i64>" in text.out + text.err and "tensor<i32>" in text.out + text.err
