"""`go vet` and every Go package's unit tests of the front (bridge/front: request, dispatch,
server, rest, shm, telemetry, workers with real Python workers, ...) run as part of the Python
suite, so `pytest tests/front` covers both. The workers' tests start this interpreter as
their worker Python (JAXPORT_WORKER_PYTHON)."""

from __future__ import annotations

import os
import subprocess
import sys

from front_helpers import FRONT_SRC, go_or_fail


def test_go_vet_and_unit_tests() -> None:
    go = go_or_fail()
    env = {**os.environ, "JAXPORT_WORKER_PYTHON": sys.executable}
    for cmd in ([go, "vet", "./..."], [go, "test", "./..."]):
        proc = subprocess.run(cmd, cwd=FRONT_SRC, capture_output=True, text=True, timeout=900,
                              env=env)
        assert proc.returncode == 0, f"{' '.join(cmd[1:])}:\n{proc.stdout}\n{proc.stderr}"
