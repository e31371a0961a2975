"""ModelInfer and metadata RPCs against real bridges over gRPC: the native engine (the default
server) and the workers' engines (`--engine exported`, `--engine pjrt`).

Tolerances: FP32 rtol=atol=1e-6 - the bridge runs the same StableHLO on the same XLA CPU
backend as the exporter's goldens, so only reassociation-level rounding may differ. BF16:
rtol=2**-7 (one unit in the last place of its 8-bit significand) with atol=2**-7, because a
different accumulation order of a bf16 matmul may round the last bit the other way. Integers
and booleans: exact.
"""

from __future__ import annotations

import bridge_models as bm
import grpc
import jax
import ml_dtypes
import numpy as np
import pytest
from bridge_helpers import golden_cases, rpc_error
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import model_config_pb2 as mc

BF16_TOL = 2.0**-7


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Same dtype and shape; values within the tolerance of the dtype (module docstring)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype == ml_dtypes.bfloat16:
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                                   rtol=BF16_TOL, atol=BF16_TOL, err_msg=what)
    elif np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def infer(stub, model: str, inputs: dict[str, np.ndarray], **kw) -> pb.ModelInferResponse:
    return stub.ModelInfer(codecs.build_infer_request(model, inputs, **kw), timeout=30)


@pytest.mark.parametrize("engine", ["default", "pjrt"])
@pytest.mark.parametrize("model", ["mlp", "mixed", "mlp2p", "ignores"])
def test_outputs_equal_goldens(engine, model, artifacts, stub, stub_pjrt):
    client = stub if engine == "default" else stub_pjrt
    cases = golden_cases(artifacts[model])
    assert cases, f"{model} has no goldens"
    for case, inputs, expected in cases:
        response = infer(client, model, inputs, request_id=f"{model}-{case}")
        assert response.id == f"{model}-{case}"
        assert (response.model_name, response.model_version) == (model, "1")
        # tritonclient reads nothing but raw_output_contents: every output must be there.
        assert len(response.raw_output_contents) == len(response.outputs) == len(expected)
        assert all(not o.HasField("contents") for o in response.outputs)
        got = codecs.decode_infer_response(response)
        assert list(got) == list(expected)  # manifest order
        for name, want in expected.items():
            assert_close(got[name], want, f"{engine}/{model}/{case}/{name}")


def test_engines_agree_on_every_golden(artifacts, stub, stub_exported, stub_pjrt):
    """The three engines give the same answers on every golden of every model: native (the
    default server, in the front), exported (`--engine exported`: Exported.call on the
    workers) and pjrt (`--engine pjrt`: raw model.mlirbc on the workers), each asserted to be
    the engine that serves the model by its ModelConfig `engine` parameter."""
    stubs = {"native": stub, "exported": stub_exported, "pjrt": stub_pjrt}
    for model in ("mlp", "mixed", "slow", "mlp2p", "ignores"):
        for engine, client in stubs.items():
            config = client.ModelConfig(pb.ModelConfigRequest(name=model), timeout=30).config
            assert config.parameters["engine"].string_value == engine, (model, engine)
        for case, inputs, _ in golden_cases(artifacts[model]):
            got = {engine: codecs.decode_infer_response(infer(client, model, inputs))
                   for engine, client in stubs.items()}
            for engine in ("exported", "pjrt"):
                assert list(got[engine]) == list(got["native"])
                for name, want in got["native"].items():
                    assert_close(got[engine][name], want,
                                 f"{engine} vs native {model}/{case}/{name}")


def test_multi_platform_artifact_binds_the_platform_index(artifacts):
    from jaxport.artifact import manifest as manifest_io

    manifest = manifest_io.load(artifacts["mlp2p"])
    assert list(manifest.platforms) == ["cuda", "cpu"]
    assert manifest.programs[0].arguments[0].name == "platform_index"


@pytest.mark.parametrize("engine", ["default", "pjrt"])
def test_inputs_jax_dropped_are_still_inputs(engine, artifacts, stub, stub_pjrt):
    from jaxport.artifact import manifest as manifest_io

    manifest = manifest_io.load(artifacts["ignores"])
    assert {(d.name, d.kind) for d in manifest.dropped_leaves} == {
        ("unused", "input"), ("params.z", "parameter")}
    client = stub if engine == "default" else stub_pjrt
    meta = client.ModelMetadata(pb.ModelMetadataRequest(name="ignores"))
    assert [t.name for t in meta.inputs] == ["x", "unused"]
    x = np.array([2.0, 4.0], np.float32)
    got = codecs.decode_infer_response(
        infer(client, "ignores", {"x": x, "unused": np.arange(3, dtype=np.int32)}))
    np.testing.assert_array_equal(got["output"], np.array([6.0, -6.0], np.float32))


def test_matches_jax_in_process(stub):
    """Fresh random inputs (not the goldens): the bridge equals the JAX function itself."""
    rng = np.random.default_rng(42)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    got = codecs.decode_infer_response(infer(stub, "mlp", {"x": x}))["output"]
    want = np.asarray(jax.jit(bm.mlp)(bm.mlp_params(), x))
    assert_close(got, want, "mlp vs jax")

    a = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    idx = np.array([-5, 0, 2**40], dtype=np.int64)  # beyond int32: x64 must be on in the bridge
    flag = np.array([True, False, True])
    got = codecs.decode_infer_response(infer(stub, "mixed", {"a": a, "idx": idx, "flag": flag}))
    with jax.enable_x64(True):
        h, s, m = (np.asarray(v) for v in jax.jit(bm.mixed)(bm.mixed_params(), a, idx, flag))
    assert_close(got["h"], h, "h")
    assert_close(got["s"], s, "s")
    assert got["s"][2] == 3 * 2**40 + 40
    assert_close(got["m"], m, "m")


def test_bool_nonzero_bytes_are_true_before_execution(stub):
    """Raw BOOL bytes 2 and 255 mean true (Triton's reading): XLA computes on 0/1, so
    `logical_xor(flag, idx > 0)` is a boolean and equals the answer for 0/1 bytes (raw and
    typed decode the same: tests/protocol; this model's BF16 input can only travel raw)."""
    a = np.zeros((3, 4), ml_dtypes.bfloat16)
    idx = np.array([0, 1, -1], dtype=np.int64)
    request = codecs.build_infer_request(
        "mixed", {"a": a, "idx": idx, "flag": np.zeros(3, np.bool_)})
    names = [t.name for t in request.inputs]
    request.raw_input_contents[names.index("flag")] = b"\x00\x02\xff"
    response = stub.ModelInfer(request, timeout=30)
    m_raw = codecs.decode_infer_response(response)["m"]
    m_01 = codecs.decode_infer_response(infer(
        stub, "mixed", {"a": a, "idx": idx, "flag": np.array([False, True, True])}))["m"]
    np.testing.assert_array_equal(m_raw, [False, False, True])
    np.testing.assert_array_equal(m_raw, m_01)
    assert response.raw_output_contents[[o.name for o in response.outputs].index("m")] \
        == b"\x00\x00\x01"


def test_requested_outputs_subset_in_requested_order(stub, artifacts):
    _, inputs, expected = golden_cases(artifacts["mixed"])[0]
    response = infer(stub, "mixed", inputs, outputs=["m", "h"])
    assert [o.name for o in response.outputs] == ["m", "h"]
    got = codecs.decode_infer_response(response)
    assert_close(got["m"], expected["m"], "m")
    assert_close(got["h"], expected["h"], "h")


def test_typed_contents_equal_raw(stub, artifacts):
    _, inputs, expected = golden_cases(artifacts["mlp"])[0]
    response = infer(stub, "mlp", inputs, raw=False)
    assert_close(codecs.decode_infer_response(response)["output"], expected["output"], "typed")
    assert response.raw_output_contents  # outputs stay raw whatever the request used


def test_scalar_input(stub):
    x = np.full((256, 256), 0.5, np.float32)
    got = codecs.decode_infer_response(
        infer(stub, "slow", {"x": x, "n": np.array(3, np.int32)}))["output"]
    want = np.asarray(jax.jit(bm.slow)(bm.slow_params(), x, np.int32(3)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_health_rpcs(stub):
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    for model in ("mlp", "mixed", "slow", "mlp2p", "ignores"):
        assert stub.ModelReady(pb.ModelReadyRequest(name=model)).ready
        assert stub.ModelReady(pb.ModelReadyRequest(name=model, version="1")).ready


def test_server_metadata_lists_only_implemented_extensions(stub):
    meta = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert meta.name == "jaxport" and meta.version
    assert sorted(meta.extensions) == ["classification", "model_configuration",
                                       "model_repository", "statistics"]


def test_model_metadata_from_manifest(stub):
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name="mixed"))
    assert meta.name == "mixed" and list(meta.versions) == ["1"] and meta.platform == "jax"
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("a", "BF16", [3, 4]), ("idx", "INT64", [3]), ("flag", "BOOL", [3])]
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("h", "BF16", [3, 4]), ("s", "INT64", [3]), ("m", "BOOL", [3])]


@pytest.mark.parametrize("engine", ["default", "pjrt"])
def test_model_config_minimal_triton(engine, stub, stub_pjrt):
    client = stub if engine == "default" else stub_pjrt
    config = client.ModelConfig(pb.ModelConfigRequest(name="mixed")).config
    assert config.name == "mixed" and config.max_batch_size == 0
    # The default engine's models are executed by the front's native engine (docs/native-
    # engine.md, Serving); an explicit `--engine pjrt` keeps the model on the workers.
    serving = {"default": "native", "pjrt": "pjrt"}[engine]
    assert config.backend == f"jaxport-{serving}"
    assert config.parameters["engine"].string_value == serving
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("a", mc.TYPE_BF16, [3, 4]), ("idx", mc.TYPE_INT64, [3]), ("flag", mc.TYPE_BOOL, [3])]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("h", mc.TYPE_BF16, [3, 4]), ("s", mc.TYPE_INT64, [3]), ("m", mc.TYPE_BOOL, [3])]


def test_model_statistics_count_requests(stub_pjrt):
    def stats():
        response = stub_pjrt.ModelStatistics(pb.ModelStatisticsRequest(name="mlp", version="1"))
        (s,) = response.model_stats
        return s

    before = stats()
    x = np.zeros((2, 8), np.float32)
    for _ in range(3):
        infer(stub_pjrt, "mlp", {"x": x})
    err = rpc_error(infer, stub_pjrt, "mlp", {"x": np.zeros((3, 8), np.float32)})
    assert (err.code(), err.details()) == (grpc.StatusCode.INVALID_ARGUMENT,
                                           "input 'x': expected shape [2, 8], got [3, 8]")
    after = stats()
    assert after.inference_count == before.inference_count + 3
    assert after.execution_count == before.execution_count + 3
    assert after.inference_stats.success.count == before.inference_stats.success.count + 3
    assert after.inference_stats.fail.count == before.inference_stats.fail.count + 1
    assert after.inference_stats.compute_infer.ns > before.inference_stats.compute_infer.ns
    assert after.last_inference >= before.last_inference
    # Triton's per-batch-size split: an unbatched model executes batch size 1, once per request.
    assert [b.batch_size for b in after.batch_stats] == [1]
    (b_before,) = before.batch_stats or [pb.InferBatchStatistics()]
    (b_after,) = after.batch_stats
    assert b_after.compute_infer.count == b_before.compute_infer.count + 3
    assert b_after.compute_infer.ns > b_before.compute_infer.ns
    every = stub_pjrt.ModelStatistics(pb.ModelStatisticsRequest())
    assert {(s.name, s.version) for s in every.model_stats} == {
        ("mlp", "1"), ("mixed", "1"), ("slow", "1"), ("mlp2p", "1"), ("ignores", "1")}


@pytest.mark.parametrize("engine", ["default", "pjrt"])
def test_concurrent_requests_each_get_their_own_answer(engine, artifacts, stub, stub_pjrt):
    """16 callers, 96 requests over three models at once: no mixing, no lost response."""
    from concurrent.futures import ThreadPoolExecutor

    client = stub if engine == "default" else stub_pjrt
    work = [(m, c) for m in ("mlp", "mixed", "ignores") for c in golden_cases(artifacts[m])]
    jobs = [(i, work[i % len(work)]) for i in range(96)]

    def run(job):
        i, (model, (case, inputs, expected)) = job
        rid = f"{model}/{case}/{i}"
        response = infer(client, model, inputs, request_id=rid)
        assert response.id == rid
        return codecs.decode_infer_response(response), expected, f"{model}/{case}"

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, jobs))
    assert len(results) == len(jobs)
    for got, expected, what in results:
        for name, want in expected.items():
            assert_close(got[name], want, f"{engine} concurrent {what}/{name}")
