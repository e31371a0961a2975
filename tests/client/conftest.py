"""Fixtures of the Python client tests: artifacts exported once, REAL bridges on port 0.

`bridge` is one `jaxport serve` over the session repository (tests/client/client_models.py): the
native front and its workers, what clients meet in production;
`server` is the same bridge as `Server(url, bridge)`; `secure_bridge` serves the same
repository with mutual TLS and a bearer token at once (the only second server). Both are
started, and stopped by PID, through `tests/support/bridge.py`. `bridge` runs with the test gate
(`gate`, see `support.gate`): a test that needs a call still executing when its deadline passes
holds the model there, never relies on how long it computes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

for _p in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from client_helpers import TOKEN, Server  # noqa: E402
from client_models import export_repository  # noqa: E402
from support.bridge import EXPLICIT, BridgeProcess  # noqa: E402
from support.certs import Pki, make_pki  # noqa: E402
from support.exports import exported  # noqa: E402
from support.gate import Gate  # noqa: E402


@pytest.fixture(scope="session")
def repository() -> Path:
    """Every client test model exported as version 1 into one repository, from the shared
    export cache (support.exports; read-only: the tests load and unload, never write)."""
    import bridge_models
    import client_models

    return exported("client-models", export_repository,
                    sources=[Path(client_models.__file__), Path(bridge_models.__file__)])


@pytest.fixture(scope="session")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    """The test gate of `bridge`: a test holds executions of a model until it releases them."""
    return Gate(tmp_path_factory.mktemp("gate"))


@pytest.fixture(scope="session")
def bridge(repository: Path, gate: Gate) -> Iterator[BridgeProcess]:
    """A real `jaxport serve` over the session repository, explicit model control (the client
    tests load and unload), test gate on."""
    with BridgeProcess(repository, *EXPLICIT, env=gate.env) as b:
        yield b


@pytest.fixture(scope="session")
def server(bridge: BridgeProcess) -> Server:
    """The session bridge as a `Server` (url + process), for test_client_install.py."""
    return Server(bridge.address, bridge)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="session")
def secure_bridge(repository: Path, pki: Pki, token_file: Path) -> Iterator[BridgeProcess]:
    """A real bridge requiring a client certificate from our CA AND the bearer token."""
    b = BridgeProcess(
        repository, "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
        "--tls-client-ca", str(pki.ca_cert), "--auth-token-file", str(token_file),
    )
    try:
        b.start(credentials=grpc.ssl_channel_credentials(
            root_certificates=pki.ca_cert.read_bytes(),
            private_key=pki.client_key.read_bytes(),
            certificate_chain=pki.client_cert.read_bytes()))
        yield b
    finally:
        b.stop()

