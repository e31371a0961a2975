"""The models the client tests export once per session and serve from a real bridge.

- `echo_<datatype>` (one per row of `jaxport.protocol.dtypes`, all 13): y = x, x of shape
  (2, 3): what goes in comes back bit for bit, so every datatype's raw and typed encodings
  round-trip through the real server (one model per datatype, so a request can leave out the
  datatypes a typed request cannot carry). `spare` is `echo_fp32` again, for load/unload
  tests to flip without touching the others; `echo` is y = x for FP32 (3,), the model
  test_client_install.py calls from a JAX-free venv. Written here because no other test model is an
  identity.
- `mixed`, `slow`, `affine`: reused from `tests/bridge/bridge_models.py` (multi-input/
  output with BF16/INT64/BOOL; a run time chosen by an input; elementwise, here on
  a 40 MiB FP32 tensor).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxport.protocol import dtypes

_BRIDGE_TESTS = Path(__file__).resolve().parents[1] / "bridge"
if str(_BRIDGE_TESTS) not in sys.path:
    sys.path.insert(0, str(_BRIDGE_TESTS))

import bridge_models as bm  # noqa: E402

ECHO_SHAPE = (2, 3)
#: 10 Mi FP32 elements = 40 MiB each way, well within the client's 256 MiB default.
BIG_ELEMENTS = 10 * 1024 * 1024
MIXED_OUTPUTS: tuple[str, ...] = bm.MIXED_OUTPUTS


def echo(params: dict[str, Any], x: jax.Array) -> jax.Array:
    """x unchanged (`params` is empty)."""
    del params
    return x


def echo_name(datatype: str) -> str:
    """The echo model of an OIP datatype, e.g. `echo_bf16`."""
    return f"echo_{datatype.lower()}"


#: name -> (fn, params, input specs, output names or None, goldens)
SPECS: dict[str, tuple[Any, dict[str, np.ndarray], dict[str, jax.ShapeDtypeStruct],
                       tuple[str, ...] | None, int]] = {
    **{
        echo_name(row.datatype): (echo, {}, {"x": jax.ShapeDtypeStruct(ECHO_SHAPE, row.numpy)},
                                  ("y",), 1)
        for row in dtypes.DTYPES
    },
    "echo": (echo, {}, {"x": jax.ShapeDtypeStruct((3,), np.float32)}, ("y",), 1),
    "spare": (echo, {}, {"x": jax.ShapeDtypeStruct(ECHO_SHAPE, np.float32)}, ("y",), 1),
    "mixed": (bm.mixed, bm.mixed_params(), bm.MIXED_INPUTS, bm.MIXED_OUTPUTS, 1),
    "slow": (bm.slow, bm.slow_params(), bm.SLOW_INPUTS, None, 1),
    "big": (bm.affine, bm.affine_params(),
            {"x": jax.ShapeDtypeStruct((BIG_ELEMENTS,), np.float32)}, None, 0),
}


def export_repository(root: Path) -> Path:
    """Export every model of SPECS as `root/<name>/1` (a bridge model repository)."""
    from jaxport.exporter import export

    for name, (fn, params, inputs, outputs, goldens) in SPECS.items():
        export(fn, params, inputs, root / name / "1", output_names=outputs, goldens=goldens,
               quiet=True, name=name)
    return root


def run_jax(name: str, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of model `name` computed by JAX in this process (x64 on, as exported)."""
    fn, params, specs, _, _ = SPECS[name]
    with jax.enable_x64(True):
        out = jax.jit(fn)(params, *(inputs[n] for n in specs))
        return [np.asarray(leaf) for leaf in jax.tree.leaves(out)]
