"""Why a version was refused, as callers see it: which file of which model version, with paths
relative to the repository (`tampered/1/weights/...`), never the server's file system layout.
The server's log keeps the full path for the operator."""

from __future__ import annotations

import hashlib
import json
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


def _first_chunk(artifact: Path) -> Path:
    return sorted(p for p in (artifact / "weights").rglob("*")
                  if p.is_file() and p.name != "zarr.json")[0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path]) -> Path:
    root = make_repository(tmp_path_factory.mktemp("reasons-repo"), artifacts, {"mlp": [1]})
    for name in ("tampered", "truncated", "missing", "nomanifest", "badjson"):
        shutil.copytree(artifacts["mlp"], root / name / "1")
    chunk = _first_chunk(root / "tampered" / "1")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    chunk = _first_chunk(root / "truncated" / "1")
    chunk.write_bytes(chunk.read_bytes()[:3])
    (root / "missing" / "1" / "model.mlirbc").unlink()
    (root / "nomanifest" / "1" / "manifest.json").unlink()
    (root / "badjson" / "1" / "manifest.json").write_text("{not json", encoding="utf-8")
    # the version directory is a symlink to an artifact outside the repository
    (root / "escape").mkdir()
    os.symlink(artifacts["mlp"], root / "escape" / "1")
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[BridgeProcess]:
    with BridgeProcess(repo, *EXPLICIT) as b:  # the test loads models again
        yield b


@pytest.fixture(scope="module")
def rstub(server: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with server.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def _reasons(stub: pb_grpc.GRPCInferenceServiceStub) -> dict[str, str]:
    return {m.name: m.reason for m in stub.RepositoryIndex(pb.RepositoryIndexRequest()).models
            if m.version == "1"}


def _server_paths(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Absolute paths that must never reach a caller: the repository (as given and resolved)
    and the base directory every test artifact lives under (the symlink target included)."""
    base = tmp_path_factory.getbasetemp()
    return sorted({str(repo.absolute()), str(repo.resolve()), str(base), str(base.resolve())})


def test_index_reasons_name_files_relative_to_the_repository(rstub, repo):
    reasons = _reasons(rstub)
    assert reasons["mlp"] == ""
    tampered = _first_chunk(repo / "tampered" / "1").relative_to(repo).as_posix()
    assert tampered.startswith("tampered/1/weights/params.")
    # A leading space: the relative path is the whole path, not the tail of an absolute one.
    assert f" {tampered}: sha256 mismatch" in reasons["tampered"]
    truncated = _first_chunk(repo / "truncated" / "1").relative_to(repo).as_posix()
    assert f" {truncated}: size 3 bytes" in reasons["truncated"]
    assert " missing/1/model.mlirbc: file listed in the manifest is missing" in reasons["missing"]
    assert " nomanifest/1/manifest.json: no manifest.json" in reasons["nomanifest"]
    assert " badjson/1/manifest.json is not valid JSON" in reasons["badjson"]
    assert reasons["escape"] == "'escape/1' resolves outside the repository; refused"


def test_no_absolute_server_path_on_the_wire(rstub, repo, tmp_path_factory):
    forbidden = _server_paths(repo, tmp_path_factory)
    wire: list[str] = list(_reasons(rstub).values())
    for name in ("tampered", "truncated", "missing", "nomanifest", "badjson", "escape"):
        err = rpc_error(rstub.ModelInfer, codecs.build_infer_request(name, {"x": X}, version="1"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, name
        assert f"'{name}'" in err.details() and f"{name}/1" in err.details(), err.details()
        wire.append(err.details())
        err = rpc_error(rstub.RepositoryModelLoad,
                        pb.RepositoryModelLoadRequest(model_name=name), timeout=120)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, name
        assert f"{name}/1" in err.details(), err.details()
        wire.append(err.details())
    for text in wire:
        for path in forbidden:
            assert path not in text, f"{path!r} leaked in {text!r}"
    # the healthy model keeps serving through all of it
    out = codecs.decode_infer_response(
        rstub.ModelInfer(codecs.build_infer_request("mlp", {"x": X}), timeout=30))
    assert out["output"].shape == (2, 4)


def test_the_log_keeps_the_full_paths(server, rstub, repo, artifacts):
    _reasons(rstub)  # the startup loads are done once the bridge is ready
    failed = {r["model"]: r for r in server.log_records() if r.get("msg") == "model failed to load"}
    assert set(failed) >= {"tampered", "truncated", "missing", "nomanifest", "badjson", "escape"}
    assert str(_first_chunk(repo / "tampered" / "1")) in str(failed["tampered"]["reason"])
    assert str(repo / "missing" / "1" / "model.mlirbc") in str(failed["missing"]["reason"])
    assert str(failed["escape"]["path"]) == str(repo / "escape" / "1")
    escapes = [r for r in server.log_records() if r.get("msg") == "path outside the repository"]
    assert any(str(artifacts["mlp"].resolve()) in str(r.get("target")) for r in escapes)


def _checksum_reasons(repo: Path) -> dict[str, str]:
    """The reason of each version whose file does not match its manifest, as docs/bridge.md and
    docs/security.md give it: `checksum verification failed: <repository-relative file>: ...`."""
    def entry(model: str, rel: str) -> dict:
        files = json.loads((repo / model / "1" / "manifest.json").read_text())["files"]
        return next(f for f in files if f["path"] == rel)

    tampered = _first_chunk(repo / "tampered" / "1")
    t_rel = tampered.relative_to(repo / "tampered" / "1").as_posix()
    truncated = _first_chunk(repo / "truncated" / "1")
    u_rel = truncated.relative_to(repo / "truncated" / "1").as_posix()
    prefix = "checksum verification failed: "
    return {
        "tampered": f"{prefix}tampered/1/{t_rel}: sha256 mismatch: "
                    f"expected {entry('tampered', t_rel)['sha256']}, "
                    f"actual {hashlib.sha256(tampered.read_bytes()).hexdigest()}",
        "truncated": f"{prefix}truncated/1/{u_rel}: size 3 bytes, manifest says "
                     f"{entry('truncated', u_rel)['sizeBytes']} (truncated or replaced?)",
        "missing": f"{prefix}missing/1/model.mlirbc: file listed in the manifest is missing",
    }


@pytest.fixture(scope="module")
def exported_server(repo: Path) -> Iterator[BridgeProcess]:
    """The same repository's broken versions with every model on the Python workers."""
    loads = [flag for name in ("tampered", "truncated", "missing")
             for flag in ("--load-model", name)]
    with BridgeProcess(repo, "--model-control-mode", "explicit", *loads,
                       "--engine", "exported") as b:
        yield b


@pytest.mark.parametrize("engine", ["native", "exported"])
def test_a_file_that_is_not_its_manifests_is_one_text_whatever_the_engine(engine, request, repo):
    bridge = request.getfixturevalue("server" if engine == "native" else "exported_server")
    want = _checksum_reasons(repo)
    with bridge.channel() as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        reasons = _reasons(stub)
        for name, reason in want.items():
            assert reasons[name] == reason, (engine, name)
            err = rpc_error(stub.ModelInfer,
                            codecs.build_infer_request(name, {"x": X}, version="1"))
            assert err.code() == grpc.StatusCode.UNAVAILABLE, (engine, name)
            assert err.details() == f"model '{name}' version 1 is UNAVAILABLE: {reason}", engine
            err = rpc_error(stub.RepositoryModelLoad,
                            pb.RepositoryModelLoadRequest(model_name=name), timeout=120)
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, (engine, name)
            assert err.details() == f"model '{name}' failed to load: version 1: {reason}", engine
