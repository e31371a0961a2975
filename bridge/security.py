"""Transport security and caller authentication for the bridge.

Two independent, optional layers:

* TLS / mutual TLS: `server_credentials()` turns `--tls-cert/--tls-key[/--tls-client-ca]` into
  `grpc.ServerCredentials`. With a client CA the server requires and verifies a client
  certificate (mTLS); without one it is server-authenticated TLS only.
* Bearer token: `TokenAuthInterceptor` admits a call only when its `authorization` metadata is
  `Bearer <token>` with the token read from `--auth-token-file` (compared in constant time).
  Everything else gets UNAUTHENTICATED before the request message is even parsed.

Open RPCs (no token needed), chosen so orchestrators can probe a protected server without a
secret and without learning anything about the models: `grpc.health.v1.Health/Check` and
`/Watch`, and `inference.GRPCInferenceService/ServerLive` and `/ServerReady`. Everything else,
server reflection and metadata included, needs the token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

__all__ = [
    "AUTH_METADATA_KEY",
    "OPEN_METHODS",
    "SecurityConfigError",
    "TokenAuthInterceptor",
    "bearer_token_matches",
    "read_token_file",
    "server_credentials",
]

log = logging.getLogger(__name__)

AUTH_METADATA_KEY = "authorization"
_BEARER = "bearer "

OPEN_METHODS: frozenset[str] = frozenset(
    {
        "/grpc.health.v1.Health/Check",
        "/grpc.health.v1.Health/Watch",
        "/inference.GRPCInferenceService/ServerLive",
        "/inference.GRPCInferenceService/ServerReady",
    }
)

UNAUTHENTICATED_DETAILS = (
    "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'"
)


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


def server_credentials(
    cert: Path | None, key: Path | None, client_ca: Path | None = None
) -> grpc.ServerCredentials | None:
    """Server credentials for the given PEM files, or None for plaintext (no TLS flag given).

    `cert` and `key` go together; `client_ca` turns on mutual TLS (clients must present a
    certificate signed by that CA) and is meaningless without them.
    """
    if cert is None and key is None:
        if client_ca is not None:
            raise SecurityConfigError(
                "--tls-client-ca needs --tls-cert and --tls-key (mTLS = TLS + a client CA)"
            )
        return None
    if cert is None or key is None:
        missing = "--tls-cert" if cert is None else "--tls-key"
        raise SecurityConfigError(f"TLS needs both --tls-cert and --tls-key; {missing} is missing")
    cert_pem = _read(cert, "TLS certificate", "--tls-cert")
    key_pem = _read(key, "TLS private key", "--tls-key")
    if b"-----BEGIN" not in cert_pem or b"CERTIFICATE" not in cert_pem:
        raise SecurityConfigError(f"--tls-cert {str(cert)!r} is not a PEM certificate")
    if b"-----BEGIN" not in key_pem or b"PRIVATE KEY" not in key_pem:
        raise SecurityConfigError(f"--tls-key {str(key)!r} is not a PEM private key")
    ca_pem = None
    if client_ca is not None:
        ca_pem = _read(client_ca, "client CA bundle", "--tls-client-ca")
        if b"CERTIFICATE" not in ca_pem:
            raise SecurityConfigError(
                f"--tls-client-ca {str(client_ca)!r} is not a PEM certificate bundle"
            )
    return grpc.ssl_server_credentials(
        [(key_pem, cert_pem)],
        root_certificates=ca_pem,
        require_client_auth=ca_pem is not None,
    )


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


def bearer_token_matches(header: str | bytes | None, expected: bytes) -> bool:
    """True when `header` is `Bearer <expected>` (scheme case-insensitive; constant-time)."""
    if header is None or not expected:
        return False
    if isinstance(header, str):
        try:
            header = header.encode("ascii")
        except UnicodeEncodeError:
            return False
    if len(header) < len(_BEARER) or header[: len(_BEARER)].lower() != _BEARER.encode():
        return False
    presented = header[len(_BEARER) :].strip()
    # compare_digest's time depends only on the lengths, never on where the bytes differ.
    return hmac.compare_digest(presented, expected)


def _metadata_value(metadata: Any, key: str) -> str | bytes | None:
    for k, v in metadata or ():
        if k == key:
            return v
    return None


def _denying_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that answers UNAUTHENTICATED.

    The request deserializer is dropped: an unauthenticated caller's bytes are never parsed.
    """

    def deny(_request: Any, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_DETAILS)

    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(deny, None, serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, None, serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(deny, None, serializer)
    return grpc.unary_unary_rpc_method_handler(deny, None, serializer)


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Admit a call only with `authorization: Bearer <token>`, except the `OPEN_METHODS`."""

    def __init__(self, token: bytes, open_methods: frozenset[str] = OPEN_METHODS) -> None:
        if not token:
            raise SecurityConfigError("the auth token must not be empty")
        self._token = token
        self._open = open_methods

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """Pass through open or authenticated calls; swap in a denying handler otherwise."""
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method in self._open:
            return handler
        header = _metadata_value(handler_call_details.invocation_metadata, AUTH_METADATA_KEY)
        if bearer_token_matches(header, self._token):
            return handler
        log.info("unauthenticated call refused: method=%s", handler_call_details.method)
        return _denying_handler(handler)
