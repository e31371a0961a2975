"""NOT_FOUND for a model the repository does not have names the models it does have (issue 13
item 7), on every RPC that takes a model name, through a real `jaxport serve` (explicit model
control, so load and unload answer too). The cut at ten known models and the empty repository's
text are the front's repository rules, unit-tested in bridge/front/repository
(TestNotFoundNamesAtMostTenKnownModels)."""

from __future__ import annotations

import grpc
import pytest
from bridge_helpers import rpc_error
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

#: The shared repository of tests/bridge/conftest.py, sorted.
KNOWN = "known models: ignores, mixed, mlp, mlp2p, slow"


@pytest.mark.parametrize(("rpc", "request_", "message"), [
    ("ModelInfer", codecs.build_infer_request("nope", {}), f"unknown model 'nope' ({KNOWN})"),
    ("ModelMetadata", pb.ModelMetadataRequest(name="nope"), f"unknown model 'nope' ({KNOWN})"),
    ("ModelReady", pb.ModelReadyRequest(name="nope"), f"unknown model 'nope' ({KNOWN})"),
    ("ModelConfig", pb.ModelConfigRequest(name="nope"), f"unknown model 'nope' ({KNOWN})"),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="nope"),
     f"unknown model 'nope': no directory nope/ in the repository ({KNOWN})"),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope"),
     f"unknown model 'nope': nothing to unload ({KNOWN})"),
])
def test_unknown_model_names_the_known_ones(stub, rpc: str, request_: object, message: str
                                            ) -> None:
    err = rpc_error(getattr(stub, rpc), request_, timeout=30)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == message
