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

* an `s3://BUCKET/PREFIX` URL: an `S3Location`, every file read through TensorStore's `s3`
  kvstore (the same read path as HTTP, another kvstore spec). Credentials (`s3_credentials`):
  `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`) when set; else the
  standard chain (profile, container, web identity, instance metadata) when one is configured
  (`AWS_PROFILE`, a shared credentials or config file, `AWS_CONTAINER_CREDENTIALS_*`,
  `AWS_WEB_IDENTITY_TOKEN_FILE`); else unsigned requests (a public bucket), so a machine with
  nothing configured gets one line, not the chain's log lines about missing files.
  `JAXPORT_S3_CREDENTIALS=default|environment|profile|imds|ecs|anonymous` chooses
  TensorStore's provider outright (`imds`: an EC2 instance role with nothing else set). The
  region from `AWS_REGION` or `AWS_DEFAULT_REGION`; an S3-compatible server (MinIO,
  moto...) through the AWS SDKs' endpoint override, `AWS_ENDPOINT_URL_S3` or
  `AWS_ENDPOINT_URL`. A missing bucket and a refused request (403: no or wrong credentials)
  are one line each naming the bucket.

Any other scheme (`gs://`...) is refused naming the supported ones: TensorStore has a `gcs`
kvstore and `S3Location` would carry over, but nothing here was tested against one
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.paths import check_relative, resolve_inside

__all__ = ["SCHEMES", "HttpLocation", "LocalLocation", "Location", "S3Location", "is_url",
           "locate", "s3_credentials"]

#: URL schemes `locate` accepts (besides plain local paths).
SCHEMES = ("file", "http", "https", "s3")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: TensorStore retries a failing HTTP read this often (then the read fails with its reason).
HTTP_RETRIES = 3
_RETRIES = {"max_retries": HTTP_RETRIES, "initial_delay": "50ms", "max_delay": "1s"}
_HTTP_CONTEXT = {"http_request_retries": _RETRIES}
_S3_CONTEXT = {"s3_request_retries": _RETRIES}
#: S3 bucket names: 3-63 lower-case letters, digits, dots and hyphens (AWS's rule).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
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


class _KvLocation(Location):
    """A directory read through a TensorStore kvstore (`self.url` ends with one slash)."""

    url: str
    _store: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def display(self, rel: str = "") -> str:
        return self.url + rel if rel else self.url.rstrip("/")

    def resolve(self, rel: str, what: str) -> str:
        check_relative(rel, what)
        return self.display(rel)

    def child(self, rel: str) -> Location:
        check_relative(rel, f"'{rel}'")
        return type(self)(self.url + rel.strip("/"))

    def _spec(self, rel_dir: str) -> dict[str, Any]:
        """The kvstore spec (context included) of directory `rel_dir` ("" or ending with /)."""
        raise NotImplementedError

    def _kv(self) -> Any:
        import tensorstore as ts

        if self._store is None:
            self._store = ts.KvStore.open(self._spec("")).result()
        return self._store

    def _failure(self, rel: str, reason: str) -> ArtifactError:
        return ArtifactError(f"{self.display(rel)}: cannot read: {reason}")

    def _missing(self, rel: str) -> None:
        """Called when a read finds no file `rel`: raises ArtifactError when the reason is the
        location itself (no such bucket), not the file."""

    def read_bytes(self, rel: str) -> bytes | None:
        check_relative(rel, f"'{rel}'")
        try:
            result = self._kv().read(rel).result()
        except (ValueError, OSError) as exc:  # TensorStore's words, first line
            raise self._failure(rel, str(exc).splitlines()[0]) from None
        if result.state != "value":
            self._missing(rel)
            return None
        return bytes(result.value)

    def kvstore(self, rel_dir: str) -> dict[str, Any]:
        check_relative(rel_dir.rstrip("/"), "tensorstore kvstore")
        return self._spec(rel_dir.rstrip("/") + "/")


class HttpLocation(_KvLocation):
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

    def _spec(self, rel_dir: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"driver": "http", "base_url": self.url, **_HTTP_CONTEXT}
        return {**spec, "path": rel_dir} if rel_dir else spec


#: Environment variables naming AWS credentials (the standard ones; TensorStore reads them).
AWS_KEY_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
#: The AWS SDKs' endpoint override, S3's own first: an S3-compatible server.
AWS_ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


#: Files and variables that say the standard AWS credential chain has something to find.
_CHAIN_VARS = ("AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
               "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE")
_CREDENTIALS_SAID = {
    "environment": "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY of the environment",
    "default": "the credentials of the AWS profile chain (AWS_PROFILE, ~/.aws/credentials)",
    "anonymous": "no credentials (unsigned: set AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)",
}


def s3_credentials(env: Mapping[str, str]) -> str:
    """TensorStore's `aws_credentials` type for an S3 read (module doc): the environment's
    keys, else the standard chain when something configures it, else anonymous."""
    if env.get("JAXPORT_S3_CREDENTIALS"):
        return env["JAXPORT_S3_CREDENTIALS"]
    if all(env.get(v) for v in AWS_KEY_VARS):
        return "environment"
    files = [env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
             env.get("AWS_CONFIG_FILE", "~/.aws/config")]
    if any(env.get(v) for v in _CHAIN_VARS) or any(
            os.path.isfile(os.path.expanduser(f)) for f in files):
        return "default"
    return "anonymous"


class S3Location(_KvLocation):
    """A directory in an S3 bucket (`s3://BUCKET/PREFIX`), read through TensorStore's `s3`
    kvstore; credentials, region and endpoint from the standard AWS environment (module doc),
    read when the location is made."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "s3" or not _BUCKET.match(parts.netloc):
            raise ArtifactError(f"{url!r} is not an s3://BUCKET/PREFIX URL (a bucket name is 3-63 "
                                "lower-case letters, digits, dots and hyphens)")
        if parts.query or parts.fragment:
            raise ArtifactError(f"{url!r}: a repository or artifact URL takes no ?query or "
                                "#fragment")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        if self.prefix:
            check_relative(self.prefix.rstrip("/"), f"{url!r}")
        self.url = f"s3://{self.bucket}/{self.prefix}"
        env = os.environ
        self.endpoint = next((env[v] for v in AWS_ENDPOINT_VARS if env.get(v)), None)
        self.region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
        self.credentials = s3_credentials(env)
        self._bucket_checked = False

    def _spec(self, rel_dir: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"driver": "s3", "bucket": self.bucket,
                                "path": self.prefix + rel_dir,
                                "aws_credentials": {"type": self.credentials}, **_S3_CONTEXT}
        if self.endpoint:
            spec["endpoint"] = self.endpoint
        if self.region:
            spec["aws_region"] = self.region
        return spec

    def _failure(self, rel: str, reason: str) -> ArtifactError:
        if reason.startswith("PERMISSION_DENIED"):
            reason = (f"access denied (HTTP 403) to bucket '{self.bucket}' with "
                      + _CREDENTIALS_SAID.get(self.credentials,
                                              f"JAXPORT_S3_CREDENTIALS={self.credentials}"))
        return super()._failure(rel, reason)

    def _missing(self, rel: str) -> None:
        # S3 answers 404 for a missing bucket as for a missing key, and TensorStore reads both
        # as "no such key": ask for the bucket once, by listing the keys that start with `rel`
        # (none: it was just found missing).
        if self._bucket_checked:
            return
        import tensorstore as ts

        try:
            self._kv().list(ts.KvStore.KeyRange(rel, rel + "\x00")).result()
        except (ValueError, OSError) as exc:
            reason = str(exc).splitlines()[0]
            if "NoSuchBucket" in reason:
                raise ArtifactError(f"{self.display(rel)}: no such bucket '{self.bucket}'"
                                    + (f" at {self.endpoint}" if self.endpoint else "")) from None
            raise self._failure("", reason) from None
        self._bucket_checked = True


def locate(where: str | os.PathLike[str] | Location) -> Location:
    """The Location of a local path, a `file://`, `http(s)://` or `s3://` URL (module doc).
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
    if scheme == "s3":
        return S3Location(where)
    raise ArtifactError(
        f"{where!r}: {scheme}:// is not supported (supported: a local path, "
        + ", ".join(f"{s}://" for s in SCHEMES)
        + "); copy the artifacts to a local directory, serve them over HTTP or put them in S3")
