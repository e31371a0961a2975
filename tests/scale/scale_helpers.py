"""Helpers of tests/scale (fixtures in conftest.py): the conformance suite's models and how
`make conformance` runs each language's runner. The Ray cluster: tests/support/ray_cluster.py
(shared with tests/bench/scale_out.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFORMANCE = REPO / "tests" / "conformance"
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))  # support.*

from support.exports import suite_models  # noqa: E402
from support.modules import load  # noqa: E402
from support.ray_cluster import ServeCluster, running_serve_cluster  # noqa: E402


def conformance_run() -> Any:
    """tests/conformance/run.py (how `make conformance` runs each language's runner), loaded by
    path under a unique name, like `suite_models`."""
    return load("jaxport_conformance_run", CONFORMANCE / "run.py")


def export_suite_model(model: Any, out: Path) -> None:
    """One suite model exported to `out` with every option it needs (batch sizes, labels,
    x64): the suite's one export call, `models.export_model`, as `make conformance` does."""
    suite_models().export_model(model, out)


__all__ = ["CONFORMANCE", "REPO", "ServeCluster", "conformance_run",
           "export_suite_model", "running_serve_cluster", "suite_models"]
