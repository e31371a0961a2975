"""`--allow-custom-call TARGET`: a real jax FFI target (a C++ handler compiled with g++ against
jaxlib's XLA FFI header, loaded with ctypes, registered with jax.ffi.register_ffi_target) is
refused without the flag (naming the target and the flag) and exported with it: recorded in the
manifest, warned about, goldens computed by the kernel itself, and the artifact runs in a
process that registers the kernel."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from exporter_helpers import run_cli
from jaxport import artifact
from jaxport.artifact import manifest

TARGET = "jaxport_test_add_one"

_HANDLER = textwrap.dedent("""
    #include "xla/ffi/api/ffi.h"
    namespace ffi = xla::ffi;
    static ffi::Error AddOneImpl(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> y) {
      const float* in = x.typed_data();
      float* out = y->typed_data();
      for (size_t i = 0; i < x.element_count(); ++i) out[i] = in[i] + 1.0f;
      return ffi::Error::Success();
    }
    XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxportTestAddOne, AddOneImpl,
        ffi::Ffi::Bind().Arg<ffi::Buffer<ffi::F32>>().Ret<ffi::Buffer<ffi::F32>>());
""")

_MODEL = textwrap.dedent("""
    import ctypes
    import jax

    _lib = ctypes.cdll.LoadLibrary({lib!r})
    jax.ffi.register_ffi_target({target!r}, jax.ffi.pycapsule(_lib.JaxportTestAddOne),
                                platform="cpu")


    def init(key):
        return {{"w": jax.random.normal(key, (16, 8))}}


    def predict(params, x):
        y = x @ params["w"]
        return jax.ffi.ffi_call({target!r}, jax.ShapeDtypeStruct(y.shape, y.dtype))(y)
""")


@pytest.fixture(scope="module")
def ffi_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with `ffimodel.py`, whose import loads and registers the compiled kernel."""
    root = tmp_path_factory.mktemp("ffi")
    compiler = shutil.which("g++")
    assert compiler, "g++ is needed to build the FFI kernel (apt-get install g++)"
    (root / "add_one.cc").write_text(_HANDLER)
    lib = root / "libadd_one.so"
    proc = subprocess.run([compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-w",
                           f"-I{jax.ffi.include_dir()}", str(root / "add_one.cc"), "-o",
                           str(lib)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (root / "ffimodel.py").write_text(_MODEL.format(lib=str(lib), target=TARGET))
    return root


def _export(ffi_model: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["export", "ffimodel:predict", "--params", "ffimodel:init", "--input",
            "x:float32[4,16]", "--out", str(out), "--quiet", "--goldens", "1", *extra]
    return run_cli(args, ffi_model, pythonpath=(ffi_model,))


def test_custom_call_refused_without_the_flag_naming_target_and_flag(ffi_model: Path,
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "repo" / "ffi" / "1"
    proc = _export(ffi_model, out)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"jaxport export: error: ffimodel:predict uses custom call target(s) {TARGET} outside "
        "jax's compatibility guarantee; a consumer's runtime must register the same kernel to run "
        f"it: if yours will, pass --allow-custom-call {TARGET} (allow_custom_calls=), else use "
        "standard jax ops")
    assert not out.exists()


def test_allowed_custom_call_is_recorded_warned_and_runs_with_the_kernel(
        ffi_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "repo" / "ffi" / "1"
    proc = _export(ffi_model, out, "--allow-custom-call", TARGET)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == (
        f"jaxport: warning: custom call target(s) {TARGET} are outside jax's compatibility "
        "guarantee (exported with --allow-custom-call): consumers need that kernel registered "
        "under the same name (e.g. jax.ffi.register_ffi_target) to run this artifact, and no "
        "jax or StableHLO version promise covers it")
    m = manifest.load(out)
    assert list(m.allowed_custom_calls) == [TARGET]
    assert TARGET in m.programs[0].custom_call_targets
    assert json.loads((out / "manifest.json").read_text())["allowedCustomCalls"] == [TARGET]
    assert f"stablehlo.custom_call @{TARGET}" in (out / "model.mlir").read_text()

    # Opening it says what the consumer needs (the bridge loads through open() too).
    with pytest.warns(manifest.CompatibilityWarning) as caught:
        art = artifact.open(out)
    assert [str(w.message) for w in caught] == [
        f"{out}: the programs call custom call target(s) {TARGET} outside jax's compatibility "
        "guarantee (exported with --allow-custom-call): the process running them must "
        "register the same kernel (e.g. jax.ffi.register_ffi_target)"]
    # The golden was computed by the kernel: x @ w + 1.
    (golden,) = art.goldens()
    w = art.parameters()["params.w"]
    np.testing.assert_allclose(golden.outputs["output"], golden.inputs["x"] @ w + 1.0,
                               rtol=1e-5, atol=1e-5)
    # A consumer that registers the same kernel runs the artifact (this process).
    lib = ctypes.cdll.LoadLibrary(str(ffi_model / "libadd_one.so"))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.JaxportTestAddOne),
                                platform="cpu")
    got = art.call(x=golden.inputs["x"])["output"]
    np.testing.assert_allclose(got, golden.outputs["output"], rtol=1e-6, atol=1e-6)

    # verify names the target in a warning line (checksums need no kernel).
    checked = run_cli(["verify", str(out), "--checks", "checksums"], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stderr.strip().splitlines() == [
        f"jaxport verify: warning: the programs call custom call target(s) {TARGET} outside "
        "jax's compatibility guarantee (exported with --allow-custom-call): the process running "
        "them must register the same kernel (e.g. jax.ffi.register_ffi_target)",
        "jaxport verify: warning: verify's workers register no custom-call kernel, so their "
        f"execution checks fail on {TARGET}"]


def test_allowing_a_target_the_program_does_not_call_is_refused(ffi_model: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "repo" / "ffi" / "1"
    proc = _export(ffi_model, out, "--allow-custom-call", TARGET,
                   "--allow-custom-call", "jaxport_no_such_kernel")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        "jaxport export: error: --allow-custom-call jaxport_no_such_kernel: ffimodel:predict has "
        f"no custom call to 'jaxport_no_such_kernel' (its custom calls: {TARGET})")
    assert not out.exists()
