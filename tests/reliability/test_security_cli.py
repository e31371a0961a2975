"""`jaxport serve` with TLS/token options that cannot work: one line on stderr naming the flag,
exit status 1, no traceback, nothing served. (The front checks them, bridge/front/security;
every combination of the flags and every kind of unusable file is here, live.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

JAXPORT = str(Path(sys.executable).parent / "jaxport")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (lambda p, t: ["--tls-cert", str(p.server_cert)], "--tls-key is missing"),
        (lambda p, t: ["--tls-cert", str(p.server_key), "--tls-key", str(p.server_key)],
         "is not a PEM certificate"),
        (lambda p, t: ["--tls-key", str(p.server_key)], "--tls-cert is missing"),
        (lambda p, t: ["--tls-client-ca", str(p.ca_cert)],
         "--tls-client-ca needs --tls-cert and --tls-key"),
        (lambda p, t: ["--tls-cert", str(p.server_cert), "--tls-key", str(p.server_cert)],
         "is not a PEM private key"),
        (lambda p, t: ["--tls-cert", str(p.server_cert), "--tls-key", str(t / "nope.key")],
         "cannot read TLS private key"),
        (lambda p, t: ["--auth-token-file", str(t / "empty-token")], "is empty"),
        (lambda p, t: ["--auth-token-file", str(t / "absent")],
         "cannot read auth token file"),
        (lambda p, t: ["--auth-token-file", str(t / "two-words")],
         "must hold one token of printable ASCII without spaces"),
    ],
    ids=["half-key-pair", "key-as-cert", "key-only", "ca-only", "cert-as-key", "missing-key",
         "empty-token", "absent-token", "token-with-space"],
)
def test_unusable_security_options_are_one_line_errors(pki, tmp_path, flags, expected) -> None:
    (tmp_path / "empty-token").write_text("\n")
    (tmp_path / "two-words").write_text("two words\n")
    (tmp_path / "repo").mkdir()
    r = subprocess.run(
        [JAXPORT, "serve", "--repository", str(tmp_path / "repo"), "--port", "0",
         "--metrics-port", "-1", *flags(pki, tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    err = r.stderr.strip()
    print(f"\nsecurity(cli): exit {r.returncode}: {err}")
    assert r.returncode == 1
    assert err.startswith("jaxport serve: error:") and expected in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
