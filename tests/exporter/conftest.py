"""Session fixtures of the exporter tests: each test model is exported once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from exporter_helpers import export_model
from jaxport.artifact import manifest
from jaxport.artifact.gen import manifest_pb2


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`artifacts(model_name)` -> artifact dir, exported once per session."""
    root = tmp_path_factory.mktemp("artifacts")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            out = root / name / "1"
            export_model(name, out)
            cache[name] = out
        return cache[name]

    return get


@pytest.fixture
def loaded() -> Callable[[Path], manifest_pb2.Manifest]:
    return manifest.load
