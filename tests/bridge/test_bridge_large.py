"""A 64 MiB tensor in and a 64 MiB tensor out through the bridge with DEFAULT settings (grpc's
own 4 MiB default would refuse it), values exact (x * 2 + 0.5 is exact in FP32 for these x)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import bridge_models as bm
import numpy as np
import pytest
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess


@pytest.fixture(scope="module")
def big_bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("big-repo")
    export(bm.affine, bm.affine_params(), bm.AFFINE_64MIB_INPUTS, repo / "affine" / "1",
           goldens=0, quiet=True, name="affine")
    with BridgeProcess(repo) as bridge:
        yield bridge


def test_64_mib_tensor_round_trip(big_bridge: BridgeProcess, tmp_path: Path):
    x = (np.arange(4096 * 4096, dtype=np.float32) % 1024).reshape(4096, 4096)
    assert x.nbytes == 64 * 1024 * 1024
    with big_bridge.channel() as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(codecs.build_infer_request("affine", {"x": x}), timeout=120)
    assert len(response.raw_output_contents[0]) == x.nbytes
    np.testing.assert_array_equal(codecs.decode_infer_response(response)["output"], x * 2 + 0.5)
