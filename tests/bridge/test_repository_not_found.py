"""NOT_FOUND for a model the repository does not have names the models it does have (at most
`MAX_KNOWN_NAMED`, issue 13 item 7): on every RPC that takes a model name, through a real
bridge, and the cut at ten through the Repository API."""

from __future__ import annotations

import functools
from pathlib import Path

import grpc
import pytest
from bridge_helpers import rpc_error
from jaxport.bridge.loading import load_model
from jaxport.bridge.repository import MAX_KNOWN_NAMED, Repository
from jaxport.protocol import codecs
from jaxport.protocol.errors import NotFoundError
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


def test_at_most_ten_known_models_are_named(tmp_path: Path) -> None:
    """Twelve models (each a version that fails to load, so nothing compiles): ten named,
    the rest counted; a hostile name is cut as before."""
    names = [f"model{i:02d}" for i in range(12)]
    for name in names:
        (tmp_path / name / "1").mkdir(parents=True)
    repo = Repository(tmp_path, functools.partial(load_model, engine="exported"))
    repo.load_all()
    with pytest.raises(NotFoundError) as info:
        repo.get("nope")
    shown = ", ".join(names[:MAX_KNOWN_NAMED])
    assert info.value.message == f"unknown model 'nope' (known models: {shown} and 2 more)"
    with pytest.raises(NotFoundError) as info:
        repo.get("x" * 10_000)
    assert info.value.message.startswith("unknown model 'xxx")
    assert len(info.value.message) < 400


def test_an_empty_repository_says_so(tmp_path: Path) -> None:
    repo = Repository(tmp_path, functools.partial(load_model, engine="exported"))
    repo.load_all()
    with pytest.raises(NotFoundError) as info:
        repo.get("nope")
    assert info.value.message == "unknown model 'nope' (no models in the repository)"
