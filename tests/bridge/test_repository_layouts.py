"""Where a repository is and how it is laid out (`jaxport.bridge.repository`), through the
Repository API with the bridge's real loader (`load_model`: checksums, deserialize, compile,
warm up) and the models answering their goldens (in this process: float32/int32 models only,
`mlp` and `ignores`, since the bridge's x64 setting is process-wide):

* a repository by URL: a real loopback HTTP server (read-only, tests/artifact/loopback_http.py)
  serving `<model>/<version>/` and the `index.json` that lists them; a `file://` URL;
* a single-model root (KServe's `/mnt/models`, `single_model=NAME`): a version directory or a
  model directory, local and by URL;
* what cannot be served, in one line (`check_root`), and tampered weights behind a URL refused
  with the same reason as the same tampering on disk.
"""

from __future__ import annotations

import functools
import shutil
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
from bridge_helpers import golden_cases, make_repository
from jaxport.artifact import index as index_mod
from jaxport.bridge.loading import LoadError, load_model
from jaxport.bridge.model import Model
from jaxport.bridge.repository import READY, UNAVAILABLE, Repository, check_root
from jaxport.protocol.errors import NotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from loopback_http import serving


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _first_chunk(artifact: Path) -> Path:
    return sorted(p for p in (artifact / "weights").rglob("*")
                  if p.is_file() and p.name != "zarr.json")[0]


def _repository(root: str | Path, engine: str = "exported", **kwargs: object) -> Repository:
    return Repository(root, functools.partial(load_model, engine=engine), **kwargs)


def _infer(model: Model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One request through the model's one validation (`Model.prepare`) and execution."""
    declared = [(name, model.inputs[i].datatype, value.shape)
                for i, (name, value) in enumerate(inputs.items())]
    outputs, _ = model.execute(model.prepare(declared, lambda: inputs))
    return outputs


def _assert_goldens(repo: Repository, name: str, artifact: Path, version: str = "") -> int:
    model = repo.get(name, version)
    cases = golden_cases(artifact)
    for case, inputs, want in cases:
        got = _infer(model, inputs)
        for output, value in want.items():
            np.testing.assert_allclose(got[output], value, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{name} {case} {output}")
    return len(cases)


# -- repositories by URL -------------------------------------------------------------------------

def test_repository_over_http_loads_verifies_and_answers_goldens(
        tmp_path: Path, artifacts: dict[str, Path]) -> None:
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1, 2], "ignores": [1]})
    index_mod.write(root)
    with serving(root) as http:
        repo = _repository(http.url)
        statuses = repo.load_all()
        assert {(s.name, s.version, s.state) for s in statuses} == {
            ("mlp", 1, UNAVAILABLE), ("mlp", 2, READY), ("ignores", 1, READY)}
        assert _assert_goldens(repo, "mlp", artifacts["mlp"]) == 2
        assert _assert_goldens(repo, "ignores", artifacts["ignores"]) == 1
        requested = list(http.requests)
    # Everything was read over HTTP: the index, each manifest, program and weight chunk.
    assert "/index.json" in requested
    for rel in ("mlp/2/manifest.json", "mlp/2/model.jaxexport",
                _first_chunk(root / "mlp" / "2").relative_to(root).as_posix()):
        assert f"/{rel}" in requested, rel
    assert not [r for r in requested if r.startswith("/mlp/1/")]  # policy: latest only


def test_pjrt_engine_over_http(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """--engine pjrt compiles model.mlirbc read over HTTP (the artifact's read_file)."""
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    index_mod.write(root)
    with serving(root) as http:
        repo = _repository(http.url, engine="pjrt")
        assert [s.state for s in repo.load_all()] == [READY]
        assert _assert_goldens(repo, "mlp", artifacts["mlp"]) == 2
        assert "/mlp/1/model.mlirbc" in http.requests


def test_tampered_chunk_behind_a_url_is_refused_with_the_local_reason(
        tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """The same tampering on disk and behind the URL: the same LoadError message
    (FAILED_PRECONDITION), the same RepositoryIndex reason, naming the file relative to the
    repository; the good model next to it serves."""
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    shutil.copytree(artifacts["mlp"], root / "tampered" / "1")
    chunk = _first_chunk(root / "tampered" / "1")
    _flip_a_byte(chunk)
    index_mod.write(root)
    local = _repository(root)
    with pytest.raises(LoadError) as on_disk:
        local.load("tampered")
    with serving(root) as http:
        remote = _repository(http.url)
        remote.load_all()
        with pytest.raises(LoadError) as by_url:
            remote.load("tampered")
        assert _assert_goldens(remote, "mlp", artifacts["mlp"]) == 2
        reason = {(s.name, s.version): s.reason for s in remote.index()}[("tampered", 1)]
    assert by_url.value.code == on_disk.value.code
    assert by_url.value.code.name == grpc.StatusCode.FAILED_PRECONDITION.name
    assert by_url.value.message == on_disk.value.message
    rel = chunk.relative_to(root).as_posix()
    assert by_url.value.message.startswith(
        f"model 'tampered' failed to load: version 1: checksum verification failed: {rel}: "
        "sha256 mismatch: expected ")
    assert reason == by_url.value.message.removeprefix("model 'tampered' failed to load: "
                                                       "version 1: ")
    assert str(tmp_path) not in reason and "127.0.0.1" not in reason


def test_url_repository_is_listed_by_its_index(tmp_path: Path, artifacts: dict[str, Path]
                                               ) -> None:
    """What index.json lists is the repository: a model directory it does not list is not
    served (NOT_FOUND); rewriting the index and loading adds it at run time."""
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    index_mod.write(root)
    make_repository(root, artifacts, {"ignores": [1]})
    with serving(root) as http:
        repo = _repository(http.url)
        assert [(s.name, s.state) for s in repo.load_all()] == [("mlp", READY)]
        with pytest.raises(NotFoundError) as info:
            repo.load("ignores")
        assert info.value.message.startswith(
            "unknown model 'ignores': no directory ignores/ in the repository")
        index_mod.write(root)
        assert [s.state for s in repo.load("ignores")] == [READY]
        assert _assert_goldens(repo, "ignores", artifacts["ignores"]) == 1


def test_file_url_repository(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    repo = _repository(root.as_uri())
    assert repo.root == root
    assert [s.state for s in repo.load_all()] == [READY]
    assert _assert_goldens(repo, "mlp", artifacts["mlp"]) == 2


# -- single-model roots (KServe /mnt/models) -----------------------------------------------------

def test_single_model_version_root(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """/mnt/models is one artifact (manifest.json at the root): served as NAME, version 1."""
    mnt = tmp_path / "mnt" / "models"
    shutil.copytree(artifacts["mlp"], mnt)
    assert check_root(mnt, "classifier") is None
    repo = _repository(mnt, single_model="classifier")
    assert [(s.name, s.version, s.state) for s in repo.load_all()] == [("classifier", 1, READY)]
    assert repo.get("classifier").name == "classifier"
    assert _assert_goldens(repo, "classifier", artifacts["mlp"], version="1") == 2
    with pytest.raises(NotFoundError) as info:
        repo.get("mlp")
    assert info.value.message.startswith("unknown model 'mlp'")


def test_single_model_model_root(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """/mnt/models holds version directories: the policy picks among them."""
    mnt = make_repository(tmp_path / "repo", artifacts, {"mlp": [1, 2]}) / "mlp"
    repo = _repository(mnt, single_model="classifier")
    assert [(s.version, s.state) for s in repo.index()] == [(1, UNAVAILABLE), (2, UNAVAILABLE)]
    assert [(s.version, s.state) for s in repo.load_all()] == [(1, UNAVAILABLE), (2, READY)]
    assert repo.index()[0].reason == "not loaded"
    assert _assert_goldens(repo, "classifier", artifacts["mlp"], version="2") == 2
    every = _repository(mnt, single_model="classifier", version_policy="all")
    assert [(s.version, s.state) for s in every.load_all()] == [(1, READY), (2, READY)]


def test_single_model_by_url(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """A version directory by URL (its manifest.json) and a model directory by URL (its
    index.json lists the versions)."""
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1, 3]})
    index_mod.write(root / "mlp")
    with serving(root) as http:
        version = _repository(f"{http.url}/mlp/1", single_model="m")
        assert [(s.version, s.state) for s in version.load_all()] == [(1, READY)]
        model = _repository(f"{http.url}/mlp", single_model="m")
        assert check_root(f"{http.url}/mlp", "m") is None
        assert [(s.version, s.state) for s in model.load_all()] == [(1, UNAVAILABLE),
                                                                      (3, READY)]
        assert _assert_goldens(model, "m", artifacts["mlp"]) == 2
        assert "/mlp/3/model.jaxexport" in http.requests


def test_tampered_single_model_root_names_the_file(tmp_path: Path, artifacts: dict[str, Path]
                                                   ) -> None:
    mnt = tmp_path / "models"
    shutil.copytree(artifacts["mlp"], mnt)
    chunk = _first_chunk(mnt)
    _flip_a_byte(chunk)
    repo = _repository(mnt, single_model="m")
    (status,) = repo.load_all()
    assert status.state == UNAVAILABLE
    assert status.reason.startswith(
        f"checksum verification failed: {chunk.relative_to(mnt).as_posix()}: sha256 mismatch")


# -- what cannot be served: one line each -------------------------------------------------------

def test_check_root_says_what_is_wrong(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    repo_dir = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    assert check_root(repo_dir) is None
    assert check_root(repo_dir.as_uri()) is None
    assert check_root(tmp_path / "nowhere") == f"--repository {tmp_path / 'nowhere'} is not a " \
                                               "directory"
    # A <model>/<version>/ repository is not one model.
    assert check_root(repo_dir, "m") == (
        f"--repository {repo_dir} is neither an artifact (no manifest.json) nor a model "
        "directory (no version directories 1/, 2/ ...) to serve as model 'm'")
    message = check_root(repo_dir / "mlp", "../x")
    assert message is not None and message.startswith(f"--repository {repo_dir / 'mlp'}: ")
    assert "not a valid model name" in message
    message = check_root("gs://bucket/repo")
    assert message == ("--repository gs://bucket/repo: 'gs://bucket/repo': gs:// is not "
                       "supported (supported: a local path, file://, http://, https://, s3://); "
                       "copy the artifacts to a local directory, serve them over HTTP or put "
                       "them in S3")
    with serving(repo_dir) as http:
        assert check_root(http.url) == (
            f"--repository {http.url}: no index.json (a repository by URL is listed by it: "
            "run python -m jaxport.artifact.index on the repository directory and publish it "
            "again)")
        index_mod.write(repo_dir / "mlp")
        assert check_root(f"{http.url}/mlp") == (
            f"--repository {http.url}/mlp: its index.json lists versions, so it is one model: "
            "serve it with --model-name NAME")
        assert check_root(f"{http.url}/mlp", "m") is None
        assert check_root(f"{http.url}/nothing", "m") == (
            f"--repository {http.url}/nothing is neither an artifact (no manifest.json) nor a "
            "model directory (no version directories 1/, 2/ ... listed in its index.json) to "
            "serve as model 'm'")


def test_check_root_is_light(tmp_path: Path) -> None:
    """The CLI can call check_root before anything heavy: no jax or grpc imported."""
    import subprocess

    code = ("import sys\n"
            "from jaxport.bridge.repository import check_root\n"
            f"print(check_root({str(tmp_path)!r}, 'm'))\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'grpc')))\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    message, heavy = done.stdout.splitlines()
    assert message.startswith(f"--repository {tmp_path} is neither an artifact")
    assert heavy == "[]"


# -- a real bridge serving a repository by URL ---------------------------------------------------

def test_bridge_serves_a_repository_over_http(tmp_path: Path, artifacts: dict[str, Path]
                                              ) -> None:
    """`jaxport serve --repository http://...` on a repository behind a loopback HTTP server:
    the goldens of two models (BF16/INT64/BOOL included) through a real client; the tampered
    chunk behind the URL is refused at load with the reason the same tampering on disk gets."""
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess
    from test_bridge_infer import assert_close  # the bridge tests' dtype tolerances

    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1], "mixed": [1]})
    shutil.copytree(artifacts["mlp"], root / "tampered" / "1")
    _flip_a_byte(_first_chunk(root / "tampered" / "1"))
    index_mod.write(root)
    (status,) = [s for s in _repository(root).load_all() if s.name == "tampered"]
    with serving(root) as http, BridgeProcess(http.url) as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        for name in ("mlp", "mixed"):
            cases = golden_cases(artifacts[name])
            for case, inputs, want in cases:
                got = client.infer(name, inputs)
                for output, value in want.items():
                    assert_close(np.asarray(got[output]), value, f"{name} {case} {output}")
        index = {(m.name, m.version): (m.state, m.reason) for m in client.repository_index()}
        assert index[("mlp", "1")] == ("READY", "") and index[("mixed", "1")] == ("READY", "")
        assert index[("tampered", "1")] == ("UNAVAILABLE", status.reason)
        assert status.reason.startswith("checksum verification failed: tampered/1/weights/")
        assert "/mixed/1/manifest.json" in http.requests
        log = bridge.log_text()
    assert str(root) not in log  # nothing was read from the directory itself


def test_serve_model_name_serves_one_artifact_as_that_model(
        tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """`jaxport serve --repository VERSION_DIR --model-name solo` (KServe's /mnt/models holding
    one artifact): the index lists only `solo`, which answers mlp's goldens;
    another name is NOT_FOUND naming the one known model."""
    from jaxport.client import InferenceClient, InferenceServerError
    from support.bridge import BridgeProcess

    root = tmp_path / "mnt" / "models"
    shutil.copytree(artifacts["mlp"], root)
    with BridgeProcess(root, "--model-name", "solo") as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        assert [(m.name, m.version) for m in client.repository_index()] == [("solo", "1")]
        for _case, inputs, want in golden_cases(artifacts["mlp"]):
            got = client.infer("solo", inputs)
            for output, value in want.items():
                np.testing.assert_allclose(np.asarray(got[output]), value, rtol=1e-5, atol=1e-6)
        with pytest.raises(InferenceServerError) as info:
            client.infer("mlp", inputs)
        assert info.value.code == "NOT_FOUND"
        assert info.value.message.startswith("unknown model 'mlp'")
        assert info.value.message.endswith("(known models: solo)")


def test_serve_model_name_refuses_a_root_that_is_no_model(tmp_path: Path) -> None:
    """An empty /mnt/models with --model-name: one line naming the root and what it lacks."""
    import subprocess

    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "jaxport.cli", "serve", "--repository", str(empty),
         "--model-name", "solo"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"jaxport serve: error: --repository {empty} is neither an artifact")
    assert "model 'solo'" in line


def test_an_aged_artifact_loads_and_the_bridge_logs_why(
        tmp_path: Path, artifacts: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    """An artifact exported before jax's compatibility window (its manifest's exportedAt a
    year back) still loads (jax decides whether it can read it) and answers its goldens; the
    bridge's log says so as a WARNING naming the model, version and the warning's text (the
    operator reads the log, not Python's bare warnings on stderr)."""
    import logging

    from jaxport.artifact import manifest as manifest_mod

    art = tmp_path / "old" / "1"
    shutil.copytree(artifacts["mlp"], art)
    m = manifest_mod.load(art)
    m.exported_at = "2025-11-30T00:00:00Z"  # a year before this test was written: > 183 days
    manifest_mod.write(m, art)
    with caplog.at_level(logging.WARNING, logger="jaxport.bridge.loading"):
        model = load_model("old", 1, art)
    (record,) = [r for r in caplog.records if r.getMessage() == "artifact compatibility"]
    assert record.levelno == logging.WARNING
    fields = record.fields
    assert (fields["model"], fields["version"]) == ("old", 1)
    assert "2025-11-30" in fields["warning"] and "compatib" in fields["warning"]
    case, inputs, want = golden_cases(artifacts["mlp"])[0]
    got = _infer(model, inputs)
    for output, value in want.items():
        np.testing.assert_allclose(got[output], value, rtol=1e-5, atol=1e-6, err_msg=case)
