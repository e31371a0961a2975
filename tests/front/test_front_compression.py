"""Compression on the native front (issue 27, bridge/front/compression.go) against a real front
and workers: gRPC requests compressed with gzip and deflate (grpcio, whose deflate is gRPC
core's, as tritonclient's and Triton's) answered with the uncompressed request's bytes, unary
and streamed, for a small model and a 16 MiB tensor; REST bodies with Content-Encoding gzip
and deflate, Accept-Encoding answers, and the refusals (a zip bomb past --max-message-bytes,
an unknown encoding, a body that is not what its encoding says) with their HTTP status and a
message naming the cause. Triton's own clients with compression: test_triton_http_clients.py.
"""

from __future__ import annotations

import gzip
import http.client
import json
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import front_command
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess

LIMIT = 32 << 20  # --max-message-bytes: room for `big` (16 MiB each way), a bomb well past it
BIG_ELEMENTS = 4 << 20

ENCODINGS = {"gzip": gzip.compress, "deflate": zlib.compress}  # HTTP's deflate is zlib


@pytest.fixture(scope="module")
def server(front_binary: Path, repository: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    with BridgeProcess(repository, "--max-message-bytes", str(LIMIT),
                       workdir=tmp_path_factory.mktemp("compression"),
                       command=front_command(front_binary, "--workers", "1")) as f:
        yield f


def mlp_request() -> pb.ModelInferRequest:
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    req = pb.ModelInferRequest(model_name="mlp")
    req.inputs.add(name="x", datatype="FP32", shape=[2, 8])
    req.raw_input_contents.append(x.tobytes())
    return req


def big_request() -> pb.ModelInferRequest:
    x = (np.arange(BIG_ELEMENTS, dtype=np.float32) % 1000) / 8
    req = pb.ModelInferRequest(model_name="big")
    req.inputs.add(name="x", datatype="FP32", shape=[BIG_ELEMENTS])
    req.raw_input_contents.append(x.tobytes())
    return req


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate],
                         ids=["gzip", "deflate"])
def test_grpc_compressed_requests(server: BridgeProcess, compression: grpc.Compression) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    for req in (mlp_request(), big_request()):
        want = stub.ModelInfer(req, timeout=120)
        got = stub.ModelInfer(req, timeout=120, compression=compression)
        assert got.raw_output_contents == want.raw_output_contents, req.model_name
    # Streamed: every message of the stream compressed.
    answers = list(stub.ModelStreamInfer(iter([mlp_request(), mlp_request()]), timeout=120,
                                         compression=compression))
    assert [a.error_message for a in answers] == ["", ""]
    want = stub.ModelInfer(mlp_request(), timeout=120).raw_output_contents
    assert [a.infer_response.raw_output_contents for a in answers] == [want] * 2
    # A channel that compresses everything: health, metadata and statistics too.
    with grpc.insecure_channel(server.address, compression=compression) as channel:
        assert pb_grpc.GRPCInferenceServiceStub(channel).ServerReady(
            pb.ServerReadyRequest(), timeout=30).ready


def test_grpc_compressed_message_over_the_limit(server: BridgeProcess) -> None:
    """--max-message-bytes bounds the decompressed message: a few KiB of gzip that inflate past
    it are RESOURCE_EXHAUSTED, not memory."""
    req = pb.ModelInferRequest(model_name="big")
    req.inputs.add(name="x", datatype="FP32", shape=[LIMIT // 4 + 1024])
    req.raw_input_contents.append(bytes(LIMIT + 4096))
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(req, timeout=60, compression=grpc.Compression.Gzip)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(LIMIT) in info.value.details()
    assert server.alive()


def http_port(server: BridgeProcess) -> int:
    return int(json.loads(server.port_file.read_text())["http_port"])


def post(server: BridgeProcess, path: str, body: bytes,
         headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", http_port(server), timeout=120)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


MLP_JSON = json.dumps({"inputs": [{
    "name": "x", "shape": [2, 8], "datatype": "FP32",
    "data": np.linspace(-1, 1, 16).round(3).tolist()}]}).encode()


def decoded(headers: dict[str, str], data: bytes) -> bytes:
    encoding = headers.get("content-encoding", "")
    return {"gzip": gzip.decompress, "deflate": zlib.decompress}.get(encoding, bytes)(data)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_rest_content_encoding_and_accept_encoding(server: BridgeProcess, encoding: str) -> None:
    status, headers, want = post(server, "/v2/models/mlp/infer", MLP_JSON, {})
    assert status == 200 and "content-encoding" not in headers
    body = ENCODINGS[encoding](MLP_JSON)
    status, headers, data = post(server, "/v2/models/mlp/infer", body,
                                 {"Content-Encoding": encoding})
    assert (status, data) == (200, want)
    # The answer compressed as Accept-Encoding asks; identity preferred: not compressed.
    status, headers, data = post(server, "/v2/models/mlp/infer", body, {
        "Content-Encoding": encoding, "Accept-Encoding": f"{encoding}, identity;q=0.5"})
    assert status == 200 and headers["content-encoding"] == encoding
    assert "accept-encoding" in headers["vary"].lower()
    assert decoded(headers, data) == want
    status, headers, data = post(server, "/v2/models/mlp/infer", MLP_JSON,
                                 {"Accept-Encoding": f"identity, {encoding};q=0.5"})
    assert (status, headers.get("content-encoding"), data) == (200, None, want)
    # Binary answers (Inference-Header-Content-Length counts the uncompressed JSON).
    binary = json.loads(MLP_JSON)
    binary["outputs"] = [{"name": "output", "parameters": {"binary_data": True}}]
    status, plain, want = post(server, "/v2/models/mlp/infer", json.dumps(binary).encode(), {})
    assert status == 200
    status, headers, data = post(server, "/v2/models/mlp/infer", json.dumps(binary).encode(),
                                 {"Accept-Encoding": encoding})
    assert status == 200 and headers["content-encoding"] == encoding
    assert decoded(headers, data) == want
    assert headers["inference-header-content-length"] == plain["inference-header-content-length"]
    # An error answer is not compressed (Triton's; tritonclient.http reads it undecoded).
    status, headers, data = post(server, "/v2/models/nope/infer", MLP_JSON,
                                 {"Accept-Encoding": encoding})
    assert status == 404 and "content-encoding" not in headers
    assert "nope" in json.loads(data)["error"]


def test_rest_encoding_refusals(server: BridgeProcess) -> None:
    bomb = gzip.compress(bytes(2 * LIMIT))  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < LIMIT // 100
    for encoding, body in (("gzip", bomb), ("deflate", zlib.compress(bytes(LIMIT + 1)))):
        status, _, data = post(server, "/v2/models/big/infer", body,
                               {"Content-Encoding": encoding})
        error = json.loads(data)["error"]
        assert status == 413, error
        assert f"Content-Encoding {encoding}" in error and f"--max-message-bytes {LIMIT}" in error
    status, _, data = post(server, "/v2/models/mlp/infer", MLP_JSON, {"Content-Encoding": "br"})
    assert (status, json.loads(data)) == (415, {"error": 'Content-Encoding "br" is not supported; '
                                                         "send the body as is, gzip or deflate"})
    status, _, data = post(server, "/v2/models/mlp/infer", MLP_JSON, {"Content-Encoding": "gzip"})
    assert status == 400
    assert json.loads(data)["error"].startswith(
        "request body: Content-Encoding gzip, but the body is not gzip data")
    status, _, data = post(server, "/v2/models/mlp/infer", zlib.compress(MLP_JSON)[:-8],
                           {"Content-Encoding": "deflate"})
    assert status == 400
    assert json.loads(data)["error"].startswith(
        "request body: cannot decode its Content-Encoding deflate")
    assert server.alive()
