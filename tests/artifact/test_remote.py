"""Artifacts read by URL (`jaxport.artifact.open("http://...")`, `file://`): served by a real
loopback HTTP server (tests/artifact/loopback_http.py), read through TensorStore's http kvstore,
checked exactly as a local artifact (same path rule, same checksums, same messages but for
the root), and the repository index (`index.json`) that lists what a URL repository holds.

The artifact is the committed back-compat artifact (tests/backcompat), copied per test so a
test may tamper with its copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jaxport.artifact
import numpy as np
import pytest
from jaxport.artifact import index as index_mod
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact.errors import ArtifactError, ChecksumError
from jaxport.artifact.location import HttpLocation, LocalLocation, locate
from loopback_http import serving

BACKCOMPAT = sorted(p for p in (Path(__file__).resolve().parents[1] / "backcompat").iterdir()
                    if (p / "manifest.json").is_file())[0]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """`repo/nested/1/`: a copy of the back-compat artifact in a repository layout."""
    shutil.copytree(BACKCOMPAT, tmp_path / "repo" / "nested" / "1")
    return tmp_path / "repo"


def _first_chunk(artifact: Path) -> Path:
    return sorted(p for p in (artifact / "weights").rglob("*")
                  if p.is_file() and p.name != "zarr.json")[0]


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_open_over_http_equals_local(repo: Path) -> None:
    """Manifest, parameters, goldens and the program's answers are those of the local copy,
    and every file (weight chunks included) was read over HTTP."""
    local = jaxport.artifact.open(repo / "nested" / "1")
    with serving(repo) as http:
        remote = jaxport.artifact.open(f"{http.url}/nested/1")
        assert isinstance(remote.location, HttpLocation)
        assert remote.path == f"{http.url}/nested/1"
        assert remote.manifest == local.manifest
        params = remote.parameters()
        assert params.keys() == local.parameters().keys()
        for name, value in local.parameters().items():
            np.testing.assert_array_equal(params[name], value)
        goldens = remote.goldens()
        assert [g.name for g in goldens] == [g.name for g in local.goldens()]
        for golden in goldens:
            outputs = remote.call(golden.inputs)
            for name, want in golden.outputs.items():
                np.testing.assert_allclose(outputs[name], want, rtol=1e-5, atol=1e-6)
        requested = set(http.requests)
    chunk = _first_chunk(repo / "nested" / "1").relative_to(repo).as_posix()
    assert f"/{chunk}" in requested, sorted(requested)
    assert "/nested/1/manifest.json" in requested
    assert "/nested/1/model.jaxexport" in requested


def test_file_url_is_the_local_directory(repo: Path) -> None:
    art = jaxport.artifact.open((repo / "nested" / "1").as_uri())
    assert isinstance(art.location, LocalLocation)
    assert art.path == repo / "nested" / "1"
    assert art.name == jaxport.artifact.open(repo / "nested" / "1").name


def test_tampered_chunk_over_http_is_refused_with_the_local_message(repo: Path) -> None:
    """Same ChecksumError text as for the local copy, but for where the root is."""
    artifact = repo / "nested" / "1"
    _flip_a_byte(_first_chunk(artifact))
    with pytest.raises(ChecksumError) as local:
        jaxport.artifact.open(artifact)
    with serving(repo) as http, pytest.raises(ChecksumError) as remote:
        jaxport.artifact.open(f"{http.url}/nested/1")
    assert "sha256 mismatch" in str(remote.value) and "weights/" in str(remote.value)
    assert str(remote.value).replace(f"{http.url}/nested/1", "ROOT") == \
        str(local.value).replace(str(artifact), "ROOT")


def test_missing_file_over_http_is_refused_with_the_local_message(repo: Path) -> None:
    artifact = repo / "nested" / "1"
    (artifact / "model.mlirbc").unlink()
    with pytest.raises(ChecksumError) as local:
        jaxport.artifact.open(artifact)
    with serving(repo) as http, pytest.raises(ChecksumError) as remote:
        jaxport.artifact.open(f"{http.url}/nested/1")
    assert str(remote.value) == f"{http.url}/nested/1/model.mlirbc: file listed in the " \
                                "manifest is missing"
    assert str(remote.value).replace(f"{http.url}/nested/1", "ROOT") == \
        str(local.value).replace(str(artifact), "ROOT")


def test_a_manifest_path_may_not_leave_the_url_prefix(repo: Path, tmp_path: Path) -> None:
    """A labels file naming `../..`: refused naming the field, and nothing outside the
    artifact's URL is requested."""
    artifact = repo / "nested" / "1"
    (repo / "secret.txt").write_text("not yours\n")
    m = manifest_mod.load(artifact)
    m.outputs[0].labels_file = "../../secret.txt"
    (artifact / "manifest.json").write_text(json.dumps(
        json.loads(manifest_mod.to_json(m))))  # written as is: write() would refuse it
    with serving(repo) as http:
        with pytest.raises(ArtifactError, match=r"labels_file.*'\.\./\.\./secret\.txt'.*'\.\.'"):
            jaxport.artifact.open(f"{http.url}/nested/1")
        assert not [r for r in http.requests if "secret" in r]


def test_unsupported_schemes_are_refused_naming_the_supported_ones() -> None:
    for url in ("gs://bucket/repo/mlp/1", "ftp://host/mlp/1"):
        with pytest.raises(ArtifactError) as info:
            jaxport.artifact.open(url)
        scheme = url.split(":")[0]
        assert f"{scheme}:// is not supported" in str(info.value)
        for supported in ("file://", "http://", "https://", "s3://"):
            assert supported in str(info.value)


def test_a_url_with_a_query_is_refused() -> None:
    with pytest.raises(ArtifactError, match=r"takes no \?query"):
        locate("http://127.0.0.1:1/repo?x=1")


def test_no_server_is_one_line_after_bounded_retries(repo: Path) -> None:
    with serving(repo) as http:
        url = f"{http.url}/nested/1"
    # The server is gone and its port closed: connection refused, retried a bounded number
    # of times, then one line naming the URL.
    with pytest.raises(ArtifactError) as info:
        jaxport.artifact.open(url)
    message = str(info.value)
    assert message.startswith(f"{url}/manifest.json: cannot read: ")
    assert "\n" not in message


def test_not_an_artifact_over_http(repo: Path) -> None:
    with serving(repo) as http, pytest.raises(ArtifactError) as info:
        jaxport.artifact.open(f"{http.url}/nested")
    assert str(info.value) == (f"{http.url}/nested/manifest.json: no manifest.json; is this "
                               "a jaxport artifact directory?")


def test_index_of_a_repository_and_of_a_model(repo: Path) -> None:
    shutil.copytree(repo / "nested" / "1", repo / "nested" / "3")
    shutil.copytree(repo / "nested" / "1", repo / "other" / "2")
    (repo / "empty").mkdir()
    (repo / ".hidden").mkdir()
    assert index_mod.build(repo) == {"jaxport_index": 1, "models": {
        "empty": [], "nested": [1, 3], "other": [2]}}
    assert index_mod.build(repo / "nested") == {"jaxport_index": 1, "versions": [1, 3]}
    assert index_mod.main([str(repo), str(repo / "nested")]) == 0
    with serving(repo) as http:
        assert index_mod.read(http.url) == {"models": {"empty": [], "nested": [1, 3],
                                                       "other": [2]}}
        assert index_mod.read(f"{http.url}/nested") == {"versions": [1, 3]}
        assert index_mod.read(f"{http.url}/other") is None


@pytest.mark.parametrize(("text", "words"), [
    ("[1, 2]", 'expected an object with "jaxport_index": 1'),
    ('{"jaxport_index": 1, "models": {"m": ["1"]}}', "models['m'] must be a list of positive"),
    ('{"jaxport_index": 1, "versions": [0]}', "versions must be a list of positive integers"),
    ('{"jaxport_index": 1}', 'needs either "models" (a repository) or "versions"'),
    ("{", "is not JSON"),
])
def test_a_bad_index_is_refused_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "index.json").write_text(text)
    with pytest.raises(ArtifactError) as info:
        index_mod.read(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'index.json'}")
    assert words in str(info.value)


#: Opens the artifact at argv[1] in a fresh process (TensorStore reads its CA settings from the
#: environment) and prints its first golden's max error, or the one-line refusal.
HTTPS_CONSUMER = (
    "import sys\n"
    "import numpy as np\n"
    "import jaxport.artifact\n"
    "try:\n"
    "    art = jaxport.artifact.open(sys.argv[1])\n"
    "except jaxport.artifact.ArtifactError as exc:\n"
    "    print('refused', exc)\n"
    "    sys.exit(0)\n"
    "g = art.goldens()[0]\n"
    "out = art.call(g.inputs)\n"
    "print('ok', max(float(np.max(np.abs(out[k] - v))) for k, v in g.outputs.items()))\n"
)


def test_open_over_https(repo: Path, tmp_path: Path) -> None:
    """https:// with a certificate from a CA TensorStore is told to trust
    (TENSORSTORE_CA_BUNDLE): opened and checked; without that CA: refused in one line."""
    import os
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    with serving(repo, tls=(pki.server_cert, pki.server_key)) as https:
        assert https.url.startswith("https://")
        url = f"{https.url}/nested/1"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORSTORE_CA")}
        trusted = subprocess.run([sys.executable, "-c", HTTPS_CONSUMER, url], text=True,
                                 capture_output=True, timeout=300,
                                 env={**env, "TENSORSTORE_CA_BUNDLE": str(pki.ca_cert)})
        untrusted = subprocess.run([sys.executable, "-c", HTTPS_CONSUMER, url], text=True,
                                   capture_output=True, timeout=300, env=env)
        assert "/nested/1/weights/" in " ".join(https.requests)
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    verdict, value = trusted.stdout.split()
    assert verdict == "ok" and float(value) < 1e-5
    assert untrusted.returncode == 0, untrusted.stderr[-2000:]
    assert untrusted.stdout.startswith(f"refused {url}/manifest.json: cannot read: ")
    assert len(untrusted.stdout.strip().splitlines()) == 1
