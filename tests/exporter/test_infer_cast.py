"""`jaxport infer --cast` against a real bridge: numpy's default float64/int64 .npy files are
converted to the model's datatypes; without --cast the refusal carries a hint; values that
would change are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest
from exporter_helpers import JAXPORT, REPO, export_model

if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

from support.bridge import BridgeProcess


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    repo = tmp_path_factory.mktemp("cast-repo")
    export_model("nested", repo / "nested" / "1", goldens=0)  # x f32[3,4], scale f32[], ids i32[3]
    with BridgeProcess(repo) as b:
        yield b


def _infer(bridge: BridgeProcess, tmp_path: Path, arrays: dict, *extra: str):
    args = [str(JAXPORT), "infer", "--url", bridge.address, "--model", "nested", "--json"]
    for name, value in arrays.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}=@{tmp_path / f'{name}.npy'}"]
    return subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120)


def _defaults():
    """What numpy gives by default: float64 and int64."""
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((3, 4)), "scale": np.float64(2.0),
            "ids": np.array([1, 0, 9])}


def test_cast_converts_numpy_defaults(bridge: BridgeProcess, tmp_path: Path) -> None:
    arrays = _defaults()
    done = _infer(bridge, tmp_path, arrays, "--cast")
    assert done.returncode == 0, done.stderr
    outputs = {o["name"]: o for o in json.loads(done.stdout)["outputs"]}
    mod = __import__("nested")
    want = mod.predict(mod.init(jax.random.key(0)), arrays["x"].astype(np.float32),
                       np.float32(2.0), arrays["ids"].astype(np.int32))
    # f32 model on the bridge vs. eager f32 here: rounding only (rtol 1e-5, atol 1e-5).
    np.testing.assert_allclose(np.asarray(outputs["head"]["data"], np.float32).reshape(3, 2),
                               np.asarray(want["head"]), rtol=1e-5, atol=1e-5)


def test_without_cast_the_error_hints_at_it(bridge: BridgeProcess, tmp_path: Path) -> None:
    done = _infer(bridge, tmp_path, _defaults())
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert "INVALID_ARGUMENT" in lines[0]
    assert "hint: x is float64" in lines[0] and "pass --cast" in lines[0], lines[0]


def test_cast_refuses_values_that_would_change(bridge: BridgeProcess, tmp_path: Path) -> None:
    arrays = _defaults()
    arrays["ids"] = np.array([1, 0, 2**40])
    done = _infer(bridge, tmp_path, arrays, "--cast")
    assert done.returncode == 1, done.stderr
    assert "input 'ids': --cast cannot convert int64 to the declared INT32" in done.stderr
    arrays = _defaults()
    arrays["ids"] = np.array([1.0, 0.0, 2.0])
    done = _infer(bridge, tmp_path, arrays, "--cast")
    assert done.returncode == 1 and "cannot convert float64" in done.stderr, done.stderr
