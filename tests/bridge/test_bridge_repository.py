"""Model repository over gRPC: startup with broken artifacts next to good ones, load/unload at
run time, version policy, and refusal of paths that escape the repository."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from bridge_helpers import make_repository, rpc_error
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import EXPLICIT, BridgeProcess

X = np.ones((2, 8), np.float32)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _first_chunk(artifact: Path) -> Path:
    chunks = sorted(p for p in (artifact / "weights").rglob("*")
                    if p.is_file() and p.name != "zarr.json")
    return chunks[0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    root = make_repository(tmp_path_factory.mktemp("mutable-repo"), artifacts,
                           {"mlp": [1, 2], "mixed": [1]})
    # tampered weights: checksum mismatch
    shutil.copytree(artifacts["mlp"], root / "tampered" / "1")
    _flip_a_byte(_first_chunk(root / "tampered" / "1"))
    # a file of the artifact is missing
    shutil.copytree(artifacts["mlp"], root / "missing" / "1")
    (root / "missing" / "1" / "model.mlirbc").unlink()
    # the whole version directory is a symlink to an artifact outside the repository
    (root / "escape").mkdir()
    os.symlink(artifacts["mlp"], root / "escape" / "1")
    # one file is a symlink outside (same bytes, so only the path check can refuse it)
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(artifacts["mlp"] / "model.jaxexport", outside / "model.jaxexport")
    shutil.copytree(artifacts["mlp"], root / "sneaky" / "1")
    (root / "sneaky" / "1" / "model.jaxexport").unlink()
    os.symlink(outside / "model.jaxexport", root / "sneaky" / "1" / "model.jaxexport")
    # a model directory without any version directory
    (root / "empty" / "not-a-version").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[BridgeProcess]:
    with BridgeProcess(repo, *EXPLICIT) as b:  # load/unload at run time
        yield b


@pytest.fixture(scope="module")
def rstub(server: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with server.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def index(stub) -> dict[tuple[str, str], tuple[str, str]]:
    return {(m.name, m.version): (m.state, m.reason)
            for m in stub.RepositoryIndex(pb.RepositoryIndexRequest()).models}


def infer_mlp(stub, model: str = "mlp", version: str = "") -> np.ndarray:
    req = codecs.build_infer_request(model, {"x": X}, version=version)
    return codecs.decode_infer_response(stub.ModelInfer(req, timeout=30))["output"]


def test_startup_refuses_broken_artifacts_and_serves_the_rest(rstub, server):
    idx = index(rstub)
    assert idx[("mlp", "2")] == ("READY", "")
    assert idx[("mlp", "1")] == ("UNAVAILABLE", "not loaded")  # policy: latest
    assert idx[("mixed", "1")] == ("READY", "")
    state, reason = idx[("tampered", "1")]
    assert state == "UNAVAILABLE" and "sha256 mismatch" in reason and "weights/" in reason
    state, reason = idx[("missing", "1")]
    assert state == "UNAVAILABLE" and "model.mlirbc" in reason
    state, reason = idx[("escape", "1")]
    assert state == "UNAVAILABLE" and "outside the repository" in reason
    state, reason = idx[("sneaky", "1")]
    assert state == "UNAVAILABLE" and "model.jaxexport" in reason and "outside" in reason
    state, reason = idx[("empty", "")]
    assert state == "UNAVAILABLE" and "no version directories" in reason
    ready_only = rstub.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models
    assert {(m.name, m.version) for m in ready_only} == {("mlp", "2"), ("mixed", "1")}
    # the reason is in the logs too
    failed = [r for r in server.log_records() if r.get("msg") == "model failed to load"]
    assert {r["model"] for r in failed} == {"tampered", "missing", "escape", "sneaky"}
    not_loaded = [r for r in server.log_records() if r.get("msg") == "model not loaded"]
    assert any(r["model"] == "empty" and "no version directories" in r["reason"]
               for r in not_loaded)
    assert rstub.ServerReady(pb.ServerReadyRequest()).ready


def test_broken_model_is_not_ready_and_requests_get_unavailable(rstub):
    assert not rstub.ModelReady(pb.ModelReadyRequest(name="tampered")).ready
    err = rpc_error(rstub.ModelInfer, codecs.build_infer_request("tampered", {"x": X}))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "'tampered'" in err.details() and "sha256 mismatch" in err.details()
    assert infer_mlp(rstub).shape == (2, 4)


def test_unloaded_version_of_a_served_model(rstub):
    err = rpc_error(rstub.ModelInfer, codecs.build_infer_request("mlp", {"x": X}, version="1"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "version 1 is not loaded" in err.details()
    assert infer_mlp(rstub, version="2").shape == (2, 4)


def test_unload_then_load(rstub):
    before = infer_mlp(rstub)
    rstub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="mlp"))
    assert not rstub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready
    err = rpc_error(rstub.ModelInfer, codecs.build_infer_request("mlp", {"x": X}))
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "'mlp'" in err.details()
    assert index(rstub)[("mlp", "2")] == ("UNAVAILABLE", "unloaded")
    assert rstub.ModelReady(pb.ModelReadyRequest(name="mixed")).ready  # others unaffected
    rstub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="mlp"), timeout=120)
    assert rstub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready
    np.testing.assert_array_equal(infer_mlp(rstub), before)


def test_load_of_a_broken_model_fails_with_its_reason(rstub):
    err = rpc_error(rstub.RepositoryModelLoad,
                    pb.RepositoryModelLoadRequest(model_name="tampered"), timeout=120)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'tampered'" in err.details() and "sha256 mismatch" in err.details()
    assert infer_mlp(rstub).shape == (2, 4)  # others keep serving


def test_repair_on_disk_then_load(rstub, repo, artifacts):
    shutil.rmtree(repo / "tampered" / "1")
    shutil.copytree(artifacts["mlp"], repo / "tampered" / "1")
    rstub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="tampered"), timeout=120)
    assert rstub.ModelReady(pb.ModelReadyRequest(name="tampered")).ready
    np.testing.assert_array_equal(infer_mlp(rstub, "tampered"), infer_mlp(rstub))


def test_new_model_added_at_run_time(rstub, repo, artifacts):
    err = rpc_error(rstub.ModelReady, pb.ModelReadyRequest(name="newcomer"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    shutil.copytree(artifacts["mlp"], repo / "newcomer" / "3")
    rstub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="newcomer"), timeout=120)
    assert infer_mlp(rstub, "newcomer", version="3").shape == (2, 4)
    meta = rstub.ModelMetadata(pb.ModelMetadataRequest(name="newcomer"))
    assert list(meta.versions) == ["3"]


def test_repository_rpc_errors(rstub):
    for name in ("ghost", "../mlp", "", ".hidden"):
        err = rpc_error(rstub.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name=name))
        assert err.code() == grpc.StatusCode.NOT_FOUND, name
        assert repr(name) in err.details() or f"'{name}'" in err.details()
    err = rpc_error(rstub.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="x"))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    # Triton's config override and file: uploads: refused, the message saying why and what to do.
    req = pb.RepositoryModelLoadRequest(model_name="mlp")
    req.parameters["config"].string_param = "{}"
    req.parameters["file:1/model.jaxexport"].bytes_param = b"x"
    err = rpc_error(rstub.RepositoryModelLoad, req)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith(
        "load parameters are not supported (got: config, file:1/model.jaxexport): Triton's "
        "'config' override and 'file:' uploads are refused here")
    assert "put a new version directory in the repository" in err.details()


def test_version_policy_all(tmp_path, artifacts):
    repo = make_repository(tmp_path / "repo", artifacts, {"mlp": [1, 2]})
    with BridgeProcess(repo, "--model-version-policy", "all") as b, b.channel() as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert list(stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp")).versions) == [
            "1", "2"]
        for version in ("1", "2"):
            assert stub.ModelReady(pb.ModelReadyRequest(name="mlp", version=version)).ready
            np.testing.assert_array_equal(infer_mlp(stub, version=version), infer_mlp(stub))
