"""Fixtures of tests/scale (helpers in scale_helpers.py, imported under that unique name)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scale_helpers import ServeCluster, running_serve_cluster
from support.exports import conformance_suite, copy_of


@pytest.fixture(scope="session")
def suite_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The conformance suite's models as `<repo>/<name>/1/`: a copy of the shared export cache's
    entry (a test writes the repository index into it)."""
    return copy_of(conformance_suite(), tmp_path_factory.mktemp("suite") / "repo")


@pytest.fixture(scope="session")
def serve_cluster(suite_repository: Path) -> Iterator[ServeCluster]:
    """Two Ray nodes, two replicas (one per node), each running a front over the suite's
    repository; Serve's gRPC proxy in front of them too."""
    with running_serve_cluster(suite_repository, nodes=2, replicas=2) as cluster:
        yield cluster
