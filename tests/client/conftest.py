"""Fixtures for the Python client tests: a real protocol server process on a loopback port."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from client_helpers import Server, start_server, stop_server  # noqa: E402
from support.certs import Pki, make_pki  # noqa: E402


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = start_server()
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def token_server() -> Iterator[Server]:
    s = start_server("--token", "s3cret")
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tls_server(pki: Pki) -> Iterator[Server]:
    s = start_server(
        "--tls-ca", str(pki.ca_cert), "--tls-cert", str(pki.server_cert),
        "--tls-key", str(pki.server_key),
    )
    yield s
    stop_server(s)
