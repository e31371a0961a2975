"""The `jaxport-client` wheel and sdist as `make client-wheel` builds them (from a copy of
clients/python, so the tree stays clean), for the tests that install the wheel
(tests/client/test_client_install.py) and check what it contains
(tests/artifact/test_import_graph.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def build_client_dist(out: Path) -> Path:
    """Builds the wheel and sdist into `out` (emptied first) and returns the wheel's path."""
    done = subprocess.run(["make", "-s", "-C", str(REPO), "client-wheel", f"CLIENT_DIST={out}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("jaxport_client-*-py3-none-any.whl")
    return wheel
