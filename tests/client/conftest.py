"""Fixtures for the Python client tests: a real protocol server process on a loopback port."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from support.certs import Pki, make_pki  # noqa: E402

SERVER = Path(__file__).with_name("oip_test_server.py")


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]


def start_server(*args: str) -> Server:
    """Start oip_test_server.py and read the port it bound from its first stdout line."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        _, err = process.communicate(timeout=10)
        raise RuntimeError(f"test server did not start: {line!r} {err}")
    return Server(f"127.0.0.1:{int(line.split()[1])}", process)


def stop_server(server: Server) -> None:
    """Stop by PID (our own Popen), never by name."""
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)


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
