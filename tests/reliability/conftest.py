"""Fixtures shared by the reliability tests: the test PKI, two small models exported once per
session, per-test model repositories and real bridge processes on port 0 (the session's bridge
with the test gate enabled, see `support.gate`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from live import make_repository  # noqa: E402
from support.certs import Pki, make_pki  # noqa: E402
from support.gate import Gate  # noqa: E402


@pytest.fixture(scope="session")
def front_binary() -> Path:
    """The front `make setup` built, handed over by tests/tiers.py."""
    from support import binaries

    return binaries.path("front")


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, server cert for 127.0.0.1/localhost, a client cert and a rogue client cert."""
    return make_pki(tmp_path_factory.mktemp("pki"))


def _export_all(out: Path) -> None:
    import rel_models
    from jaxport.exporter.api import export

    for name, (fn, params, inputs) in rel_models.MODELS.items():
        export(fn, params, inputs, out / name, quiet=True, goldens=1)


@pytest.fixture(scope="session")
def artifacts() -> dict[str, Path]:
    """`fuzzy` (x FP32[2,3], flag BOOL[2]) and `slow` (x FP32[128,128], iters INT32[]), from
    the shared export cache (read-only)."""
    import rel_models
    from support.exports import exported

    entry = exported("reliability-models", _export_all,
                     sources=[Path(__file__), Path(rel_models.__file__)])
    return {name: entry / name for name in rel_models.MODELS}


@pytest.fixture
def repo_factory(tmp_path: Path, artifacts: dict[str, Path]):
    def make(*names: str, sub: str = "repo") -> Path:
        return make_repository(tmp_path / sub, artifacts, list(names))

    return make


@pytest.fixture(scope="session")
def hostile_repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]):
    """A repository with two good models next to broken and escaping ones (see `broken.py`)."""
    from broken import build_hostile_repository

    return build_hostile_repository(tmp_path_factory.mktemp("hostile"), artifacts)


@pytest.fixture(scope="session")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """The test gate of the session's `bridge`: a test holds its executions of a model."""
    return Gate(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="session")
def bridge(hostile_repo, gate: Gate) -> Iterator:
    """One plain bridge with default limits over the hostile repository, for the session; its
    executions can be held through `gate`."""
    from bridge_launch import start_bridge
    from support.bridge import EXPLICIT

    with start_bridge(hostile_repo.root, *EXPLICIT, env=gate.env) as b:  # tests load/unload
        yield b
