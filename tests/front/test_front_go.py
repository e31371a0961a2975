"""`go vet` and the Go unit tests of the front (argument split, frame header, metrics merge,
token check) run as part of the Python suite, so `pytest tests/front` covers both."""

from __future__ import annotations

import subprocess

from front_helpers import FRONT_SRC, go_or_fail


def test_go_vet_and_unit_tests() -> None:
    go = go_or_fail()
    for cmd in ([go, "vet", "./..."], [go, "test", "./..."]):
        proc = subprocess.run(cmd, cwd=FRONT_SRC, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd[1:])}:\n{proc.stdout}\n{proc.stderr}"
