"""The ONE rule for paths inside an artifact or a repository.

Every path a manifest names (program files, goldens, weight arrays) and every model or version
directory a repository serves goes through `check_relative` (the path as written) and, when the
file system is involved, `resolve_inside` (where it actually leads, symlinks followed).

Trust boundary: a manifest is data from the artifact's producer. These rules keep what it names
inside the artifact directory: no absolute paths, no `..`, no backslashes or NUL, no symlink that
leads outside. They say nothing about the safety of the programs themselves (see
docs/security.md).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from jaxport.artifact.errors import ArtifactError

__all__ = ["check_relative", "resolve_inside", "safe_dir_name", "unique_safe_names"]


def check_relative(rel: str, what: str) -> str:
    """`rel` when it is a relative POSIX path that cannot climb out; ArtifactError otherwise."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel or \
            os.path.isabs(rel) or rel.startswith("/"):
        raise ArtifactError(f"{what}: path {rel!r} is not a relative path inside the artifact")
    if ".." in PurePosixPath(rel).parts:
        raise ArtifactError(f"{what}: path {rel!r} contains '..'; refused")
    return rel


def resolve_inside(base: str | os.PathLike[str], rel: str, what: str) -> Path:
    """`base/rel` resolved, refused when `rel` breaks `check_relative` or a symlink on the way
    leads outside `base`."""
    check_relative(rel, what)
    root = Path(base).resolve()
    target = (Path(base) / rel).resolve()
    if not target.is_relative_to(root):
        raise ArtifactError(f"{what}: path {rel!r} resolves outside {Path(base).name}/; refused")
    return target


def safe_dir_name(name: str) -> str:
    """A file-system-safe file or directory name for a parameter/tensor name (`params.w1` stays)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]", "_", name).strip(".")
    return cleaned or "_"


def unique_safe_names(names: list[str]) -> list[str]:
    """`safe_dir_name` of each name, made unique (case-insensitively) with a numeric suffix."""
    out: list[str] = []
    seen: set[str] = set()
    for name in names:
        base = candidate = safe_dir_name(name)
        n = 1
        while candidate.lower() in seen:
            candidate = f"{base}_{n}"
            n += 1
        seen.add(candidate.lower())
        out.append(candidate)
    return out
