"""Artifacts in S3 (`jaxport.artifact.open("s3://bucket/prefix/...")`, issue 28 item 8): read
through TensorStore's s3 kvstore from a real S3-compatible server (moto's server mode,
tests/artifact/moto_s3.py), equal to the local copy, with the same checksums and messages but
for the root; a missing bucket and a request without credentials are one line each naming the
bucket. The artifact is the committed back-compat artifact (tests/backcompat), in the layout
and helpers of the HTTP tests (test_remote.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import jaxport.artifact
import numpy as np
import pytest
import test_remote
from jaxport.artifact.errors import ArtifactError, ChecksumError
from jaxport.artifact.location import (
    S3Location,
    locate,
    s3_credentials,
)
from moto_s3 import AWS_VARS, s3_serving
from test_remote import _first_chunk, _flip_a_byte

repo = test_remote.repo  # the fixture: repo/nested/1/, a copy of the back-compat artifact


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the machine's AWS setup: each test sets what it means."""
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")


def test_open_from_s3_equals_local(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Manifest, parameters and the program's answers to the goldens are those of the local
    copy, which is deleted once uploaded: every file came from the bucket."""
    local = jaxport.artifact.open(repo / "nested" / "1")
    manifest, params_local = local.manifest, local.parameters()
    with s3_serving(repo) as s3:
        shutil.rmtree(repo)
        for var, value in s3.env.items():
            monkeypatch.setenv(var, value)
        remote = jaxport.artifact.open(f"{s3.url}/nested/1")
        assert isinstance(remote.location, S3Location)
        assert remote.path == f"{s3.url}/nested/1"
        assert remote.manifest == manifest
        params = remote.parameters()
        assert params.keys() == params_local.keys()
        for name, value in params_local.items():
            np.testing.assert_array_equal(params[name], value)
        goldens = remote.goldens()
        assert len(goldens) == len(manifest.goldens) > 0
        for golden in goldens:
            outputs = remote.call(golden.inputs)
            for name, want in golden.outputs.items():
                np.testing.assert_allclose(outputs[name], want, rtol=1e-5, atol=1e-6)


def test_tampered_chunk_in_s3_is_refused_with_the_local_reason(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = repo / "nested" / "1"
    chunk = _first_chunk(artifact)
    with s3_serving(repo) as s3:
        for var, value in s3.env.items():
            monkeypatch.setenv(var, value)
        _flip_a_byte(chunk)  # the same tampering on disk and in the bucket
        s3.put(f"repo/{chunk.relative_to(repo).as_posix()}", chunk.read_bytes())
        with pytest.raises(ChecksumError) as by_url:
            jaxport.artifact.open(f"{s3.url}/nested/1")
    with pytest.raises(ChecksumError) as on_disk:
        jaxport.artifact.open(artifact)
    rel = chunk.relative_to(artifact).as_posix()
    assert f"{rel}: sha256 mismatch" in str(by_url.value)
    assert str(by_url.value).replace(f"{s3.url}/nested/1", "") == \
        str(on_disk.value).replace(str(artifact), "")


def test_missing_bucket_is_one_line_naming_it(repo: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    with s3_serving(repo) as s3:
        for var, value in s3.env.items():
            monkeypatch.setenv(var, value)
        with pytest.raises(ArtifactError) as info:
            jaxport.artifact.open("s3://no-such-bucket/repo/nested/1")
    assert str(info.value) == ("s3://no-such-bucket/repo/nested/1/manifest.json: no such "
                               f"bucket 'no-such-bucket' at {s3.endpoint}")


def test_no_credentials_is_one_line_naming_the_bucket(repo: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with s3_serving(repo) as s3:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        with pytest.raises(ArtifactError) as info:
            jaxport.artifact.open(f"{s3.url}/nested/1")
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        f"{s3.url}/nested/1/manifest.json: cannot read: access denied (HTTP 403) to bucket "
        "'models' with no credentials (unsigned: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")


def test_s3_urls_are_checked_and_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("s3://Upper/x", "s3://ab/x", "s3:///x"):
        with pytest.raises(ArtifactError, match="is not an s3://BUCKET/PREFIX URL"):
            locate(bad)
    with pytest.raises(ArtifactError, match=r"takes no \?query"):
        locate("s3://bucket/repo?versionId=1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    loc = locate("s3://bucket/a/b/")
    assert (loc.display(), loc.display("m/1"), loc.child("m").display()) == (
        "s3://bucket/a/b", "s3://bucket/a/b/m/1", "s3://bucket/a/b/m")
    assert loc.kvstore("m/1/weights") == {
        "driver": "s3", "bucket": "bucket", "path": "a/b/m/1/weights/",
        "aws_credentials": {"type": "anonymous"}, "endpoint": "http://127.0.0.1:1",
        "aws_region": "eu-west-1",
        "s3_request_retries": {"max_retries": 3, "initial_delay": "50ms", "max_delay": "1s"}}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")  # S3's own wins
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    spec = locate("s3://bucket").kvstore("m")
    assert (spec["endpoint"], spec["aws_credentials"], spec["path"]) == (
        "http://127.0.0.1:2", {"type": "environment"}, "m/")
    with pytest.raises(ArtifactError, match=r"'\.\.'"):
        locate("s3://bucket/a/../b")


def test_credentials_follow_the_standard_environment(tmp_path: Path) -> None:
    keys = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    nothing = {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
               "AWS_CONFIG_FILE": str(tmp_path / "none")}
    assert s3_credentials({**nothing, **keys}) == "environment"
    assert s3_credentials(nothing) == "anonymous"
    assert s3_credentials({**nothing, "AWS_ACCESS_KEY_ID": "k"}) == "anonymous"  # half a pair
    assert s3_credentials({**nothing, "AWS_PROFILE": "ci"}) == "default"
    (tmp_path / "credentials").write_text("[default]\n")
    assert s3_credentials({**nothing, "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")
                           }) == "default"
    assert s3_credentials({**nothing, **keys, "JAXPORT_S3_CREDENTIALS": "imds"}) == "imds"
