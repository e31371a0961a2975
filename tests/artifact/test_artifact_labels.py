"""`Manifest.outputs[].labels_file`: read by `Artifact.labels`, held to the artifact's path and
checksum rules like every other file it names."""

from __future__ import annotations

import shutil
from pathlib import Path

import jaxport.artifact
import pytest
from jaxport.artifact import manifest as manifest_mod

BACKCOMPAT = sorted(p for p in (Path(__file__).resolve().parents[1] / "backcompat").iterdir()
                    if (p / "manifest.json").is_file())


def _with_labels(tmp_path: Path, text: bytes, *, listed: bool = True,
                 rel: str = "labels/out.txt") -> tuple[Path, str]:
    art = tmp_path / "art"
    shutil.copytree(BACKCOMPAT[0], art)
    m = manifest_mod.load(art)
    out = m.outputs[0]
    target = art / "labels" / "out.txt"
    target.parent.mkdir()
    target.write_bytes(text)
    out.labels_file = rel
    if listed:
        entry = m.files.add(path="labels/out.txt", size_bytes=len(text))
        entry.sha256 = manifest_mod.sha256_bytes(text)
    manifest_mod.write(m, art)
    return art, out.name


def test_labels_are_read_one_per_line(tmp_path: Path) -> None:
    art, name = _with_labels(tmp_path, b"cat\ndog\nbird\n")
    opened = jaxport.artifact.open(art)
    assert opened.labels(name) == ["cat", "dog", "bird"]


def test_an_output_without_labels_has_none() -> None:
    opened = jaxport.artifact.open(BACKCOMPAT[0])
    assert opened.labels(opened.outputs[0].name) is None


def test_an_unknown_output_is_named(tmp_path: Path) -> None:
    opened = jaxport.artifact.open(BACKCOMPAT[0])
    with pytest.raises(jaxport.artifact.ArtifactError, match="no output 'nope'"):
        opened.labels("nope")


def test_a_labels_file_without_checksum_is_refused(tmp_path: Path) -> None:
    art, name = _with_labels(tmp_path, b"a\nb\n", listed=False)
    with pytest.raises(jaxport.artifact.ArtifactError,
                       match=rf"outputs\['{name}'\].labels_file 'labels/out.txt' has no checksum"):
        jaxport.artifact.open(art)


def test_a_labels_path_leaving_the_artifact_is_refused(tmp_path: Path) -> None:
    art, _ = _with_labels(tmp_path, b"a\n", rel="../outside.txt")
    with pytest.raises(jaxport.artifact.ArtifactError, match=r"labels_file.*\.\./outside\.txt"):
        jaxport.artifact.open(art)


def test_a_tampered_labels_file_fails_its_checksum(tmp_path: Path) -> None:
    art, _ = _with_labels(tmp_path, b"a\nb\n")
    (art / "labels" / "out.txt").write_bytes(b"b\na\n")
    with pytest.raises(jaxport.artifact.ChecksumError, match=r"labels/out\.txt"):
        jaxport.artifact.open(art)


def test_labels_that_are_not_utf8_are_refused_by_name(tmp_path: Path) -> None:
    art, name = _with_labels(tmp_path, b"\xff\xfe\n")
    with pytest.raises(jaxport.artifact.ArtifactError, match="not UTF-8"):
        jaxport.artifact.open(art).labels(name)
