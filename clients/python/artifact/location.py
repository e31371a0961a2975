"""Where an artifact's (or a repository's) files live: a local directory or a URL.

`locate(where)` takes what a user passes as an artifact or repository:

* a local path (`repo/mlp/1`), or a `file://` URL of one (`file:///srv/repo/mlp/1`): a
  `LocalLocation`, read from the file system; the path rule is `paths.resolve_inside`
  (symlinks followed, nothing may lead outside the directory);
* an `http://` or `https://` URL (`http://host:8000/repo/mlp/1`): an `HttpLocation`, every
  file read through TensorStore's `http` kvstore (the driver that also reads the zarr3
  weights), with a bounded number of retries so a dead server is an error, not a hang. The
  path rule is `paths.check_relative` (no absolute path, no `..`); TensorStore percent-encodes
  each key (`%`, `?`, `#` included), so a manifest path cannot leave the URL prefix either.

Any other scheme (`gs://`, `s3://`...) is refused naming the supported ones: TensorStore has
kvstores for them and `HttpLocation` would carry over, but nothing here was tested against one
(docs/scale-out.md, "Repositories by URL").

Messages name files as `display(rel)`: the full local path or the full URL. A repository
strips its own root from them, so a caller sees `mlp/1/weights/...` either way.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.paths import check_relative, resolve_inside

__all__ = ["SCHEMES", "HttpLocation", "LocalLocation", "Location", "is_url", "locate"]

#: URL schemes `locate` accepts (besides plain local paths).
SCHEMES = ("file", "http", "https")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: TensorStore retries a failing HTTP read this often (then the read fails with its reason).
HTTP_RETRIES = 3
_HTTP_CONTEXT = {"http_request_retries": {"max_retries": HTTP_RETRIES,
                                          "initial_delay": "50ms", "max_delay": "1s"}}
_BLOCK = 1 << 20


def is_url(where: object) -> bool:
    """True for a string of the form `scheme://...`."""
    return isinstance(where, str) and _URL.match(where) is not None


class Location:
    """The root of an artifact or a repository. Relative paths (`rel`) are POSIX, inside it."""

    #: Whether the files are on the local file system (`path` is then the directory).
    is_local: bool = False

    def display(self, rel: str = "") -> str:
        """`rel` as messages name it (full path or URL)."""
        raise NotImplementedError

    def resolve(self, rel: str, what: str) -> str:
        """`display(rel)` once `rel` passes the path rule; ArtifactError (naming `what`) if not."""
        raise NotImplementedError

    def child(self, rel: str) -> Location:
        """The location of the directory `rel` below this one (path rule applied)."""
        raise NotImplementedError

    def read_bytes(self, rel: str) -> bytes | None:
        """The bytes of file `rel`, or None when there is no such file. ArtifactError when it
        cannot be read (the reason on one line)."""
        raise NotImplementedError

    def size_and_sha256(self, rel: str) -> tuple[int, str] | None:
        """(size in bytes, hex sha256) of file `rel`, or None when there is no such file."""
        data = self.read_bytes(rel)
        if data is None:
            return None
        return len(data), hashlib.sha256(data).hexdigest()

    def kvstore(self, rel_dir: str) -> dict[str, Any]:
        """The TensorStore kvstore spec of directory `rel_dir` (path rule applied)."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.display()


class LocalLocation(Location):
    """A directory on the local file system."""

    is_local = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"LocalLocation({str(self.path)!r})"

    def display(self, rel: str = "") -> str:
        return str(self.path / rel) if rel else str(self.path)

    def resolve(self, rel: str, what: str) -> str:
        return str(resolve_inside(self.path, rel, what))

    def child(self, rel: str) -> LocalLocation:
        check_relative(rel, f"'{rel}'")
        return LocalLocation(self.path / rel)

    def read_bytes(self, rel: str) -> bytes | None:
        path = self.path / rel
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot read: {exc.strerror}") from None

    def size_and_sha256(self, rel: str) -> tuple[int, str] | None:
        path = self.path / rel
        if not path.is_file():
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_BLOCK), b""):
                h.update(block)
        return path.stat().st_size, h.hexdigest()

    def kvstore(self, rel_dir: str) -> dict[str, Any]:
        target = resolve_inside(self.path, rel_dir.rstrip("/"), "tensorstore kvstore")
        return {"driver": "file", "path": str(target) + "/"}


class HttpLocation(Location):
    """A directory served over HTTP(S), read through TensorStore's `http` kvstore."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ArtifactError(f"{url!r} is not an http(s)://HOST/... URL")
        if parts.query or parts.fragment:
            raise ArtifactError(f"{url!r}: a repository or artifact URL takes no ?query or "
                                "#fragment")
        # One trailing slash: TensorStore appends keys to the path as they are.
        self.url = urllib.parse.urlunsplit(
            (parts.scheme, parts.netloc, parts.path.rstrip("/") + "/", "", ""))
        self._store: Any = None

    def __repr__(self) -> str:
        return f"HttpLocation({self.url!r})"

    def display(self, rel: str = "") -> str:
        return self.url + rel if rel else self.url.rstrip("/")

    def resolve(self, rel: str, what: str) -> str:
        check_relative(rel, what)
        return self.display(rel)

    def child(self, rel: str) -> HttpLocation:
        check_relative(rel, f"'{rel}'")
        return HttpLocation(self.url + rel.strip("/"))

    def _kv(self) -> Any:
        import tensorstore as ts

        if self._store is None:
            self._store = ts.KvStore.open(
                {"driver": "http", "base_url": self.url}, context=ts.Context(_HTTP_CONTEXT)
            ).result()
        return self._store

    def read_bytes(self, rel: str) -> bytes | None:
        check_relative(rel, f"'{rel}'")
        try:
            result = self._kv().read(rel).result()
        except (ValueError, OSError) as exc:  # TensorStore's words, first line
            raise ArtifactError(
                f"{self.display(rel)}: cannot read: {str(exc).splitlines()[0]}") from None
        if result.state != "value":
            return None
        return bytes(result.value)

    def kvstore(self, rel_dir: str) -> dict[str, Any]:
        check_relative(rel_dir.rstrip("/"), "tensorstore kvstore")
        return {"driver": "http", "base_url": self.url, "path": rel_dir.rstrip("/") + "/",
                **_HTTP_CONTEXT}


def locate(where: str | os.PathLike[str] | Location) -> Location:
    """The Location of a local path, a `file://` URL or an `http(s)://` URL (see module doc).
    ArtifactError names the scheme when it is not one of `SCHEMES`."""
    if isinstance(where, Location):
        return where
    if not is_url(where):
        return LocalLocation(where)
    assert isinstance(where, str)
    scheme = _URL.match(where).group(1).lower()  # type: ignore[union-attr]
    if scheme == "file":
        parts = urllib.parse.urlsplit(where)
        if parts.netloc not in ("", "localhost"):
            raise ArtifactError(f"{where!r}: a file:// URL names a local path "
                                f"(file:///abs/path), not host {parts.netloc!r}")
        return LocalLocation(urllib.request.url2pathname(parts.path))
    if scheme in ("http", "https"):
        return HttpLocation(where)
    raise ArtifactError(
        f"{where!r}: {scheme}:// is not supported (supported: a local path, "
        + ", ".join(f"{s}://" for s in SCHEMES)
        + "); copy the artifacts to a local directory or serve them over HTTP")
