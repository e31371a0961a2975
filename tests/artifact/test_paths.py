"""The one path rule (`jaxport.artifact.paths`), on its own: what it refuses and why, each
refusal naming the offending path and what it was for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jaxport.artifact import manifest
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.paths import check_relative, resolve_inside, unique_safe_names


@pytest.mark.parametrize(
    ("rel", "why"),
    [
        ("", "not a relative path"),
        ("/etc/passwd", "not a relative path"),
        ("a\\b", "not a relative path"),
        ("a\x00b", "not a relative path"),
        ("../x", "contains '..'"),
        ("weights/../../x", "contains '..'"),
    ],
)
def test_check_relative_refuses_paths_that_could_leave(rel: str, why: str) -> None:
    with pytest.raises(ArtifactError) as info:
        check_relative(rel, "files[0]")
    assert str(info.value).startswith("files[0]: path ") and why in str(info.value)
    assert repr(rel) in str(info.value)


def test_check_relative_accepts_plain_relative_paths() -> None:
    assert check_relative("weights/params.w1", "x") == "weights/params.w1"
    assert check_relative("a/./b", "x") == "a/./b"


def test_resolve_inside_follows_symlinks_and_refuses_an_escape(tmp_path: Path) -> None:
    art = tmp_path / "art"
    (art / "weights").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    os.symlink(tmp_path / "secret", art / "weights" / "link")
    os.symlink(art / "weights", art / "inner")
    assert resolve_inside(art, "inner", "w") == (art / "weights").resolve()
    with pytest.raises(ArtifactError, match=r"w: path 'weights/link' resolves outside art/"):
        resolve_inside(art, "weights/link", "w")


def test_a_manifest_symlinked_from_outside_is_refused(tmp_path: Path) -> None:
    art = tmp_path / "art"
    art.mkdir()
    (tmp_path / "manifest.json").write_text("{}")
    os.symlink(tmp_path / "manifest.json", art / "manifest.json")
    with pytest.raises(ArtifactError, match=r"manifest.json.*resolves outside art/"):
        manifest.load(art)


def test_unique_safe_names_are_file_system_safe_and_distinct_ignoring_case() -> None:
    assert unique_safe_names(["params.w", "params/w", "Params.W", "..", "a b"]) == [
        "params.w", "params_w", "Params.W_1", "_", "a_b"]
