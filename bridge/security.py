"""The TLS and token settings of `jaxport serve`, checked before the native front starts.

`jaxport serve` (bridge/cli.py, `preflight`) refuses in one line what cannot work, before it
execs the front: `check_tls_files()` checks `--tls-cert/--tls-key[/--tls-client-ca]` (half a
key pair, a client CA without TLS, unreadable, empty or non-PEM files; the front builds the
credentials itself); `read_token_file()` reads `--auth-token-file` (one printable token; a
world-readable file is warned about). The front (bridge/front/security.go) serves TLS,
mutual TLS and the bearer token with the same texts: a call without `authorization: Bearer
<token>` gets UNAUTHENTICATED before its message is parsed, except the open RPCs (health,
ServerLive, ServerReady) orchestrators probe. docs/security.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = [
    "SecurityConfigError",
    "check_tls_files",
    "read_token_file",
]

log = logging.getLogger(__name__)


class SecurityConfigError(ValueError):
    """A TLS or token option that cannot work (missing file, half a key pair, empty token)."""


def _read(path: Path, what: str, flag: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SecurityConfigError(
            f"cannot read {what} {str(path)!r} given by {flag}: {exc.strerror or exc}"
        ) from exc
    if not data.strip():
        raise SecurityConfigError(f"{what} {str(path)!r} given by {flag} is empty")
    return data


def check_tls_files(
    cert: Path | None, key: Path | None, client_ca: Path | None = None
) -> bool:
    """Whether the flags ask for TLS (False: plaintext, no TLS flag given), after checking the
    PEM files they name; SecurityConfigError names the flag at fault.

    `cert` and `key` go together; `client_ca` turns on mutual TLS (clients must present a
    certificate signed by that CA) and is meaningless without them.
    """
    if cert is None and key is None:
        if client_ca is not None:
            raise SecurityConfigError(
                "--tls-client-ca needs --tls-cert and --tls-key (mTLS = TLS + a client CA)"
            )
        return False
    if cert is None or key is None:
        missing = "--tls-cert" if cert is None else "--tls-key"
        raise SecurityConfigError(f"TLS needs both --tls-cert and --tls-key; {missing} is missing")
    cert_pem = _read(cert, "TLS certificate", "--tls-cert")
    key_pem = _read(key, "TLS private key", "--tls-key")
    if b"-----BEGIN" not in cert_pem or b"CERTIFICATE" not in cert_pem:
        raise SecurityConfigError(f"--tls-cert {str(cert)!r} is not a PEM certificate")
    if b"-----BEGIN" not in key_pem or b"PRIVATE KEY" not in key_pem:
        raise SecurityConfigError(f"--tls-key {str(key)!r} is not a PEM private key")
    if client_ca is not None:
        ca_pem = _read(client_ca, "client CA bundle", "--tls-client-ca")
        if b"CERTIFICATE" not in ca_pem:
            raise SecurityConfigError(
                f"--tls-client-ca {str(client_ca)!r} is not a PEM certificate bundle"
            )
    return True


def read_token_file(path: Path) -> bytes:
    """The bearer token in `path` (surrounding whitespace stripped); refuse an empty file."""
    token = _read(path, "auth token file", "--auth-token-file").strip()
    if any(c < 0x21 or c > 0x7E for c in token):
        raise SecurityConfigError(
            f"auth token file {str(path)!r} must hold one token of printable ASCII without spaces"
        )
    try:
        mode = Path(path).stat().st_mode
    except OSError:
        mode = 0
    if mode & 0o004:
        log.warning("auth token file %s is world-readable; chmod 600 it", path)
    return token
