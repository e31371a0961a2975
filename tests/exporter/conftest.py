"""Session fixtures of the exporter tests: each test model is exported once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import exporter_helpers
import pytest
from exporter_helpers import MODELS_DIR, export_model
from jaxport.artifact import manifest
from jaxport.artifact.gen import manifest_pb2
from support.exports import exported


@pytest.fixture(scope="session")
def artifacts() -> Callable[[str], Path]:
    """`artifacts(model_name)` -> `<model_name>/1/` of tests/models/<model_name>.py exported by
    `export_model`, from the shared export cache (support.exports: once per run, whichever
    process asks first; read-only: copy it to change it)."""

    def get(name: str) -> Path:
        def make(out: Path) -> None:
            export_model(name, out / name / "1")

        entry = exported(f"exporter-{name}", make,
                         sources=[MODELS_DIR / f"{name}.py", Path(exporter_helpers.__file__)])
        return entry / name / "1"

    return get


@pytest.fixture
def loaded() -> Callable[[Path], manifest_pb2.Manifest]:
    return manifest.load
