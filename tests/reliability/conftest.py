"""Fixtures shared by the reliability tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from support.certs import Pki, make_pki  # noqa: E402


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, server cert for 127.0.0.1/localhost, a client cert and a rogue client cert."""
    return make_pki(tmp_path_factory.mktemp("pki"))
