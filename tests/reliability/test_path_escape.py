"""The bridge serves only what lies inside its repository: a model directory or version
directory that is a symlink leading outside, or a requested name with `..`, is refused with a
status that names it; a valid artifact reached that way is never loaded."""

from __future__ import annotations

import grpc
import pytest
from broken import ESCAPING
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from live import fuzzy_request, stub, wait_ready

REFUSED = {"INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "PERMISSION_DENIED"}


@pytest.fixture(scope="module")
def s(bridge):
    channel = bridge.channel()
    st = stub(channel)
    wait_ready(st)
    yield st
    channel.close()


def _refused(call, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=60, **kw)
    assert info.value.code().name in REFUSED, info.value
    return info.value


@pytest.mark.parametrize("name", ESCAPING)
def test_symlink_out_of_the_repository_is_not_served(s, name) -> None:
    assert not s.ModelReady(pb.ModelReadyRequest(name=name), timeout=10).ready
    err = _refused(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name=name))
    print(f"\npath escape: load {name!r} -> {err.code().name}: {err.details()}")
    assert name in err.details()
    req = fuzzy_request()
    req.model_name = name
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(req, timeout=10)
    assert info.value.code().name in {"UNAVAILABLE", "NOT_FOUND"}


@pytest.mark.parametrize(
    "name", ["../outside", "..", "fuzzy/../../outside", "/etc", "fuzzy/1", ".", "", "a\x00b"]
)
def test_dotdot_and_path_like_names_are_refused(s, bridge, name) -> None:
    err = _refused(s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name=name))
    print(f"\npath escape: load {name!r} -> {err.code().name}: {err.details()}")
    assert repr(name) in err.details() or name in err.details(), err.details()
    req = fuzzy_request()
    req.model_name = name
    with pytest.raises(grpc.RpcError) as info:
        s.ModelInfer(req, timeout=10)
    assert info.value.code().name in REFUSED
    assert bridge.alive()
    # `outside` never became a served model under any name.
    index = s.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=10)
    assert all("outside" not in m.name for m in index.models)
