"""Serving a sharded artifact (issue 16): a real bridge started with `--cpu-devices 4` places
the params of tests/models/mlp.py, exported over a 2x2 mesh, across its 4 CPU devices and a
real client (`jaxport.client`) gets the answers of the UNSHARDED original function; a
single-device artifact in the same repository serves as before; `--engine pjrt` serves the
raw `model.mlirbc` on 4 partitions. Without enough devices the sharded version fails to load
with a reason naming the flag.

The export runs the real CLI in a subprocess (pytest's own process keeps one CPU device).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from jaxport.exporter.verify.tolerances import tolerance

MODELS = Path(__file__).resolve().parents[1] / "models"
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))

import mlp  # noqa: E402  (tests/models/mlp.py: x [4, 16] -> output [4, 10])

SHARDED = ["--mesh", "data=2,model=2", "--shard", "x=data", "--shard", "params.w1=None,model",
           "--shard", "params.b1=model", "--shard", "params.w2=model"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sharded/1` (mlp over data=2,model=2), `batched/1` (mlp with batch sizes 2 and 4, rows
    split over data=2), both via the CLI, and `plain/1` (the same mlp on one device, via the
    API)."""
    from jaxport.exporter import export

    root = tmp_path_factory.mktemp("sharded-repo")
    env = {**os.environ, "PYTHONPATH": str(MODELS), "JAX_PLATFORMS": "cpu"}
    for name, shape, flags in (
            ("sharded", "4,16", SHARDED),
            ("batched", "B,16", ["--batch-sizes", "2,4", "--mesh", "data=2", "--shard",
                                 "x=data", "--shard", "output=data"])):
        cmd = [str(Path(sys.executable).parent / "jaxport"), "export", "mlp:predict",
               "--params", "mlp:init", "--input", f"x:float32[{shape}]", "--out",
               str(root / name / "1"), "--goldens", "1", "--quiet", *flags]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                              cwd=root)
        assert proc.returncode == 0, proc.stderr
    export(mlp.predict, mlp.init(jax.random.key(0)),
           {"x": jax.ShapeDtypeStruct((4, 16), np.float32)}, root / "plain" / "1", goldens=1,
           quiet=True)
    return root


def _unsharded(x: np.ndarray) -> np.ndarray:
    return np.asarray(jax.jit(mlp.predict)(mlp.init(jax.random.key(0)), x))


def _assert_plain(got: np.ndarray, want: np.ndarray) -> None:
    """`plain` (one device) is executed by the front's native engine (the XLA CPU plugin,
    another compilation than jax.jit's): equal within `jaxport verify`'s float32 tolerance
    (1e-5 + 1e-4*|x|; measured: a few ulps), not bytes."""
    atol, rtol = tolerance("float32")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_sharded_model_over_4_devices_answers_as_the_unsharded_function(repo: Path) -> None:
    """Through the native front (which forwards --cpu-devices to its workers)."""
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess

    rng = np.random.default_rng(21)
    with BridgeProcess(repo, "--cpu-devices", "4") as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        assert client.model_ready("sharded") and client.model_ready("plain")
        # The native engine runs one device: the sharded versions stay on the workers.
        engines = {name: client.model_config(name).parameters["engine"].string_value
                   for name in ("sharded", "batched", "plain")}
        assert engines == {"sharded": "exported", "batched": "exported", "plain": "native"}
        meta = client.model_metadata("sharded")
        assert [(t.name, list(t.shape)) for t in meta.inputs] == [("x", [4, 16])]
        for _ in range(3):
            x = rng.standard_normal((4, 16)).astype(np.float32)
            want = _unsharded(x)
            got = client.infer("sharded", {"x": x})["output"]
            # float32: w1/b1/w2 are split over `model`, so h @ w2's contraction is summed in
            # two partial sums added across devices, another order than one device's dot
            # (measured: at most 4.8e-7 on outputs of magnitude ~1-3, a few ulps); a misplaced
            # shard is off by O(1).
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            _assert_plain(client.infer("plain", {"x": x})["output"], want)
        # Batch sizes 2 and 4, rows split over data=2: 1 and 3 rows run padded on the program
        # of 2 and 4 (each program placed on the mesh), 4 rows exactly; only its rows return.
        for rows in (1, 3, 4):
            x = rng.standard_normal((rows, 16)).astype(np.float32)
            got = client.infer("batched", {"x": x})["output"]
            assert got.shape == (rows, 10)
            # Rows are split, not contracted: each row is one device's own dot, as unsharded.
            np.testing.assert_allclose(got, _unsharded(x), rtol=1e-6, atol=1e-7)


def test_without_enough_devices_it_fails_to_load_naming_the_flag(repo: Path) -> None:
    from jaxport.client import InferenceClient, InferenceServerError
    from support.bridge import BridgeProcess

    x = np.ones((4, 16), np.float32)
    with BridgeProcess(repo) as bridge, InferenceClient(bridge.address, timeout=60) as client:
        reasons = {m.name: (m.state, m.reason) for m in client.repository_index()}
        assert reasons["sharded"] == (
            "UNAVAILABLE", "the artifact is sharded over 4 devices (mesh data=2,model=2) and "
            "this bridge has 1 cpu device(s): start it with --cpu-devices 4 "
            "(JAXPORT_CPU_DEVICES)")
        with pytest.raises(InferenceServerError) as err:
            client.infer("sharded", {"x": x})
        assert err.value.code == "UNAVAILABLE" and "--cpu-devices 4" in err.value.message
        # The single-device artifact is served as before (by the native engine).
        _assert_plain(client.infer("plain", {"x": x})["output"], _unsharded(x))


def test_pjrt_engine_serves_the_sharded_mlirbc_on_4_partitions(repo: Path) -> None:
    """`--engine pjrt`: `model.mlirbc` compiled with 4 partitions, every argument bound from
    the manifest and laid out per its sharding, each result assembled from its shards."""
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess

    rng = np.random.default_rng(22)
    with BridgeProcess(repo, "--engine", "pjrt", "--cpu-devices", "4") as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        for name, rows in (("sharded", 4), ("batched", 3), ("batched", 4), ("plain", 4)):
            x = rng.standard_normal((rows, 16)).astype(np.float32)
            got = client.infer(name, {"x": x})["output"]
            # As above: the model split reorders h @ w2's sum (float32, a few 1e-7).
            np.testing.assert_allclose(got, _unsharded(x), rtol=1e-5, atol=1e-6)


def test_cpu_devices_must_not_be_negative(repo: Path) -> None:
    proc = subprocess.run([str(Path(sys.executable).parent / "jaxport"), "serve",
                           "--repository", str(repo), "--cpu-devices", "-1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "jaxport serve: error: --cpu-devices must be >= 0, got -1"]
