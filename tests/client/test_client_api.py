"""InferenceClient against a REAL bridge (`jaxport serve`) serving models exported this session.

Every output is compared with the model function run by JAX in this process
(`client_models.run_jax`): bit for bit for the echo models, within `TOLERANCES` otherwise.
"""

from __future__ import annotations

import re

import grpc
import ml_dtypes
import numpy as np
import pytest
from client_helpers import TOKEN, assert_matches_jax, mtls, same, server_error
from client_models import BIG_ELEMENTS, ECHO_SHAPE, MIXED_OUTPUTS, echo_name, run_jax
from jaxport.client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    InferenceClient,
    InferenceServerError,
    ModelIndex,
    TensorMetadata,
)
from jaxport.protocol import dtypes
from jaxport.protocol.errors import InvalidArgumentError, ProtocolError
from jaxport.protocol.gen.inference import model_config_pb2
from support.bridge import BridgeProcess
from support.certs import Pki
from support.gate import Gate

ECHO_MODELS = [echo_name(row.datatype) for row in dtypes.DTYPES]
ECHO_Y = "'y'"


def extremes(row: dtypes.DType) -> np.ndarray:
    """A (2, 3) array of `row`'s dtype with its extremes and specials (NaN, +-inf, -0.0)."""
    if row.datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if row.numpy.kind in "iu":
        info = np.iinfo(row.numpy)
        return np.array([[info.min, 0, info.max], [1, info.max - 1, info.min + 1]],
                        dtype=row.numpy)
    values = [[np.nan, -np.inf, 1.5], [np.inf, -0.0, -2.25]]
    return np.array(values, dtype=np.float64).astype(row.numpy)


def mixed_inputs() -> dict[str, np.ndarray]:
    """Inputs of `mixed`: a BF16 (3, 4), an INT64 (3,) with large values, a BOOL (3,)."""
    return {
        "a": (np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1).astype(ml_dtypes.bfloat16),
        "idx": np.array([-(2**40), 0, 2**35 + 1], dtype=np.int64),
        "flag": np.array([True, True, False]),
    }


@pytest.fixture
def client(bridge: BridgeProcess):
    with InferenceClient(bridge.address, timeout=30) as c:
        yield c


def test_health(client: InferenceClient) -> None:
    assert client.server_live() is True
    assert client.server_ready() is True
    assert client.model_ready("echo_fp32") is True
    # The bridge answers ModelReady of a model it does not know with NOT_FOUND (false is for
    # a known model that cannot serve: test_repository_load_unload).
    err = server_error(client.model_ready, "nope")
    assert err.code == "NOT_FOUND"
    # This repository has more than 10 models: 10 names, then how many more.
    assert re.fullmatch(r"unknown model 'nope' \(known models: (\w+, ){9}\w+ and \d+ more\)",
                        err.message), err.message
    client.wait_ready(timeout=60, model="mixed")  # ready already: a bound, not a premise


def test_wait_ready_times_out_naming_the_model(client: InferenceClient) -> None:
    with pytest.raises(TimeoutError, match="model 'nope'"):
        client.wait_ready(timeout=0.3, model="nope")


def test_metadata(client: InferenceClient) -> None:
    server = client.server_metadata()
    assert server.name == "jaxport" and "model_repository" in server.extensions
    for row in dtypes.DTYPES:
        meta = client.model_metadata(echo_name(row.datatype))
        assert meta.name == echo_name(row.datatype) and meta.versions == ("1",)
        assert meta.platform == "jax"
        assert meta.inputs == (TensorMetadata("x", row.datatype, ECHO_SHAPE),)
        assert meta.outputs == (TensorMetadata("y", row.datatype, ECHO_SHAPE),)
        assert meta.inputs[0].dtype == row.numpy
    meta = client.model_metadata("mixed")
    assert meta.inputs == (
        TensorMetadata("a", "BF16", (3, 4)), TensorMetadata("idx", "INT64", (3,)),
        TensorMetadata("flag", "BOOL", (3,)),
    )
    assert meta.inputs[0].dtype == np.dtype(ml_dtypes.bfloat16)
    assert [o.name for o in meta.outputs] == list(MIXED_OUTPUTS)
    config = client.model_config("echo_fp32")
    assert config.name == "echo_fp32"
    assert config.input[0].name == "x" and config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert list(config.input[0].dims) == list(ECHO_SHAPE)
    stats = {s.name for s in client.model_statistics().model_stats}
    assert {"echo_fp32", "mixed", "slow", "big"} <= stats


def test_errors_keep_code_and_server_message(client: InferenceClient) -> None:
    err = server_error(client.model_metadata, "nope")
    assert err.code == "NOT_FOUND"
    assert err.status_code is grpc.StatusCode.NOT_FOUND
    assert err.message.startswith("unknown model 'nope' (known models: ")
    assert str(err) == f"NOT_FOUND: {err.message}"
    assert isinstance(err, ProtocolError)
    x = {"x": np.zeros(ECHO_SHAPE, np.float32)}
    err = server_error(client.infer, "echo_fp32", x, outputs=["zz"])
    assert (err.code, err.message) == (
        "INVALID_ARGUMENT",
        f"unknown requested output 'zz': model 'echo_fp32' (version 1) has outputs {ECHO_Y}",
    )
    err = server_error(client.infer, "echo_fp32", x, version="7")
    assert (err.code, err.message) == (
        "NOT_FOUND", "model 'echo_fp32' has no version '7' (known: 1)"
    )
    err = server_error(client.infer, "echo_fp32", {"w": x["x"]})
    assert (err.code, err.message) == (
        "INVALID_ARGUMENT",
        "unexpected input 'w': model 'echo_fp32' (version 1) has inputs 'x' (FP32 [2, 3])",
    )
    err = server_error(client.infer, "echo_fp32", {"x": np.zeros((3, 2), np.float32)})
    assert err.code == "INVALID_ARGUMENT" and "input 'x'" in err.message and "[2, 3]" in err.message


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "typed"])
@pytest.mark.parametrize("row", dtypes.DTYPES, ids=lambda r: r.datatype)
def test_infer_round_trips_every_datatype(
    client: InferenceClient, row: dtypes.DType, raw: bool
) -> None:
    model = echo_name(row.datatype)
    x = extremes(row)
    if not raw and row.contents_field is None:  # FP16/BF16: the protocol carries them raw only
        with pytest.raises(InvalidArgumentError, match=row.datatype):
            client.infer(model, {"x": x}, raw=False)
        return
    result = client.infer(model, {"x": x}, request_id="req-1", parameters={"p": 3}, raw=raw)
    assert (result.model_name, result.model_version, result.id) == (model, "1", "req-1")
    assert list(result.outputs) == ["y"]
    (want,) = run_jax(model, {"x": x})
    assert same(result["y"], want), (model, result["y"], want)
    assert same(result["y"], x)


def test_bf16_is_sent_as_two_byte_raw(client: InferenceClient) -> None:
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -0.125]], dtype=ml_dtypes.bfloat16)
    assert same(client.infer("echo_bf16", {"x": x})["y"], x)
    with pytest.raises(InvalidArgumentError, match="BF16"):
        client.infer("echo_bf16", {"x": x}, raw=False)


def test_multi_input_output_matches_jax(client: InferenceClient) -> None:
    inputs = mixed_inputs()
    want = dict(zip(MIXED_OUTPUTS, run_jax("mixed", inputs), strict=True))
    result = client.infer("mixed", inputs)
    assert list(result.outputs) == list(MIXED_OUTPUTS)
    for name in MIXED_OUTPUTS:
        assert_matches_jax(result[name], want[name], name)


def test_requested_output_subset(client: InferenceClient) -> None:
    inputs = mixed_inputs()
    want = dict(zip(MIXED_OUTPUTS, run_jax("mixed", inputs), strict=True))
    result = client.infer("mixed", inputs, outputs=["s", "m"])
    assert list(result.outputs) == ["s", "m"]
    assert_matches_jax(result["s"], want["s"], "s")
    assert_matches_jax(result["m"], want["m"], "m")


def test_large_tensor_within_default_limit(client: InferenceClient) -> None:
    assert DEFAULT_MAX_MESSAGE_BYTES == 256 * 1024 * 1024
    big = np.arange(BIG_ELEMENTS, dtype=np.float32)  # 40 MiB each way
    (want,) = run_jax("big", {"x": big})
    result = client.infer("big", {"x": big})
    (name,) = result.outputs
    assert result[name].nbytes == 40 * 1024 * 1024
    assert_matches_jax(result[name], want, "big")


def test_message_limit_is_configurable(bridge: BridgeProcess) -> None:
    big = np.zeros(BIG_ELEMENTS, dtype=np.float32)  # 40 MiB > 4 MiB
    with InferenceClient(bridge.address, max_message_bytes=4 * 1024 * 1024) as small:
        err = server_error(small.infer, "big", {"x": big})
    assert err.code == "RESOURCE_EXHAUSTED"


def slow_inputs(rounds: int) -> dict[str, np.ndarray]:
    return {"x": np.full((256, 256), 0.01, np.float32), "n": np.array(rounds, np.int32)}


def test_slow_model_matches_jax(client: InferenceClient) -> None:
    inputs = slow_inputs(3)
    (want,) = run_jax("slow", inputs)
    (got,) = client.infer("slow", inputs).outputs.values()
    assert_matches_jax(got, want, "slow")


def test_deadline(client: InferenceClient, gate: Gate) -> None:
    # `slow` is held at the test gate: no answer can come before the deadline, on any machine.
    inputs = slow_inputs(3)
    with gate.holding("slow"):
        err = server_error(client.infer, "slow", inputs, timeout=0.2)
        assert err.code == "DEADLINE_EXCEEDED"
        with InferenceClient(client.target, timeout=0.2) as impatient:
            err = server_error(impatient.infer, "slow", inputs)
        assert err.code == "DEADLINE_EXCEEDED"


def test_unreachable_server_is_unavailable() -> None:
    with InferenceClient("127.0.0.1:1", timeout=5) as c:
        err = server_error(c.server_live)
    assert err.code == "UNAVAILABLE"


def test_stream_infer(client: InferenceClient) -> None:
    requests = [{"x": np.full(ECHO_SHAPE, i, dtype=np.int32)} for i in range(6)]
    results = list(client.stream_infer("echo_int32", requests))
    assert [r.id for r in results] == [str(i) for i in range(6)]
    for i, r in enumerate(results):
        (want,) = run_jax("echo_int32", requests[i])
        assert same(r["y"], want)


def test_stream_errors(client: InferenceClient, gate: Gate) -> None:
    good = {"x": np.ones(ECHO_SHAPE, dtype=np.float32)}
    message = f"unknown requested output 'nope': model 'echo_fp32' (version 1) has outputs {ECHO_Y}"
    results = list(
        client.stream_infer("echo_fp32", [good, good], outputs=["nope"], raise_errors=False)
    )
    assert [r.error for r in results] == [f"INVALID_ARGUMENT: {message}"] * 2
    assert [r.id for r in results] == ["0", "1"]
    err = server_error(list, client.stream_infer("echo_fp32", [good], outputs=["nope"]))
    assert (err.code, err.message) == ("INVALID_ARGUMENT", message)
    with gate.holding("slow"):  # no answer can come before the deadline
        slow = client.stream_infer("slow", [slow_inputs(3)], timeout=0.2)
        err = server_error(list, slow)
    assert err.code == "DEADLINE_EXCEEDED"


def test_stream_request_errors_surface_in_the_caller(client: InferenceClient) -> None:
    """An input the protocol cannot carry fails with the codec's error, not grpc's
    'Exception iterating requests!'; so does an exception from the caller's own iterable."""
    one = np.ones(ECHO_SHAPE, np.float32)
    bad = [{"x": one}, {"c": np.ones(2, np.complex64)}]
    with pytest.raises(InvalidArgumentError, match="input 'c': unsupported dtype 'complex64'"):
        list(client.stream_infer("echo_fp32", bad))

    def broken():
        yield {"x": one}
        raise KeyError("caller bug")

    with pytest.raises(KeyError, match="caller bug"):
        list(client.stream_infer("echo_fp32", broken()))
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


def test_repository_load_unload(client: InferenceClient) -> None:
    index = client.repository_index()
    assert ModelIndex("spare", "1", "READY", "") in index
    assert {m.name for m in index} >= {*ECHO_MODELS, "spare", "mixed", "slow", "big"}
    x = {"x": np.ones(ECHO_SHAPE, np.float32)}
    try:
        client.unload_model("spare")
        assert client.model_ready("spare") is False
        assert ModelIndex("spare", "1", "UNAVAILABLE", "unloaded") in client.repository_index()
        assert "spare" not in {m.name for m in client.repository_index(ready=True)}
        err = server_error(client.infer, "spare", x)
        assert (err.code, err.message) == (
            "UNAVAILABLE", "model 'spare' has no ready version (version 1 is UNAVAILABLE: unloaded)"
        )
    finally:
        client.load_model("spare")
    assert client.model_ready("spare") is True
    assert same(client.infer("spare", x)["y"], x["x"])
    err = server_error(client.load_model, "other")
    assert err.code == "NOT_FOUND"
    assert err.message.startswith(
        "unknown model 'other': no directory other/ in the repository (known models: ")


def test_bearer_token(secure_bridge: BridgeProcess, pki: Pki) -> None:
    refused = (
        "UNAUTHENTICATED",
        "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'",
    )
    x = np.full(ECHO_SHAPE, 1.0, np.float32)
    for token in (None, "wrong"):
        with InferenceClient(secure_bridge.address, timeout=30, token=token, **mtls(pki)) as c:
            assert c.server_live()  # liveness/readiness are open by design (docs/security.md)
            for call in (c.server_metadata, lambda: c.infer("echo_fp32", {"x": x}),
                         lambda: list(c.stream_infer("echo_fp32", [{"x": x}]))):
                err = server_error(call)
                assert (err.code, err.message) == refused
    with InferenceClient(secure_bridge.address, timeout=30, token=TOKEN, **mtls(pki)) as c:
        assert c.server_metadata().name == "jaxport"
        (result,) = c.stream_infer("echo_fp32", [{"x": x}])
        assert same(result["y"], x)


def test_mutual_tls(secure_bridge: BridgeProcess, pki: Pki) -> None:
    x = np.arange(6, dtype=np.float64).reshape(ECHO_SHAPE)
    with InferenceClient(
        secure_bridge.address,
        timeout=30,
        token=TOKEN,
        root_certificates=pki.ca_cert,
        client_certificate=pki.client_cert,
        client_key=pki.read("client_key"),
    ) as c:
        assert c.server_live()
        assert same(c.infer("echo_fp64", {"x": x})["y"], x)
    addr = secure_bridge.address
    with InferenceClient(addr, timeout=30, token=TOKEN, root_certificates=pki.ca_cert) as no_cert:
        assert server_error(no_cert.server_live).code == "UNAVAILABLE"
    with InferenceClient(
        addr, timeout=30, token=TOKEN, root_certificates=pki.ca_cert,
        client_certificate=pki.rogue_client_cert, client_key=pki.rogue_client_key,
    ) as rogue:
        assert server_error(rogue.server_live).code == "UNAVAILABLE"
    with InferenceClient(addr, timeout=30, token=TOKEN) as plaintext:
        assert server_error(plaintext.server_live).code == "UNAVAILABLE"


def test_client_certificate_needs_its_key(pki: Pki) -> None:
    with pytest.raises(ValueError, match="together"):
        InferenceClient("127.0.0.1:1", client_certificate=pki.client_cert)


def test_context_manager_closes_the_channel(bridge: BridgeProcess) -> None:
    with InferenceClient(bridge.address) as c:
        assert c.server_live()
    with pytest.raises(ValueError):
        c.server_live()
