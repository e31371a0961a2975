"""Triton fidelity (issue 14) with `tritonclient[grpc]` in a subprocess (its protobuf symbols
clash with ours): partial batches on a model exported with batch sizes 1,4 served without
--batching, and the classification extension on FP32 and INT64 outputs. See
`triton_fidelity.py` for the checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.bridge import BridgeProcess

SCRIPT = Path(__file__).with_name("triton_fidelity.py")


def cls_model(params, x):
    """logits = x[:, :5] exactly (a 0/1 selection matrix), counts = 10 * logits as INT64."""
    logits = x @ params["select"]
    return logits, (logits * 10).astype(jnp.int64)


@pytest.fixture(scope="module")
def cls_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("fidelity-repo")
    select = np.eye(8, 5, dtype=np.float32)
    labels = repo.parent / "logits.txt"  # classes of logits; counts has none
    labels.write_text("ant\nbee\ncat\ndog\neel\n", encoding="utf-8")
    with jax.enable_x64(True):
        export(cls_model, {"select": select}, {"x": jax.ShapeDtypeStruct((1, 8), np.float32)},
               repo / "cls" / "1", output_names=["logits", "counts"], batch_sizes=(1, 4),
               goldens=1, quiet=True, labels={"logits": labels})
    return repo


@pytest.fixture(scope="module")
def clsb_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same function with a symbolic batch dimension (--dim B=1..8), no --batch-sizes."""
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("fidelity-dim-repo")
    labels = repo.parent / "clsb-logits.txt"
    labels.write_text("ant\nbee\ncat\ndog\neel\n", encoding="utf-8")
    with jax.enable_x64(True):
        export(cls_model, {"select": np.eye(8, 5, dtype=np.float32)},
               {"x": (("B", 8), np.float32)}, repo / "clsb" / "1", dims={"B": "1..8"},
               output_names=["logits", "counts"], goldens=1, quiet=True,
               labels={"logits": labels})
    return repo


def test_tritonclient_per_row_classification_with_a_dim_batch_axis(clsb_repo: Path) -> None:
    """Issue 28 item 2: B is dimension 0 of every input and output, so top-k is per row (it
    ranked the whole tensor, an index past 4 without its label); the workers serve it (the
    native engine leaves symbolic dimensions to them)."""
    with BridgeProcess(clsb_repo, "--engine", "exported") as bridge:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--url", bridge.address,
                               "--model", "clsb"], capture_output=True, text=True, timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "ALL PASS" in proc.stdout and "FAIL" not in proc.stdout, output


@pytest.mark.parametrize("batching", [(), ("--batching", "--max-queue-delay-us", "0")],
                         ids=["alone", "batching"])
def test_tritonclient_partial_batches_and_classification(cls_repo: Path,
                                                         batching: tuple[str, ...]) -> None:
    with BridgeProcess(cls_repo, *batching) as bridge:
        proc = subprocess.run([sys.executable, str(SCRIPT), "--url", bridge.address],
                              capture_output=True, text=True, timeout=180)
        assert bridge.alive()
        metrics = bridge.metrics()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "ALL PASS" in proc.stdout and "FAIL" not in proc.stdout, output
    assert not [k for k in metrics if ("code", "INTERNAL") in k[1]], metrics
    assert metrics[("jaxport_inference_success_total", (("model", "cls"), ("version", "1")))] > 0
