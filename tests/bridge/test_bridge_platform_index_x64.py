"""A model lowered for ("cuda", "cpu") under jax_enable_x64 (FP64 parameters, an INT64 input)
takes an i64 platform index first; a real bridge serves it with both engines.

Tolerance: FP64 rtol=atol=1e-12 - the bridge runs the same StableHLO on the same XLA CPU backend
as the exporter's goldens, so only reassociation-level rounding may differ. INT64: exact.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest
from bridge_helpers import golden_cases
from jaxport.artifact import manifest as manifest_io
from jaxport.exporter import export
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess

MODEL = "wide2p"


def wide(params, x, n):
    """FP64 affine map plus an INT64 counter: both need jax_enable_x64."""
    return x @ params["w"] + params["b"], n * params["k"]


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal((4, 3)), "b": rng.standard_normal(3),
            "k": np.arange(1, 6, dtype=np.int64)}


INPUTS = {"x": jax.ShapeDtypeStruct((2, 4), np.float64),
          "n": jax.ShapeDtypeStruct((5,), np.int64)}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("x64repo")
    export(wide, _params(), INPUTS, root / MODEL / "1", output_names=["y", "m"], goldens=2,
           quiet=True, name=MODEL, platforms=("cuda", "cpu"))
    return root


@pytest.fixture(scope="module", params=["exported", "pjrt"])
def stub(request: pytest.FixtureRequest,
         repository: Path) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with BridgeProcess(repository, "--engine", request.param) as bridge, \
            bridge.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def test_manifest_platform_index_is_i64(repository: Path) -> None:
    manifest = manifest_io.load(repository / MODEL / "1")
    arg = manifest.programs[0].arguments[0]
    assert arg.name == "platform_index" and arg.index == 0
    assert (arg.dtype.mlir, arg.byte_size) == ("i64", 8)


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert list(got) == list(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        if np.issubdtype(value.dtype, np.floating):
            np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_serves_goldens(stub: pb_grpc.GRPCInferenceServiceStub, repository: Path) -> None:
    cases = golden_cases(repository / MODEL / "1")
    assert len(cases) == 2
    for case, inputs, expected in cases:
        response = stub.ModelInfer(codecs.build_infer_request(MODEL, inputs, request_id=case),
                                   timeout=30)
        _assert_close(codecs.decode_infer_response(response), expected)


def test_matches_jax_in_process(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4))
    n = np.array([2**40, -3, 0, 7, 2**33], np.int64)  # values an int32 could not hold
    response = stub.ModelInfer(codecs.build_infer_request(MODEL, {"x": x, "n": n}), timeout=30)
    with jax.enable_x64(True):
        y, m = jax.jit(wide)(_params(), x, n)
    _assert_close(codecs.decode_infer_response(response),
                  {"y": np.asarray(y), "m": np.asarray(m)})
    meta = stub.ModelMetadata(pb.ModelMetadataRequest(name=MODEL), timeout=10)
    assert [(t.name, t.datatype) for t in meta.inputs] == [("x", "FP64"), ("n", "INT64")]
