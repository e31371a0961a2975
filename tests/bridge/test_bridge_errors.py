"""Every request error: exact gRPC status, a message naming the offending thing with expected
vs got, and the server (and the model) still answering a valid request afterwards."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
from bridge_helpers import rpc_error
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

X = np.ones((2, 8), np.float32)
MIXED = {
    "a": np.ones((3, 4), np.float32).astype("bfloat16"),
    "idx": np.array([1, 2, 3], np.int64),
    "flag": np.array([True, False, True]),
}


def request(model: str = "mlp", inputs=None, **kw) -> pb.ModelInferRequest:
    return codecs.build_infer_request(model, {"x": X} if inputs is None else inputs, **kw)


def assert_status(stub, req, code: grpc.StatusCode, *fragments: str) -> str:
    err = rpc_error(stub.ModelInfer, req, timeout=30)
    assert err.code() == code, f"{err.code()}: {err.details()}"
    for fragment in fragments:
        assert fragment in err.details(), f"{fragment!r} not in {err.details()!r}"
    return err.details()


@pytest.fixture(autouse=True)
def still_serving(stub):
    """After every error case, the same server answers a valid request."""
    yield
    response = stub.ModelInfer(request(), timeout=30)
    assert codecs.decode_infer_response(response)["output"].shape == (2, 4)


# The conformance suite (tests/conformance/cases/error_*.json, every runner, every server
# configuration) already holds any OIP server to each error's status code and to naming the
# offending input, output, model or version; these cases add jaxport's own wording (expected
# against got) and are not repeated where the suite says it all (unknown model or version,
# duplicate input).
@pytest.mark.parametrize(("model", "inputs", "edit", "fragments"), [
    pytest.param("mixed", {k: v for k, v in MIXED.items() if k != "flag"}, None,
                 ("missing input 'flag'", "BOOL [3]"), id="missing_input"),
    pytest.param("mlp", {"x": X, "bogus": X}, None,
                 ("unexpected input 'bogus'", "'x' (FP32 [2, 8])"), id="extra_input"),
    pytest.param("mlp", {"x": np.ones((3, 8), np.float32)}, None,
                 ("input 'x'", "expected shape [2, 8]", "got [3, 8]"), id="wrong_shape"),
    pytest.param("mlp", {"x": X.astype(np.float64)}, None,
                 ("input 'x'", "expected datatype FP32", "got FP64"), id="wrong_datatype"),
    pytest.param("mlp", None,
                 lambda r: r.raw_input_contents.__setitem__(0, r.raw_input_contents[0][:-4]),
                 ("input 'x'", "60 bytes", "expected 64"), id="byte_size_mismatch"),
])
def test_request_errors_say_expected_and_got(stub, model, inputs, edit, fragments):
    req = request(model, inputs)
    if edit is not None:
        edit(req)
    assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, *fragments)


def _peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def test_huge_declared_shape_is_checked_before_allocating(stub, bridge):
    # What proves "before allocating" is the answer and memory, not a clock: the shape is
    # refused by name with the declared size, the bridge's peak memory does not move (the
    # codec's own allocation bound is tests/protocol, under tracemalloc) and it stays up.
    req = request()
    del req.inputs[0].shape[:]
    req.inputs[0].shape.extend([2**40, 2**20])
    peak_before = _peak_rss_kib(bridge.pid)
    assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x'", "[2, 8]",
                  str(2**40))
    assert _peak_rss_kib(bridge.pid) - peak_before < 256 * 1024, "the bridge allocated"
    assert bridge.alive()


def test_error_messages_stay_short_for_hostile_names_and_shapes(stub):
    req = request(inputs={"x" * 100_000: X})
    details = assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "unexpected input",
                            "(100000 chars)")
    assert len(details) < 400
    req = request()
    req.inputs[0].shape.extend([1] * 10_000)
    details = assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x'",
                            "(10002 dimensions)")
    assert len(details) < 400


def test_hostile_model_names_and_versions_are_cut_in_messages(stub):
    details = assert_status(stub, request(model="m" * 100_000), grpc.StatusCode.NOT_FOUND,
                            "unknown model 'mmm")
    assert len(details) < 400
    details = assert_status(stub, request(version="9" * 100_000), grpc.StatusCode.NOT_FOUND,
                            "model 'mlp' has no version '999")
    assert len(details) < 400


def test_raw_and_typed_contents_together(stub):
    req = request()
    req.inputs[0].contents.fp32_contents.extend([1.0] * 16)
    assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x'", "typed contents")


def test_unknown_requested_output(stub):
    assert_status(stub, request(outputs=["nope"]), grpc.StatusCode.INVALID_ARGUMENT,
                  "requested output 'nope'", "'output'")


def test_unsupported_datatype_string(stub):
    req = request()
    req.inputs[0].datatype = "FP128"
    assert_status(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "input 'x'", "FP32", "FP128")


def test_deadline_exceeded(stub, gate):
    """A deadline that passes while the request executes is DEADLINE_EXCEEDED. The execution
    is held at the test gate, so it cannot finish first however fast the machine is."""
    x = np.full((256, 256), 0.1, np.float32)
    req = codecs.build_infer_request("slow", {"x": x, "n": np.array(3, np.int32)})
    # A request whose deadline passes before it starts executing (a busy machine) is refused
    # without running, also DEADLINE_EXCEEDED but not the case under test: retry, longer.
    for deadline_s in (0.3, 5.0, 60.0):
        with gate.holding("slow"):
            call = stub.ModelInfer.future(req, timeout=deadline_s)
            try:
                gate.wait_held("slow", 1, calls=[call])
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED, exc
                continue
            with pytest.raises(grpc.RpcError) as info:
                call.result()
            still_held = gate.held("slow")
        break
    else:
        raise AssertionError("the request never started executing within its deadline")
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED, info.value
    assert still_held == 1  # answered while the execution was still held


def test_metadata_errors(stub):
    err = rpc_error(stub.ModelMetadata, pb.ModelMetadataRequest(name="ghost"))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "'ghost'" in err.details()
    err = rpc_error(stub.ModelConfig, pb.ModelConfigRequest(name="mlp", version="9"))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "'9'" in err.details()
    err = rpc_error(stub.ModelReady, pb.ModelReadyRequest(name="ghost"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    err = rpc_error(stub.RepositoryIndex, pb.RepositoryIndexRequest(repository_name="other"))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "'other'" in err.details()
