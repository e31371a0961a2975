"""`index.json`: what a repository (or one model directory) holds, for readers that cannot list
directories, i.e. a repository served by URL (HTTP has no portable directory listing; object
stores list differently). A local repository is listed from the file system and needs none.

    {"jaxport_index": 1, "models": {"mlp": [1, 2], "ranker": [3]}}    # REPO/index.json
    {"jaxport_index": 1, "versions": [1, 2]}                          # MODEL/index.json

Written next to the artifacts after exporting (and again whenever versions are added or
removed; `jaxport export` rewrites the model's and the repository's index when they exist,
`jaxport.exporter.write.refresh_indices`), from the directories that hold a `manifest.json`:

    python -m jaxport.artifact.index REPO       # or MODEL_DIR (a directory of versions)

The reader (`read`) checks the structure only; what a valid model name or version is, is the
server's rule (bridge/front/repository: `CheckName`, `VersionNumber`), applied to what the index
lists.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.location import Location, locate
from jaxport.artifact.manifest import MANIFEST_FILE

__all__ = ["INDEX_FILE", "INDEX_VERSION", "build", "read", "write"]

INDEX_FILE = "index.json"
INDEX_VERSION = 1
_VERSION_DIR = re.compile(r"[1-9][0-9]{0,18}")


def _versions(model_dir: Path) -> list[int]:
    return sorted(int(v.name) for v in model_dir.iterdir()
                  if _VERSION_DIR.fullmatch(v.name) and (v / MANIFEST_FILE).is_file())


def build(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The index of local directory `root`: a model directory (version subdirectories holding
    a manifest.json) lists its versions, anything else is a repository listing its models
    (subdirectories not starting with '.') and each one's versions."""
    root = Path(root)
    if not root.is_dir():
        raise ArtifactError(f"{root}: not a directory")
    versions = _versions(root)
    if versions:
        return {"jaxport_index": INDEX_VERSION, "versions": versions}
    models = {d.name: _versions(d) for d in sorted(root.iterdir())
              if d.is_dir() and not d.name.startswith(".")}
    return {"jaxport_index": INDEX_VERSION, "models": models}


def write(root: str | os.PathLike[str]) -> Path:
    """Write `root/index.json` (`build`); returns its path."""
    index = build(root)
    path = Path(root) / INDEX_FILE
    tmp = path.with_name(f".{INDEX_FILE}.tmp")
    tmp.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read(location: str | os.PathLike[str] | Location) -> dict[str, Any] | None:
    """The index at `location` (`{"models": {name: [versions]}}` or `{"versions": [...]}`),
    or None when it has no index.json. ArtifactError names the file and what is wrong."""
    root = locate(location)
    source = root.display(INDEX_FILE)
    data = root.read_bytes(INDEX_FILE)
    if data is None:
        return None
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{source} is not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("jaxport_index") != INDEX_VERSION:
        raise ArtifactError(f"{source}: expected an object with \"jaxport_index\": "
                            f"{INDEX_VERSION} (write it with python -m jaxport.artifact.index)")

    def versions(value: object, what: str) -> list[int]:
        if not isinstance(value, list) or not all(
                type(v) is int and v > 0 for v in value):
            raise ArtifactError(f"{source}: {what} must be a list of positive integers, "
                                f"got {json.dumps(value)[:80]}")
        return sorted(set(value))

    if "versions" in raw and "models" not in raw:
        return {"versions": versions(raw["versions"], "versions")}
    models = raw.get("models")
    if not isinstance(models, dict) or "versions" in raw:
        raise ArtifactError(f"{source}: needs either \"models\" (a repository) or "
                            "\"versions\" (a model directory)")
    return {"models": {str(name): versions(v, f"models[{name!r}]")
                       for name, v in models.items()}}


def main(argv: list[str] | None = None) -> int:
    """`python -m jaxport.artifact.index DIR...`: write each DIR/index.json."""
    args = sys.argv[1:] if argv is None else argv
    if not args or any(a.startswith("-") for a in args):
        print("usage: python -m jaxport.artifact.index REPOSITORY_OR_MODEL_DIR...",
              file=sys.stderr)
        return 2
    for arg in args:
        try:
            path = write(arg)
        except ArtifactError as exc:
            print(f"jaxport.artifact.index: error: {exc}", file=sys.stderr)
            return 1
        index = json.loads(path.read_text(encoding="utf-8"))
        what = (f"{len(index['versions'])} versions" if "versions" in index
                else f"{len(index['models'])} models")
        print(f"{path}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
