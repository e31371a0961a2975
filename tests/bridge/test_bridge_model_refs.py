"""Model names and versions from callers (issue 18), live: every malformed reference is
NOT_FOUND naming the field and the rule, on every RPC that takes one and inside streams,
before the file system (ENAMETOOLONG) or a number parser see it. The rule itself (which names
and versions pass, '١' and '01' not being version 1) is the front's one validation,
unit-tested in bridge/front/repository (TestNamesAndVersionsFollowTheRule)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from bridge_helpers import rpc_error
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

X = np.ones((2, 8), np.float32)

BAD_NAMES = ["m" * 256, "m" * 100_000, "../mlp", "mlp/1", ".hidden", "a\x00b", "ml p", "\u00e9"]
BAD_VERSIONS = ["9" * 4301, "9" * 20, "\u00b2", "\u0661", "01", "0", "-1", "+1", " 1", "1.0"]


def _calls(name: str, version: str) -> dict:
    """Every RPC that names a model, as (method, request) by label."""
    infer = codecs.build_infer_request("mlp", {"x": X})
    infer.model_name, infer.model_version = name, version
    return {
        "ModelInfer": ("ModelInfer", infer),
        "ModelMetadata": ("ModelMetadata", pb.ModelMetadataRequest(name=name, version=version)),
        "ModelConfig": ("ModelConfig", pb.ModelConfigRequest(name=name, version=version)),
        "ModelReady": ("ModelReady", pb.ModelReadyRequest(name=name, version=version)),
        "ModelStatistics": ("ModelStatistics",
                            pb.ModelStatisticsRequest(name=name, version=version)),
        "RepositoryModelLoad": ("RepositoryModelLoad",
                                pb.RepositoryModelLoadRequest(model_name=name)),
        "RepositoryModelUnload": ("RepositoryModelUnload",
                                  pb.RepositoryModelUnloadRequest(model_name=name)),
    }


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: repr(n[:12]))
def test_a_malformed_model_name_is_not_found_on_every_rpc(stub, name):
    for label, (method, req) in _calls(name, "").items():
        err = rpc_error(getattr(stub, method), req, timeout=30)
        assert err.code() == grpc.StatusCode.NOT_FOUND, (label, err.code(), err.details())
        assert "not a valid model name" in err.details(), (label, err.details())
        assert len(err.details()) < 400


VERSIONED = ("ModelInfer", "ModelMetadata", "ModelConfig", "ModelReady", "ModelStatistics")


@pytest.mark.parametrize("version", BAD_VERSIONS, ids=lambda v: repr(v[:8]))
def test_a_malformed_version_is_not_found_on_every_rpc(stub, version):
    calls = _calls("mlp", version)
    for label in VERSIONED:
        method, req = calls[label]
        err = rpc_error(getattr(stub, method), req, timeout=30)
        assert err.code() == grpc.StatusCode.NOT_FOUND, (label, err.code(), err.details())
        assert "not a valid model version" in err.details(), (label, err.details())
        assert "'mlp'" in err.details() and len(err.details()) < 400


def test_malformed_references_inside_a_stream_are_answered_and_the_stream_goes_on(stub):
    reqs = []
    for i, (name, version) in enumerate([*((n, "") for n in BAD_NAMES),
                                         *(("mlp", v) for v in BAD_VERSIONS), ("mlp", "1")]):
        req = codecs.build_infer_request("mlp", {"x": X})
        req.model_name, req.model_version, req.id = name, version, f"r{i}"
        reqs.append(req)
    responses = list(stub.ModelStreamInfer(iter(reqs), timeout=60))
    assert [r.infer_response.id for r in responses] == [r.id for r in reqs]
    for r in responses[:len(BAD_NAMES)]:
        assert r.error_message.startswith("NOT_FOUND: ") and "model name" in r.error_message
    for r in responses[len(BAD_NAMES):-1]:
        assert r.error_message.startswith("NOT_FOUND: ") and "model version" in r.error_message
    assert not responses[-1].error_message
