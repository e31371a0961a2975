"""TLS, mutual TLS and bearer tokens on live bridges, called with the Python client
(`jaxport.client.InferenceClient`) and raw grpc channels, certificates generated in the test."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from bridge_launch import start_bridge
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from jaxport.client import InferenceClient, InferenceServerError
from live import fuzzy_request, make_repository, stub
from rel_models import FUZZ_MODEL, fuzzy_expected

TOKEN = "rel-test-token-6f1c2a"
X = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
FLAG = np.array([True, False])


def _infer(client: InferenceClient) -> np.ndarray:
    return client.infer(FUZZ_MODEL, {"x": X, "flag": FLAG})["y"]


@pytest.fixture(scope="module")
def tls_token_bridge(tmp_path_factory, artifacts, pki):
    """TLS (server cert only) plus a bearer token."""
    base = tmp_path_factory.mktemp("tls")
    repo = make_repository(base / "repo", artifacts, [FUZZ_MODEL])
    token_file = base / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    creds = grpc.ssl_channel_credentials(pki.read("ca_cert"))
    with start_bridge(repo, "--tls-cert", str(pki.server_cert), "--tls-key",
                      str(pki.server_key), "--auth-token-file", str(token_file),
                      credentials=creds) as b:
        yield b


@pytest.fixture(scope="module")
def mtls_bridge(tmp_path_factory, artifacts, pki):
    repo = make_repository(tmp_path_factory.mktemp("mtls"), artifacts, [FUZZ_MODEL])
    creds = grpc.ssl_channel_credentials(
        pki.read("ca_cert"), pki.read("client_key"), pki.read("client_cert")
    )
    with start_bridge(repo, "--tls-cert", str(pki.server_cert), "--tls-key",
                      str(pki.server_key), "--tls-client-ca", str(pki.ca_cert),
                      credentials=creds) as b:
        yield b


def test_tls_with_token_through_the_python_client(tls_token_bridge, pki) -> None:
    b = tls_token_bridge
    for host in ("localhost", "127.0.0.1"):
        with InferenceClient(f"{host}:{b.port}", root_certificates=pki.ca_cert,
                             token=TOKEN, timeout=30) as c:
            np.testing.assert_array_equal(_infer(c), fuzzy_expected(X, FLAG))
    print("\ntls: Python client over TLS with token answered on localhost and 127.0.0.1")


def test_plaintext_client_cannot_talk_to_a_tls_server(tls_token_bridge) -> None:
    with grpc.insecure_channel(tls_token_bridge.address) as ch:
        with pytest.raises(grpc.RpcError) as info:
            stub(ch).ModelInfer(fuzzy_request(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("token", [None, "", "wrong", TOKEN + "x", TOKEN[:-1]])
def test_missing_or_wrong_token_is_unauthenticated(tls_token_bridge, pki, token) -> None:
    b = tls_token_bridge
    with InferenceClient(f"localhost:{b.port}", root_certificates=pki.ca_cert,
                         token=token, timeout=30) as c:
        with pytest.raises(InferenceServerError) as info:
            _infer(c)
        assert info.value.code == "UNAUTHENTICATED", info.value
        assert "authorization: Bearer" in info.value.message
        with pytest.raises(InferenceServerError) as info:
            c.model_metadata(FUZZ_MODEL)
        assert info.value.code == "UNAUTHENTICATED"
        # Liveness, readiness and the standard health service stay open.
        assert c.server_live() and c.server_ready()
    creds = grpc.ssl_channel_credentials(pki.read("ca_cert"))
    with grpc.secure_channel(f"localhost:{b.port}", creds) as ch:
        health = health_pb2_grpc.HealthStub(ch)
        resp = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        # Server reflection reveals the service surface: it needs the token too.
        md = (("authorization", f"Bearer {token}"),) if token else ()
        reflect = ch.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as info:
            list(reflect(iter([ask]), metadata=md, timeout=10))
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with_token = list(reflect(iter([ask]), metadata=(("authorization", f"Bearer {TOKEN}"),),
                                  timeout=10))
        names = [sv.name for sv in with_token[0].list_services_response.service]
        assert "inference.GRPCInferenceService" in names
    print(f"\ntoken: {token!r} -> UNAUTHENTICATED for ModelInfer/ModelMetadata/reflection; "
          "ServerLive/ServerReady/Health.Check open")


def test_mtls_accepts_our_client_and_refuses_others(mtls_bridge, pki) -> None:
    b = mtls_bridge
    with InferenceClient(f"localhost:{b.port}", root_certificates=pki.ca_cert,
                         client_certificate=pki.client_cert, client_key=pki.client_key,
                         timeout=30) as c:
        np.testing.assert_array_equal(_infer(c), fuzzy_expected(X, FLAG))
    refused = []
    for label, kw in {
        "no client cert": {},
        "cert from another CA": {"client_certificate": pki.rogue_client_cert,
                                 "client_key": pki.rogue_client_key},
    }.items():
        with InferenceClient(f"localhost:{b.port}", root_certificates=pki.ca_cert,
                             timeout=10, **kw) as c:
            with pytest.raises(InferenceServerError) as info:
                c.server_live()
            assert info.value.code == "UNAVAILABLE", info.value
            refused.append(label)
    print(f"\nmtls: our client served; refused: {refused}")
    assert b.alive()
