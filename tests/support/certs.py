"""Test PKI generated on the fly with `cryptography`: a CA, a server certificate for
127.0.0.1/localhost, a client certificate from the same CA, and a client certificate from an
unrelated CA (what an attacker without our CA would present). Nothing is committed to disk
outside the directory the test gives."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files (and their bytes, for grpc.ssl_channel_credentials)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path
    rogue_client_key: Path

    def read(self, name: str) -> bytes:
        """Bytes of one of the files above, by field name."""
        return getattr(self, name).read_bytes()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
    )


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    cert = (
        _builder(cn, _name(cn), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(cn: str, ca_key, ca_cert: x509.Certificate, *, server: bool):
    key = _key()
    # Key identifiers: Python's ssl (VERIFY_X509_STRICT, on by default from 3.13) requires the
    # Authority Key Identifier that real CAs always set.
    b = (
        _builder(cn, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        b = b.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return key, b.sign(ca_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate | None = None, key=None) -> Path:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    else:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)
    return path


def make_pki(directory: Path) -> Pki:
    """Generate the whole test PKI into `directory` (created if needed)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("jaxport test CA")
    s_key, s_cert = _leaf("localhost", ca_key, ca_cert, server=True)
    c_key, c_cert = _leaf("jaxport test client", ca_key, ca_cert, server=False)
    r_ca_key, r_ca_cert = _ca("rogue CA")
    r_key, r_cert = _leaf("rogue client", r_ca_key, r_ca_cert, server=False)
    d = directory
    return Pki(
        ca_cert=_write(d / "ca.pem", ca_cert),
        server_cert=_write(d / "server.pem", s_cert),
        server_key=_write(d / "server.key", key=s_key),
        client_cert=_write(d / "client.pem", c_cert),
        client_key=_write(d / "client.key", key=c_key),
        rogue_client_cert=_write(d / "rogue-client.pem", r_cert),
        rogue_client_key=_write(d / "rogue-client.key", key=r_key),
    )
