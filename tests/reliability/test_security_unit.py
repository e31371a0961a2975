"""bridge/security.py: what `jaxport serve` checks before the front starts (the token file, the
TLS flag combinations and files), in process. Serving TLS, mTLS and the token: the native
front, live (test_tls_auth_live.py; bearer matching: bridge/front/front_test.go)."""

from __future__ import annotations

import pytest
from jaxport.bridge.security import SecurityConfigError, check_tls_files, read_token_file

TOKEN = b"s3cr3t-token_0123456789"


def test_read_token_file(tmp_path):
    p = tmp_path / "token"
    p.write_bytes(TOKEN + b"\n")
    p.chmod(0o600)
    assert read_token_file(p) == TOKEN
    p.write_bytes(b"  \n")
    with pytest.raises(SecurityConfigError, match=r"token.*is empty"):
        read_token_file(p)
    p.write_bytes(b"two words")
    with pytest.raises(SecurityConfigError, match="printable ASCII without spaces"):
        read_token_file(p)
    with pytest.raises(SecurityConfigError, match=r"cannot read auth token.*--auth-token-file"):
        read_token_file(tmp_path / "absent")


def test_tls_flag_combinations_are_checked(pki, tmp_path):
    assert check_tls_files(None, None, None) is False
    assert check_tls_files(pki.server_cert, pki.server_key) is True
    assert check_tls_files(pki.server_cert, pki.server_key, pki.ca_cert) is True
    with pytest.raises(SecurityConfigError, match="--tls-key is missing"):
        check_tls_files(pki.server_cert, None)
    with pytest.raises(SecurityConfigError, match="--tls-cert is missing"):
        check_tls_files(None, pki.server_key)
    with pytest.raises(SecurityConfigError, match="--tls-client-ca needs --tls-cert"):
        check_tls_files(None, None, pki.ca_cert)
    with pytest.raises(SecurityConfigError, match=r"--tls-cert .* is not a PEM certificate"):
        check_tls_files(pki.server_key, pki.server_key)
    with pytest.raises(SecurityConfigError, match=r"--tls-key .* is not a PEM private key"):
        check_tls_files(pki.server_cert, pki.server_cert)
    with pytest.raises(SecurityConfigError, match="cannot read TLS private key"):
        check_tls_files(pki.server_cert, tmp_path / "nope.key")
