"""ModelStreamInfer: responses in order, ids echoed, a failed request answered in
`error_message` (with its status name and the offending field) while the stream continues."""

from __future__ import annotations

import numpy as np
from bridge_helpers import golden_cases
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb


def test_stream_with_an_error_in_the_middle(stub, artifacts):
    _, inputs, expected = golden_cases(artifacts["mlp"])[0]
    requests = [
        codecs.build_infer_request("mlp", inputs, request_id="first"),
        codecs.build_infer_request("mlp", {"x": np.ones((5, 8), np.float32)}, request_id="bad"),
        codecs.build_infer_request("ghost", inputs, request_id="unknown"),
        codecs.build_infer_request("mlp", inputs, request_id="last"),
    ]
    responses = list(stub.ModelStreamInfer(iter(requests), timeout=30))
    assert [r.infer_response.id for r in responses] == ["first", "bad", "unknown", "last"]
    first, bad, unknown, last = responses
    for ok in (first, last):
        assert ok.error_message == ""
        got = codecs.decode_infer_response(ok.infer_response)["output"]
        np.testing.assert_allclose(got, expected["output"], rtol=1e-6, atol=1e-6)
    assert bad.error_message.startswith("INVALID_ARGUMENT: ")
    assert "input 'x'" in bad.error_message and "[2, 8]" in bad.error_message
    assert not bad.infer_response.outputs
    assert unknown.error_message.startswith("NOT_FOUND: ") and "'ghost'" in unknown.error_message


def test_stream_of_many_requests_across_models(stub, artifacts):
    cases = [(m, c) for m in ("mlp", "mixed") for c in golden_cases(artifacts[m])]
    requests = [codecs.build_infer_request(m, ins, request_id=f"{m}/{name}")
                for m, (name, ins, _) in cases] * 5
    responses = list(stub.ModelStreamInfer(iter(requests), timeout=60))
    assert len(responses) == len(requests)
    for req, resp in zip(requests, responses, strict=True):
        assert resp.error_message == ""
        assert resp.infer_response.id == req.id
        assert resp.infer_response.model_name == req.model_name
    by_id = {f"{m}/{name}": out for m, (name, _, out) in cases}
    for resp in responses:
        got = codecs.decode_infer_response(resp.infer_response)
        for name, want in by_id[resp.infer_response.id].items():
            assert got[name].dtype == want.dtype and got[name].shape == want.shape


def test_empty_stream(stub):
    assert list(stub.ModelStreamInfer(iter([]), timeout=10)) == []
    assert stub.ServerLive(pb.ServerLiveRequest()).live
