"""Fixtures of the front's tests: the Go binaries (cmd/jaxport-front, jaxport-native-goldens)
handed over by tests/tiers.py, the models from the shared export cache, a real front on
127.0.0.1 port 0 (Python workers started only for models that need them).

The front is `make setup`'s (`bridge/front/cmd/jaxport-front`, Go, with cgo); a run without it
fails naming the variable that hands it over (never skipped). Fronts are started
through `support.bridge.BridgeProcess` as `jaxport serve` starts them
(`front_helpers.front_command`); they report their ports in the port file and answer health
SERVING once the initial load has finished (every model open on the engine that serves it).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
for _p in (TESTS, TESTS / "bridge"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from front_helpers import (  # noqa: E402
    FEATURES,
    SIZES,
    front_command,
    rows_model,
    rows_params,
)
from support.bridge import BridgeProcess  # noqa: E402
from support.exports import exported  # noqa: E402
from support.gate import Gate  # noqa: E402

MODELS = ("mlp", "mixed", "slow", "big")
BIG_ELEMENTS = 4 << 20  # 16 MiB of FP32 in and out


def scale(params: dict, x):
    """y = x * s + 0.5 over a flat FP32 vector (`big`: frames of 16 MiB each way)."""
    return x * params["s"] + 0.5


def _export_batched(repo: Path) -> None:
    import jax
    import numpy as np
    from jaxport.exporter import export

    export(rows_model, rows_params(), {"x": jax.ShapeDtypeStruct((1, FEATURES), np.float32)},
           repo / "rows" / "1", batch_sizes=SIZES, goldens=1, quiet=True)


@pytest.fixture(scope="session")
def batched_repo() -> Path:
    """The batching model `rows` (front_helpers) as version 1, exported with batch sizes SIZES
    (shared export cache, read-only)."""
    import front_helpers

    return exported("front-batched", _export_batched,
                    sources=[Path(__file__), Path(front_helpers.__file__)])


@pytest.fixture(scope="session")
def front_binary() -> Path:
    """The front `make setup` built, handed over by tests/tiers.py."""
    from support import binaries

    return binaries.path("front")


@pytest.fixture(scope="session")
def goldens_binary() -> Path:
    """jaxport-native-goldens (cgo), built once by tests/tiers.py and handed over; fails in one
    line when it or the PJRT plugin it runs with is missing."""
    from support import binaries

    binaries.path("pjrt-plugin")
    return binaries.path("native-goldens")


def _export_all(out: Path) -> None:
    import bridge_models as m
    import jax
    import numpy as np
    from jaxport.exporter import export

    specs = {
        "mlp": (m.mlp, m.mlp_params(), m.MLP_INPUTS, None),
        "mixed": (m.mixed, m.mixed_params(), m.MIXED_INPUTS, m.MIXED_OUTPUTS),
        "slow": (m.slow, m.slow_params(), m.SLOW_INPUTS, None),
        "big": (scale, {"s": np.float32(2.0)},
                {"x": jax.ShapeDtypeStruct((BIG_ELEMENTS,), np.float32)}, None),
    }
    for name, (fn, params, inputs, outputs) in specs.items():
        export(fn, params, inputs, out / name, output_names=outputs, goldens=1, quiet=True,
               name=name)


@pytest.fixture(scope="session")
def artifacts() -> dict[str, Path]:
    """mlp (FP32), mixed (BF16/INT64/BOOL, three outputs), slow (INT32 n), big (16 MiB FP32
    in and out), from the shared export cache (read-only)."""
    import bridge_models

    entry = exported("front-models", _export_all,
                     sources=[Path(__file__), Path(bridge_models.__file__)])
    return {name: entry / name for name in MODELS}


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    """Every model as version 1 (read-only: tests that change a repository make their own)."""
    root = tmp_path_factory.mktemp("front-repo")
    for name in MODELS:
        shutil.copytree(artifacts[name], root / name / "1")
    return root


@pytest.fixture(scope="session")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """The test gate of the shared front (holds executions on the test's signal)."""
    return Gate(tmp_path_factory.mktemp("front-gate"))


@pytest.fixture(scope="session")
def front(front_binary: Path, repository: Path, gate: Gate,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """A front serving the shared repository (every model native: no worker starts)."""
    with BridgeProcess(repository, env=gate.env, workdir=tmp_path_factory.mktemp("front"),
                       command=front_command(front_binary, "--workers", "2")) as f:
        yield f


@pytest.fixture(scope="session")
def workers_gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """The test gate of `workers_front`'s workers."""
    return Gate(tmp_path_factory.mktemp("workers-front-gate"))


@pytest.fixture(scope="session")
def workers_front(front_binary: Path, repository: Path, workers_gate: Gate,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """`front` with every model on two Python workers (--pjrt-plugin none), for tests whose
    subject is the workers (killed, stopped, restarted): the native engine would answer
    without them (native serving: test_native_serving.py)."""
    with BridgeProcess(repository, "--pjrt-plugin", "none", env=workers_gate.env,
                       workdir=tmp_path_factory.mktemp("workers-front"),
                       command=front_command(front_binary, "--workers", "2")) as f:
        yield f

