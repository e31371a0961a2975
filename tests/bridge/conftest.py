"""Session fixtures of the bridge tests: artifacts exported once, real bridges on port 0.

Artifacts (`tests/bridge/bridge_models.py`): `mlp` (FP32), `mixed` (BF16/INT64/BOOL inputs,
three outputs, one parameter jax drops), `slow` (run time grows with its `n` input), `mlp2p`
(lowered for cuda and cpu) and `ignores`. The shared repository holds them all as version 1;
`bridge` serves it as `jaxport serve` does by default (the native engine where it admits a
model, the workers for the others) with explicit model control (EXPLICIT: every model loaded
at the start, load/unload by RPC), `bridge_exported` with `--engine exported` (every model on
the workers, `Exported.call`) and `bridge_pjrt` with `--engine pjrt` (every model on the
workers, raw `model.mlirbc`). Tests that change a repository build their own.

`bridge` runs with the test gate enabled (`gate`, see `support.gate`): a test that needs a
request still executing holds its model there instead of relying on how long it computes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

for _p in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from bridge_helpers import EXPLICIT, make_repository  # noqa: E402
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
from support.bridge import BridgeProcess  # noqa: E402
from support.exports import exported  # noqa: E402
from support.gate import Gate  # noqa: E402

# mlp2p: the mlp lowered for ("cuda", "cpu"): @main takes a platform index first.
# ignores: an input and a parameter the function never reads (dropped from @main).
MODEL_NAMES = ("mlp", "mixed", "slow", "mlp2p", "ignores")


def _export_all(out: Path) -> dict[str, Path]:
    import bridge_models as m
    from jaxport.exporter import export

    specs = {
        "mlp": (m.mlp, m.mlp_params(), m.MLP_INPUTS, None, 2),
        "mixed": (m.mixed, m.mixed_params(), m.MIXED_INPUTS, m.MIXED_OUTPUTS, 2),
        "slow": (m.slow, m.slow_params(), m.SLOW_INPUTS, None, 1),
        "mlp2p": (m.mlp, m.mlp_params(), m.MLP_INPUTS, None, 2),
        "ignores": (m.ignores, m.ignores_params(), m.IGNORES_INPUTS, None, 1),
    }
    paths = {}
    for name, (fn, params, inputs, outputs, n_goldens) in specs.items():
        paths[name] = out / name
        platforms = ("cuda", "cpu") if name == "mlp2p" else ("cpu",)
        export(fn, params, inputs, paths[name], output_names=outputs, goldens=n_goldens,
               quiet=True, name=name, platforms=platforms)
    return paths


@pytest.fixture(scope="session")
def artifacts() -> dict[str, Path]:
    """Artifact directories by model name, from the shared export cache (support.exports: once
    per run, whichever pytest process asks first; read-only)."""
    import bridge_models

    entry = exported("bridge-models", _export_all,
                     sources=[Path(__file__), Path(bridge_models.__file__)])
    return {name: entry / name for name in MODEL_NAMES}


@pytest.fixture(scope="session")
def repository(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    """The shared read-only repository: every model as version 1."""
    return make_repository(tmp_path_factory.mktemp("repo"), artifacts,
                           {n: [1] for n in MODEL_NAMES})


@pytest.fixture(scope="session")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """The test gate of `bridge`: a test holds executions of a model until it releases them."""
    return Gate(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="session")
def bridge(repository: Path, gate: Gate) -> Iterator[BridgeProcess]:
    """A real `jaxport serve` over the shared repository, explicit model control, gate on."""
    with BridgeProcess(repository, *EXPLICIT, env=gate.env) as b:
        yield b


@pytest.fixture(scope="session")
def bridge_exported(repository: Path) -> Iterator[BridgeProcess]:
    """A real bridge serving the shared repository with `--engine exported`."""
    with BridgeProcess(repository, "--engine", "exported") as b:
        yield b


@pytest.fixture(scope="session")
def bridge_pjrt(repository: Path) -> Iterator[BridgeProcess]:
    """A real bridge serving the shared repository with `--engine pjrt`."""
    # Chosen through the environment: covers JAXPORT_* settings too.
    with BridgeProcess(repository, env={"JAXPORT_ENGINE": "pjrt"}) as b:
        yield b


@pytest.fixture(scope="session")
def stub(bridge: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """Generated stub on a channel to `bridge`."""
    with bridge.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="session")
def stub_exported(bridge_exported: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """Generated stub on a channel to `bridge_exported`."""
    with bridge_exported.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.fixture(scope="session")
def stub_pjrt(bridge_pjrt: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    """Generated stub on a channel to `bridge_pjrt`."""
    with bridge_pjrt.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)
