"""System shared memory end to end: Triton's own client (`tritonclient`, in a subprocess, see
`triton_shm.py`) against a real `jaxport serve --system-shared-memory`, and the default
(disabled) server refusing it. Outputs read back from shared memory are compared with JAX
and with the same request answered over the wire."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import bridge_models as m
import jax
import ml_dtypes
import numpy as np
import pytest
from jaxport.exporter.verify.tolerances import tolerance
from support.bridge import BridgeProcess

SCRIPT = Path(__file__).with_name("triton_shm.py")
BF16_TOL = 2.0**-7  # one bf16 ulp (8-bit significand): the engine may round differently
F32_TOL = 1e-5  # f32 matmul + tanh; XLA may fuse/reorder differently from eager jax


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    return {
        "mlp_x": rng.standard_normal((2, 8)).astype(np.float32),
        "mixed_a_u16": a.view(np.uint16),
        "mixed_idx": np.array([-3, 0, 9], np.int64),
        "mixed_flag": np.array([True, False, True]),
    }


def _run(bridge: BridgeProcess, work: Path, *flags: str) -> tuple[dict[str, Any], Any]:
    work.mkdir(parents=True, exist_ok=True)
    np.savez(work / "inputs.npz", **_inputs())
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", bridge.address, "--work", str(work), *flags],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0 and "DONE" in proc.stdout, proc.stdout + proc.stderr
    assert bridge.alive()
    return json.loads((work / "result.json").read_text()), np.load(work / "outputs.npz")


@pytest.fixture(scope="module")
def enabled(repository: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> tuple[dict[str, Any], Any]:
    with BridgeProcess(repository, "--system-shared-memory") as bridge:
        return _run(bridge, tmp_path_factory.mktemp("shm"))


def test_extension_advertised_and_status(enabled) -> None:
    result, _ = enabled
    assert "system_shared_memory" in result["extensions"]
    key_in = result["status_all"]["in"][0]
    assert key_in.startswith("/jaxport_test_") and key_in.endswith("_in")
    assert sorted(result["status_all"]) == ["in", "out"]
    assert result["status_all"]["in"][1:] == [0, 4096]
    assert result["status_all"]["out"][1:] == [64, 1024]
    assert result["status_in"] == {"in": result["status_all"]["in"]}
    assert sorted(result["status_after_unregister_in"]) == ["out"]
    assert result["status_after_unregister_all"] == {}
    assert result["alive"] is True


def test_mlp_through_shared_memory_matches_jax(enabled) -> None:
    result, outputs = enabled
    x = _inputs()["mlp_x"]
    expected = np.asarray(jax.jit(m.mlp)(m.mlp_params(), x))
    np.testing.assert_allclose(outputs["mlp_shm"], expected, rtol=F32_TOL, atol=F32_TOL)
    # Shared-memory requests are served by the workers (JAX), the same request over the wire
    # by the native engine (the XLA CPU plugin, another compilation): they agree within the
    # tolerance `jaxport verify` holds every consumer to (float32: 1e-5 + 1e-4*|x|), not bytes.
    atol, rtol = tolerance("float32")
    np.testing.assert_allclose(outputs["mlp_shm"], outputs["mlp_wire"], rtol=rtol, atol=atol)
    np.testing.assert_allclose(outputs["mlp_wire"], expected, rtol=rtol, atol=atol)
    # Through ModelStreamInfer the shared-memory message goes to a worker too: the same bytes.
    assert result["stream_error"] is None
    np.testing.assert_array_equal(outputs["mlp_stream_shm"], outputs["mlp_shm"])
    # Triton's layout: metadata + shm parameters, an empty raw entry, no contents.
    meta = result["mlp_response_output"]
    assert meta["datatype"] == "FP32" and meta["shape"] == [2, 4]
    assert meta["parameters"] == ["shared_memory_byte_size", "shared_memory_region"]
    assert meta["raw_entries"] == [0]


def test_mixed_dtypes_offsets_and_raw_alongside(enabled) -> None:
    _, outputs = enabled
    ins = _inputs()
    a = ins["mixed_a_u16"].view(ml_dtypes.bfloat16)
    h, s, mask = (np.asarray(v) for v in jax.jit(m.mixed)(
        m.mixed_params(), a, ins["mixed_idx"], ins["mixed_flag"]))
    got_h = outputs["mixed_h_u16"].view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got_h, h.astype(np.float32), rtol=BF16_TOL, atol=BF16_TOL)
    np.testing.assert_array_equal(got_h, outputs["mixed_h_wire"])
    np.testing.assert_array_equal(outputs["mixed_s"], s)  # INT64 over the wire, exact
    np.testing.assert_array_equal(outputs["mixed_s_wire"], s)
    np.testing.assert_array_equal(outputs["mixed_m"], mask)  # BOOL from shm, exact
    np.testing.assert_array_equal(outputs["mixed_m_wire"], mask)


@pytest.mark.parametrize(("case", "code", "words"), [
    ("register_duplicate", "ALREADY_EXISTS", ["'in'", "already registered"]),
    ("register_missing_key", "INVALID_ARGUMENT", ["'/jaxport_no_such_key'", "does not exist"]),
    ("register_escaping_key", "INVALID_ARGUMENT", ["'/../etc/passwd'", "not a plain name"]),
    ("register_beyond_object", "INVALID_ARGUMENT", ["'r3'", "4200", "holds 4096 bytes"]),
    ("status_unknown", "NOT_FOUND", ["'nope'", "not registered"]),
    ("infer_unknown_region", "NOT_FOUND", ["input 'x'", "region 'nope'"]),
    ("infer_wrong_byte_size", "INVALID_ARGUMENT", ["input 'x'", "is 60", "expected 64"]),
    ("infer_beyond_region", "INVALID_ARGUMENT", ["input 'x'", "region 'in'", "4154"]),
    ("infer_output_too_small", "INVALID_ARGUMENT", ["output 'output'", "needs 32 bytes",
                                                    "region 'out' is 16"]),
    ("infer_output_unknown_region", "NOT_FOUND", ["output 'output'", "region 'nope'"]),
    ("unregister_unknown", "OK", []),  # Triton's behaviour: cleanup may run twice
    ("infer_after_unregister", "NOT_FOUND", ["input 'x'", "region 'in'"]),
])
def test_error_paths(enabled, case: str, code: str, words: list[str]) -> None:
    got_code, message = enabled[0]["errors"][case]
    assert got_code == code, (case, message)
    for word in words:
        assert word in message, (case, message)


def test_disabled_by_default_refuses_naming_the_flag(bridge: BridgeProcess,
                                                     tmp_path: Path) -> None:
    result, _ = _run(bridge, tmp_path, "--disabled")
    assert "system_shared_memory" not in result["extensions"]
    for case in ("register", "status", "unregister", "infer"):
        code, message = result["errors"][case]
        assert code == "FAILED_PRECONDITION", (case, message)
        assert "--system-shared-memory" in message and "JAXPORT_SYSTEM_SHARED_MEMORY" in message
    assert "input 'x'" in result["errors"]["infer"][1]
    assert "SystemSharedMemoryRegister" in result["errors"]["register"][1]
    assert result["alive"] is True
