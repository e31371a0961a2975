"""`jaxport verify`'s checksums check counts each parameter once, however many programs (batch
sizes, buckets) share the weights."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jaxport.exporter import api, verify


def test_parameters_counted_once_across_programs(tmp_path: Path) -> None:
    params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32),
              "s": np.float32(2.0)}
    out = tmp_path / "m"
    api.export(lambda p, x: x @ p["w"] * p["s"] + p["b"], params,
               {"x": jax.ShapeDtypeStruct((1, 3), jnp.float32)}, out, batch_sizes=[1, 2, 4],
               goldens=0, quiet=True)
    [result] = verify.run_checks(out, checks=["checksums"])
    assert result.status == "pass"
    assert result.detail.endswith(", 3 parameters"), result.detail
