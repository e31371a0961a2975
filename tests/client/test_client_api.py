"""InferenceClient against a real gRPC server process (tests/client/oip_test_server.py)."""

from __future__ import annotations

import grpc
import ml_dtypes
import numpy as np
import pytest
from client_helpers import Server, start_server, stop_server
from jaxport.client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    InferenceClient,
    InferenceServerError,
    ModelIndex,
    TensorMetadata,
)
from jaxport.protocol import dtypes
from jaxport.protocol.errors import InvalidArgumentError, ProtocolError
from support.certs import Pki


def arrays() -> dict[str, np.ndarray]:
    """One array per supported datatype, with extremes and specials."""
    out: dict[str, np.ndarray] = {}
    for row in dtypes.DTYPES:
        if row.datatype == "BOOL":
            a = np.array([[True, False, True]])
        elif row.numpy.kind in "iu":
            info = np.iinfo(row.numpy)
            a = np.array([[info.min, 0, info.max]], dtype=row.numpy)
        else:
            a = np.array([[np.nan, -np.inf, 1.5]], dtype=np.float64).astype(row.numpy)
        out[row.datatype.lower()] = a
    return out


def same(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.fixture
def client(server: Server):
    with InferenceClient(server.url, timeout=30) as c:
        yield c


def server_error(fn, *args, **kwargs) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as info:
        fn(*args, **kwargs)
    return info.value


def test_health(client: InferenceClient) -> None:
    assert client.server_live() is True
    assert client.server_ready() is True
    assert client.model_ready("echo") is True
    assert client.model_ready("nope") is False
    client.wait_ready(timeout=5, model="echo")


def test_wait_ready_times_out_naming_the_model(client: InferenceClient) -> None:
    with pytest.raises(TimeoutError, match="model 'nope'"):
        client.wait_ready(timeout=0.3, model="nope")


def test_metadata(client: InferenceClient) -> None:
    server = client.server_metadata()
    assert (server.name, server.extensions) == ("oip-test", ("model_repository",))
    meta = client.model_metadata("echo")
    assert meta.name == "echo" and meta.versions == ("1",) and meta.platform == "echo"
    assert meta.inputs == (
        TensorMetadata("x", "FP32", (-1, 3)), TensorMetadata("h", "BF16", (-1,))
    )
    assert meta.inputs[0].dtype == np.dtype("<f4")
    assert meta.inputs[1].dtype == np.dtype(ml_dtypes.bfloat16)
    config = client.model_config("echo")
    assert config.input[0].name == "x" and config.input[0].data_type == 11  # TYPE_FP32
    assert client.model_statistics().model_stats[0].name == "echo"


def test_errors_keep_code_and_server_message(client: InferenceClient) -> None:
    err = server_error(client.model_metadata, "nope")
    assert err.code == "NOT_FOUND"
    assert err.status_code is grpc.StatusCode.NOT_FOUND
    assert err.message == "model 'nope' not found; available: echo"
    assert str(err) == "NOT_FOUND: model 'nope' not found; available: echo"
    assert isinstance(err, ProtocolError)
    err = server_error(client.infer, "echo", {"x": np.zeros(2)}, outputs=["zz"])
    assert (err.code, err.message) == ("INVALID_ARGUMENT", "unknown requested output 'zz'")
    err = server_error(client.infer, "echo", {"x": np.zeros(2)}, version="7")
    assert err.code == "NOT_FOUND" and "'7'" in err.message


@pytest.mark.parametrize("raw", [True, False])
def test_infer_round_trips_every_datatype(client: InferenceClient, raw: bool) -> None:
    inputs = arrays()
    if not raw:
        inputs = {k: v for k, v in inputs.items() if k not in ("fp16", "bf16")}
    result = client.infer("echo", inputs, request_id="req-1", parameters={"p": 3})
    assert (result.model_name, result.model_version, result.id) == ("echo", "1", "req-1")
    assert result.parameters == {"p": 3}
    assert list(result.outputs) == list(inputs)
    for name, array in inputs.items():
        assert same(result[name], array), name


def test_bf16_is_sent_as_two_byte_raw(client: InferenceClient) -> None:
    x = np.array([1.0, -2.0, 0.5], dtype=ml_dtypes.bfloat16)
    assert same(client.infer("echo", {"x": x})["x"], x)
    with pytest.raises(InvalidArgumentError, match="BF16"):
        client.infer("echo", {"x": x}, raw=False)


def test_requested_output_subset(client: InferenceClient) -> None:
    result = client.infer("echo", {"a": np.ones(2), "b": np.zeros(3)}, outputs=["b"])
    assert list(result.outputs) == ["b"]


def test_large_tensor_within_default_limit(client: InferenceClient) -> None:
    assert DEFAULT_MAX_MESSAGE_BYTES == 256 * 1024 * 1024
    big = np.arange(10 * 1024 * 1024, dtype=np.float32)  # 40 MiB each way
    assert same(client.infer("echo", {"big": big})["big"], big)


def test_message_limit_is_configurable(server: Server) -> None:
    big = np.zeros(5 * 1024 * 1024, dtype=np.float32)  # 20 MiB
    with InferenceClient(server.url, max_message_bytes=4 * 1024 * 1024) as small:
        err = server_error(small.infer, "echo", {"big": big})
    assert err.code == "RESOURCE_EXHAUSTED"


def test_deadline(client: InferenceClient) -> None:
    x = np.zeros(4)
    err = server_error(client.infer, "echo", {"x": x}, parameters={"sleep_s": 2.0}, timeout=0.2)
    assert err.code == "DEADLINE_EXCEEDED"
    with InferenceClient(client.target, timeout=0.2) as impatient:
        err = server_error(impatient.infer, "echo", {"x": x}, parameters={"sleep_s": 2.0})
    assert err.code == "DEADLINE_EXCEEDED"


def test_unreachable_server_is_unavailable() -> None:
    with InferenceClient("127.0.0.1:1", timeout=5) as c:
        err = server_error(c.server_live)
    assert err.code == "UNAVAILABLE"


def test_stream_infer(client: InferenceClient) -> None:
    requests = [{"x": np.full(3, i, dtype=np.int32)} for i in range(6)]
    results = list(client.stream_infer("echo", requests))
    assert [r.id for r in results] == [str(i) for i in range(6)]
    for i, r in enumerate(results):
        assert same(r["x"], requests[i]["x"])


def test_stream_errors(client: InferenceClient) -> None:
    good = {"x": np.ones(2, dtype=np.float32)}
    results = list(
        client.stream_infer("echo", [good, good], outputs=["nope"], raise_errors=False)
    )
    assert [r.error for r in results] == ["INVALID_ARGUMENT: unknown requested output 'nope'"] * 2
    assert [r.id for r in results] == ["0", "1"]
    err = server_error(list, client.stream_infer("echo", [good], outputs=["nope"]))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", "unknown requested output 'nope'")
    slow = client.stream_infer("echo", [good], parameters={"sleep_s": 2.0}, timeout=0.2)
    err = server_error(list, slow)
    assert err.code == "DEADLINE_EXCEEDED"


def test_stream_request_errors_surface_in_the_caller(client: InferenceClient) -> None:
    """An input the protocol cannot carry fails with the codec's error, not grpc's
    'Exception iterating requests!'; so does an exception from the caller's own iterable."""
    bad = [{"x": np.ones(2)}, {"c": np.ones(2, np.complex64)}]
    with pytest.raises(InvalidArgumentError, match="input 'c': unsupported dtype 'complex64'"):
        list(client.stream_infer("echo", bad))

    def broken():
        yield {"x": np.ones(2)}
        raise KeyError("caller bug")

    with pytest.raises(KeyError, match="caller bug"):
        list(client.stream_infer("echo", broken()))
    assert client.server_live()


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("NOT_FOUND: unknown model 'm'", "NOT_FOUND", "unknown model 'm'"),
        ("model exploded: badly", "UNKNOWN", "model exploded: badly"),
        ("OK: fine", "UNKNOWN", "OK: fine"),
        ("plain", "UNKNOWN", "plain"),
    ],
)
def test_stream_error_codes(text: str, code: str, message: str) -> None:
    err = InferenceServerError.from_stream_error(text)
    assert (err.code, err.message) == (code, message)


def test_repository_load_unload() -> None:
    s = start_server()
    try:
        with InferenceClient(s.url, timeout=30) as c:
            assert c.repository_index() == [ModelIndex("echo", "1", "READY", "")]
            c.unload_model("echo")
            assert c.model_ready("echo") is False
            assert c.repository_index(ready=True) == []
            err = server_error(c.infer, "echo", {"x": np.zeros(1)})
            assert (err.code, err.message) == ("UNAVAILABLE", "model 'echo' is not loaded")
            c.load_model("echo")
            assert c.model_ready("echo") is True
            err = server_error(c.load_model, "other")
            assert err.code == "NOT_FOUND" and "'other'" in err.message
    finally:
        stop_server(s)


def test_bearer_token(token_server: Server) -> None:
    with InferenceClient(token_server.url, timeout=30) as anonymous:
        err = server_error(anonymous.server_live)
    assert (err.code, err.message) == ("UNAUTHENTICATED", "missing or invalid bearer token")
    with InferenceClient(token_server.url, timeout=30, token="s3cret") as c:
        assert c.server_live()
        (result,) = c.stream_infer("echo", [{"x": np.ones(1)}])
        assert result["x"].tolist() == [1.0]


def test_mutual_tls(tls_server: Server, pki: Pki) -> None:
    with InferenceClient(
        tls_server.url,
        timeout=30,
        root_certificates=pki.ca_cert,
        client_certificate=pki.client_cert,
        client_key=pki.read("client_key"),
    ) as c:
        assert c.server_live()
        assert c.infer("echo", {"x": np.ones(2)})["x"].tolist() == [1.0, 1.0]
    with InferenceClient(tls_server.url, timeout=30, root_certificates=pki.ca_cert) as no_cert:
        assert server_error(no_cert.server_live).code == "UNAVAILABLE"
    with InferenceClient(tls_server.url, timeout=30) as plaintext:
        assert server_error(plaintext.server_live).code == "UNAVAILABLE"


def test_client_certificate_needs_its_key(pki: Pki) -> None:
    with pytest.raises(ValueError, match="together"):
        InferenceClient("127.0.0.1:1", client_certificate=pki.client_cert)


def test_context_manager_closes_the_channel(server: Server) -> None:
    with InferenceClient(server.url) as c:
        assert c.server_live()
    with pytest.raises(ValueError):
        c.server_live()
