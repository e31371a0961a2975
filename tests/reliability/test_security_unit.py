"""bridge/security.py: token checks, the auth interceptor and TLS/mTLS credentials, against a
real in-process grpc server with generic handlers (no bridge, no JAX)."""

from __future__ import annotations

import time
from concurrent import futures

import grpc
import pytest
from jaxport.bridge.security import (
    OPEN_METHODS,
    SecurityConfigError,
    TokenAuthInterceptor,
    bearer_token_matches,
    read_token_file,
    server_credentials,
)

TOKEN = b"s3cr3t-token_0123456789"


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer " + TOKEN.decode(), True),
        ("bearer " + TOKEN.decode(), True),
        (b"BEARER " + TOKEN, True),
        ("Bearer " + TOKEN.decode() + " ", True),
        (None, False),
        ("", False),
        ("Bearer", False),
        ("Bearer ", False),
        (TOKEN.decode(), False),  # no scheme
        ("Basic " + TOKEN.decode(), False),
        ("Bearer " + TOKEN.decode()[:-1], False),  # prefix of the token
        ("Bearer " + TOKEN.decode() + "x", False),  # token plus more
        ("Bearer s3cr3t-token_0123456788", False),
        ("Bearer \u00e9" + TOKEN.decode(), False),  # non-ASCII never matches, never raises
    ],
)
def test_bearer_token_matches(header, ok):
    assert bearer_token_matches(header, TOKEN) is ok


def test_empty_expected_token_never_matches():
    assert not bearer_token_matches("Bearer ", b"")


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
    assert server_credentials(None, None, None) is None
    assert server_credentials(pki.server_cert, pki.server_key) is not None
    assert server_credentials(pki.server_cert, pki.server_key, pki.ca_cert) is not None
    with pytest.raises(SecurityConfigError, match="--tls-key is missing"):
        server_credentials(pki.server_cert, None)
    with pytest.raises(SecurityConfigError, match="--tls-cert is missing"):
        server_credentials(None, pki.server_key)
    with pytest.raises(SecurityConfigError, match="--tls-client-ca needs --tls-cert"):
        server_credentials(None, None, pki.ca_cert)
    with pytest.raises(SecurityConfigError, match=r"--tls-cert .* is not a PEM certificate"):
        server_credentials(pki.server_key, pki.server_key)
    with pytest.raises(SecurityConfigError, match=r"--tls-key .* is not a PEM private key"):
        server_credentials(pki.server_cert, pki.server_cert)
    with pytest.raises(SecurityConfigError, match="cannot read TLS private key"):
        server_credentials(pki.server_cert, tmp_path / "nope.key")


# --- a real grpc server with one open and one protected method of every shape ---------------

SERVICE = "inference.GRPCInferenceService"
OPEN = f"/{SERVICE}/ServerLive"
assert OPEN in OPEN_METHODS


def _echo_unary(request: bytes, context) -> bytes:
    return b"ok:" + request


def _echo_stream(request_iterator, context):
    for r in request_iterator:
        yield b"ok:" + r


def _start(interceptors=(), creds=None):
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=list(interceptors))
    handlers = {
        "ServerLive": grpc.unary_unary_rpc_method_handler(_echo_unary),
        "ModelInfer": grpc.unary_unary_rpc_method_handler(_echo_unary),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(_echo_stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if creds is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    return server, port


@pytest.fixture
def token_server():
    server, port = _start([TokenAuthInterceptor(TOKEN)])
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    channel.close()
    server.stop(None)


def _unary(channel, method):
    return channel.unary_unary(f"/{SERVICE}/{method}")


def test_interceptor_refuses_missing_and_wrong_tokens_on_every_shape(token_server):
    ch = token_server
    md_ok = (("authorization", "Bearer " + TOKEN.decode()),)
    assert _unary(ch, "ModelInfer")(b"x", metadata=md_ok, timeout=5) == b"ok:x"
    stream = ch.stream_stream(f"/{SERVICE}/ModelStreamInfer")
    assert list(stream(iter([b"a", b"b"]), metadata=md_ok, timeout=5)) == [b"ok:a", b"ok:b"]
    refused = 0
    for md in [None, (("authorization", "Bearer wrong"),), (("authorization", TOKEN.decode()),)]:
        with pytest.raises(grpc.RpcError) as info:
            _unary(ch, "ModelInfer")(b"x", metadata=md, timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "authorization: Bearer" in info.value.details()
        with pytest.raises(grpc.RpcError) as info:
            list(stream(iter([b"a"]), metadata=md, timeout=5))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        refused += 2
    print(f"\nsecurity: {refused} unauthenticated calls refused (unary + stream)")


def test_open_methods_need_no_token(token_server):
    assert _unary(token_server, "ServerLive")(b"x", timeout=5) == b"ok:x"


def test_unknown_method_stays_unimplemented(token_server):
    with pytest.raises(grpc.RpcError) as info:
        _unary(token_server, "NoSuchRpc")(b"x", timeout=5)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_tls_roundtrip_and_plaintext_client_refused(pki):
    server, port = _start(creds=server_credentials(pki.server_cert, pki.server_key))
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=pki.read("ca_cert"))
        with grpc.secure_channel(f"127.0.0.1:{port}", creds) as ch:
            assert _unary(ch, "ModelInfer")(b"x", timeout=5) == b"ok:x"
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.RpcError) as info:
                _unary(ch, "ModelInfer")(b"x", timeout=3)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(None)


def test_mtls_requires_a_client_cert_from_our_ca(pki):
    creds = server_credentials(pki.server_cert, pki.server_key, pki.ca_cert)
    server, port = _start(creds=creds)
    ca = pki.read("ca_cert")
    try:
        good = grpc.ssl_channel_credentials(
            ca, pki.read("client_key"), pki.read("client_cert")
        )
        with grpc.secure_channel(f"127.0.0.1:{port}", good) as ch:
            assert _unary(ch, "ModelInfer")(b"x", timeout=5) == b"ok:x"
        t0 = time.monotonic()
        for bad in (
            grpc.ssl_channel_credentials(ca),  # no client certificate
            grpc.ssl_channel_credentials(
                ca, pki.read("rogue_client_key"), pki.read("rogue_client_cert")
            ),
        ):
            with grpc.secure_channel(f"127.0.0.1:{port}", bad) as ch:
                with pytest.raises(grpc.RpcError) as info:
                    _unary(ch, "ModelInfer")(b"x", timeout=5)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        print(f"\nsecurity: mTLS refused 2 clients in {time.monotonic() - t0:.2f} s")
    finally:
        server.stop(None)
