"""The model core in process: a request is validated once (`Model.prepare`), and what comes
after (`Model.execute`, the batcher) trusts the `Prepared` it gets."""

from __future__ import annotations

from pathlib import Path

import jaxport.artifact
import numpy as np
import pytest
from jaxport.bridge.batcher import BatchingConfig, DynamicBatcher
from jaxport.bridge.loading import LoadError, load_model
from jaxport.bridge.model import Model
from jaxport.protocol.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def mlp(artifacts: dict[str, Path]) -> Model:
    return load_model("mlp", 1, artifacts["mlp"])


def _declared(arrays: dict[str, np.ndarray]) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(name, "FP32", a.shape) for name, a in arrays.items()]


def test_prepare_checks_headers_before_decoding(mlp: Model) -> None:
    decoded = []

    def decode() -> dict[str, np.ndarray]:
        decoded.append(True)
        return {}

    with pytest.raises(InvalidArgumentError, match=r"input 'x': expected shape \[2, 8\], got "
                       r"\[1, 1, 1, 1, 1, 1, 1, 1, \.\.\.\] \(100 dimensions\)"):
        mlp.prepare([("x", "FP32", [1] * 100)], decode)
    with pytest.raises(InvalidArgumentError, match=r"unexpected input 'yyy.*\.\.\.\(1000 chars\)"):
        mlp.prepare([("y" * 1000, "FP32", [2, 8])], decode)
    assert not decoded
    with pytest.raises(InvalidArgumentError, match="missing input 'x'"):
        mlp.prepare([], decode)
    assert decoded == [True]


def test_execute_trusts_a_prepared_request(mlp: Model, artifacts: dict[str, Path],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (case, *_) = jaxport.artifact.open(artifacts["mlp"]).goldens()
    arrays = dict(case.inputs)
    prepared = mlp.prepare(_declared(arrays), lambda: arrays, ["output"])
    assert prepared.outputs == ("output",) and prepared.rows == 1
    assert prepared.program is not None

    def checked_again(*args: object) -> None:
        raise AssertionError("a prepared request was checked again")

    for method in ("_check_declared", "_check_outputs", "_program_for"):
        monkeypatch.setattr(mlp, method, checked_again)
    outputs, timings = mlp.execute(prepared)
    np.testing.assert_allclose(outputs["output"], case.outputs["output"], rtol=1e-5, atol=1e-5)
    assert timings.inferences == 1


def test_a_model_without_batch_sizes_cannot_batch(mlp: Model) -> None:
    with pytest.raises(ValueError, match="differ from the exported sizes"):
        mlp.enable_batching(BatchingConfig([1, 4]))
    assert mlp.batcher is None


def test_a_tampered_artifact_is_a_load_error(artifacts: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "mlp"
    shutil.copytree(artifacts["mlp"], copy)
    mlirbc = copy / "model.mlirbc"
    mlirbc.write_bytes(mlirbc.read_bytes() + b"\0")
    with pytest.raises(LoadError, match=r"^checksum verification failed: .*model\.mlirbc"):
        load_model("mlp", 1, copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(LoadError, match=r"^manifest\.json: .*no manifest\.json"):
        load_model("mlp", 1, copy)


def test_the_batcher_trusts_rows_given_by_prepare(monkeypatch: pytest.MonkeyPatch) -> None:
    def execute(batch_size: int, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": inputs["x"] * 2}

    b = DynamicBatcher(execute, BatchingConfig([1, 4], max_queue_delay_us=0), ["x"], ["y"])
    try:
        def checked_again(*args: object) -> None:
            raise AssertionError("a prepared request was checked again")

        x = np.arange(6, dtype=np.float32).reshape(3, 2)
        assert b.check_rows({"x": x}) == 3
        monkeypatch.setattr(b, "_validate", checked_again)
        out = b.submit({"x": x}, rows=3).result(30)
        np.testing.assert_array_equal(out["y"], x * 2)
    finally:
        b.close(10)
