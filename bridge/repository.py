"""Model repository: `ROOT/<model>/<version>/` directories of exporter artifacts (no grpc).

Versions are positive integers. At start every model is loaded (its latest version, or all of
them with the `all` policy); models can be (re)loaded and unloaded while serving. A version that
fails to load (tampered checksum, missing file, bad manifest...) is recorded with its reason
(logs, RepositoryIndex `reason`, ModelReady false) and every other model keeps serving. A
reload that fails leaves the version that was serving in place.

Names come from callers, so they are checked before they touch the file system or int():
`check_name` and `version_number` are the ONE validation of a model reference (what the layout
can hold: `NAME_RULE`, `VERSION_RULE`), and nothing (symlinks) may resolve outside the
repository. An
error echoing a name that is not a model on disk cuts it (`jaxport.protocol.errors.clip`).

Reasons callers see (RepositoryIndex, UNAVAILABLE, load errors) name files relative to the
repository (`mlp/1/weights/params.w1/c/0/0`): which file of which model version, not the
server's file system layout. The log keeps the full paths for the operator.

Where the repository is (`Repository(root)`): a local directory, a `file://` URL of one, or an
`http(s)://` or `s3://` URL (`jaxport.artifact.location`). A local repository is listed from
the file system; one by URL from its `index.json` (`jaxport.artifact.index`, written next to
the artifacts), re-read whenever the repository is listed (start, RepositoryIndex, load).

A single-model root (`single_model=NAME`, KServe's `/mnt/models`): the root is ONE model,
served as NAME, either a version directory (an artifact: `manifest.json` at the root, served
as version 1) or a model directory (version subdirectories `1/`, `2/`...; by URL, listed by
its index.json). `check_root` says in one line why a root cannot be served as asked.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jaxport.artifact import index as index_file
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.location import LocalLocation, Location, locate
from jaxport.artifact.manifest import MANIFEST_FILE
from jaxport.artifact.paths import resolve_inside
from jaxport.protocol.errors import NotFoundError, ProtocolError, UnavailableError, clip

if TYPE_CHECKING:
    from jaxport.bridge.model import Model

log = logging.getLogger("jaxport.bridge.repository")

READY = "READY"
LOADING = "LOADING"
UNAVAILABLE = "UNAVAILABLE"

POLICIES = ("latest", "all")

Loader = Callable[[str, int, "Path | Location"], "Model"]
"""`loader(name, version, artifact) -> Model`; `artifact` is the version directory (a Path) or,
for a repository by URL, its Location (what `jaxport.artifact.open` takes). Raises LoadError
(or anything) on refusal."""

#: How many known models a NOT_FOUND for an unknown one names, and how much of each name.
MAX_KNOWN_NAMED = 10
_KNOWN_NAME_CHARS = 40


@dataclass(frozen=True)
class VersionStatus:
    """State of one model version as RepositoryIndex reports it."""

    name: str
    version: int
    state: str
    reason: str = ""
    model: Model | None = None


# What a model reference may look like; checked (`check_name`, `version_number`) before a
# name or version touches the file system or int(), on every RPC and inside streams.
# A model name is one directory name of the repository layout: 1 to MAX_NAME_BYTES (NAME_MAX,
# the longest file name the file system takes) ASCII letters, digits, '_', '-', '.', not
# starting with '.' (no hidden directories, no '.' / '..').
MAX_NAME_BYTES = 255
NAME_RULE = "1 to 255 of the characters A-Z a-z 0-9 _ - ., not starting with '.'"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")
# A version is the canonical decimal name of a version directory: no sign, no leading zero,
# ASCII digits only (str.isdigit() also takes '\u00b2' and '\u0661'), at most 19 digits.
MAX_VERSION_DIGITS = 19
VERSION_RULE = (f"a decimal number of 1 to {MAX_VERSION_DIGITS} digits without a leading zero,"
                " or empty for the latest")
_VERSION = re.compile(r"[1-9][0-9]{0,18}")


def check_name(name: str) -> str:
    """`name` if it can be a model of the repository layout; else NOT_FOUND saying why."""
    if _NAME.fullmatch(name) is None:
        raise NotFoundError(
            f"unknown model {clip(name)!r}: not a valid model name ({NAME_RULE})")
    return name


def version_number(name: str, version: str) -> int | None:
    """The number of `version` ("" = latest: None); NOT_FOUND (naming model and version and
    the rule) for anything that is no canonical version directory name."""
    if version == "":
        return None
    if _VERSION.fullmatch(version) is None:
        raise NotFoundError(
            f"model {clip(name)!r} has no version {clip(version)!r}: not a valid model "
            f"version ({VERSION_RULE})")
    return int(version)


def _load_error(message: str) -> ProtocolError:
    """`jaxport.bridge.loading.LoadError` (FAILED_PRECONDITION), imported when raised: this
    module stays free of jax, so the CLI can `check_root` before anything heavy loads."""
    from jaxport.bridge.loading import LoadError

    return LoadError(message)


def _known(names: list[str]) -> str:
    """`known models: a, b, ...` (at most MAX_KNOWN_NAMED, each cut) for a NOT_FOUND message."""
    if not names:
        return "no models in the repository"
    shown = ", ".join(clip(n, _KNOWN_NAME_CHARS) for n in names[:MAX_KNOWN_NAMED])
    more = len(names) - MAX_KNOWN_NAMED
    return f"known models: {shown}" + (f" and {more} more" if more > 0 else "")


def _local_versions(model_dir: Path) -> list[int]:
    try:
        return sorted(int(v.name) for v in model_dir.iterdir()
                      if _VERSION.fullmatch(v.name) and v.is_dir())
    except OSError:
        return []


class _Layout:
    """Where the models of a repository are: discovery and the artifact of each version."""

    def __init__(self, location: Location) -> None:
        self.location = location

    def models(self) -> dict[str, list[int]]:
        """Every model and its version numbers (ascending), as found now (a fresh listing)."""
        raise NotImplementedError

    def has_model(self, name: str) -> bool:
        """Whether `name` (already checked by `check_name`) is a model of the repository."""
        raise NotImplementedError

    def has_version(self, name: str, version: int) -> bool:
        raise NotImplementedError

    def rel(self, name: str, version: int) -> str:
        """The version's directory relative to the root, as messages name it."""
        return f"{name}/{version}"

    def artifact(self, name: str, version: int) -> Path | Location:
        """What the loader opens: the version directory, path rule applied (LoadError)."""
        rel = self.rel(name, version)
        if not isinstance(self.location, LocalLocation):
            return self.location.child(rel) if rel else self.location
        if rel:
            try:
                resolve_inside(self.location.path, rel, f"'{rel}'")
            except ArtifactError:
                path = self.location.path / rel
                log.warning("path outside the repository",
                            extra={"fields": {"path": str(path), "target": str(path.resolve())}})
                raise _load_error(f"'{rel}' resolves outside the repository; refused") from None
        return self.location.path / rel


class _DirectoryLayout(_Layout):
    """`ROOT/<model>/<version>/` on the local file system."""

    location: LocalLocation

    def models(self) -> dict[str, list[int]]:
        root = self.location.path
        if not root.is_dir():
            return {}
        return {entry.name: _local_versions(entry) for entry in sorted(root.iterdir())
                if not entry.name.startswith(".") and entry.is_dir()}

    def has_model(self, name: str) -> bool:
        return (self.location.path / name).is_dir()

    def has_version(self, name: str, version: int) -> bool:
        return (self.location.path / name / str(version)).is_dir()


class _IndexLayout(_Layout):
    """`ROOT/<model>/<version>/` by URL, listed by `ROOT/index.json`. The last listing is kept
    for the per-request questions (has_model), so an unknown name costs no HTTP request."""

    def __init__(self, location: Location) -> None:
        super().__init__(location)
        self._lock = threading.Lock()
        self._listed: dict[str, list[int]] = {}

    def models(self) -> dict[str, list[int]]:
        try:
            index = index_file.read(self.location)
        except ArtifactError as exc:
            log.error("repository index unreadable", extra={"fields": {"reason": exc.message}})
            index = None
        if index is None or "models" not in index:
            if index is None:
                log.error("repository has no index.json", extra={"fields": {
                    "repository": str(self.location),
                    "fix": "python -m jaxport.artifact.index REPO, then publish REPO again"}})
            listed: dict[str, list[int]] = {}
        else:
            listed = {}
            for name, versions in index["models"].items():
                if _NAME.fullmatch(name) is None:
                    log.warning("index.json lists an invalid model name; ignored",
                                extra={"fields": {"model": clip(name), "rule": NAME_RULE}})
                    continue
                listed[name] = [v for v in versions if v < 10**MAX_VERSION_DIGITS]
        with self._lock:
            self._listed = listed
        return dict(listed)

    def has_model(self, name: str) -> bool:
        with self._lock:
            return name in self._listed

    def has_version(self, name: str, version: int) -> bool:
        with self._lock:
            return version in self._listed.get(name, [])


class _SingleModelLayout(_Layout):
    """The root is one model, served as `name`: a version directory (manifest.json at the
    root: version 1) or a model directory (version subdirectories; by URL, its index.json)."""

    def __init__(self, location: Location, name: str) -> None:
        super().__init__(location)
        self.name = name
        self._lock = threading.Lock()
        self._versions: list[int] = []
        self._version_root = False

    def _find(self) -> tuple[bool, list[int]]:
        """(is the root itself a version, version numbers)."""
        loc = self.location
        if isinstance(loc, LocalLocation):
            if (loc.path / MANIFEST_FILE).is_file():
                return True, [1]
            return False, _local_versions(loc.path)
        try:
            if loc.read_bytes(MANIFEST_FILE) is not None:
                return True, [1]
            index = index_file.read(loc)
        except ArtifactError as exc:
            log.error("model root unreadable", extra={"fields": {"reason": exc.message}})
            return False, []
        return False, (index or {}).get("versions", [])

    def models(self) -> dict[str, list[int]]:
        version_root, versions = self._find()
        with self._lock:
            self._version_root, self._versions = version_root, versions
        return {self.name: list(versions)}

    def has_model(self, name: str) -> bool:
        return name == self.name

    def has_version(self, name: str, version: int) -> bool:
        with self._lock:
            return name == self.name and version in self._versions

    def rel(self, name: str, version: int) -> str:
        with self._lock:
            return "" if self._version_root else str(version)


def _layout(root: str | os.PathLike[str] | Location, single_model: str | None) -> _Layout:
    location = locate(root)
    if single_model is not None:
        return _SingleModelLayout(location, single_model)
    if isinstance(location, LocalLocation):
        return _DirectoryLayout(location)
    return _IndexLayout(location)


def check_root(root: str | os.PathLike[str], single_model: str | None = None) -> str | None:
    """Why `root` cannot be served (one line naming it and the fix), or None when it can.
    For the CLI, before anything heavy starts: a missing directory, an unsupported URL, a
    repository by URL without index.json, a single-model root that is no model."""
    where = "--repository"
    try:
        if single_model is not None:
            check_name(single_model)
        layout = _layout(root, single_model)
    except (ArtifactError, NotFoundError) as exc:
        return f"{where} {root}: {exc}"
    loc = layout.location
    if isinstance(loc, LocalLocation) and not loc.path.is_dir():
        return f"{where} {root} is not a directory"
    if isinstance(layout, _SingleModelLayout):
        version_root, versions = layout._find()
        if not version_root and not versions:
            listed = "" if loc.is_local else f" listed in its {index_file.INDEX_FILE}"
            return (f"{where} {root} is neither an artifact (no {MANIFEST_FILE}) nor a model "
                    f"directory (no version directories 1/, 2/ ...{listed}) to serve as "
                    f"model '{single_model}'")
        return None
    if not isinstance(loc, LocalLocation):
        try:
            index = index_file.read(loc)
        except ArtifactError as exc:
            return f"{where} {root}: {exc}"
        if index is None:
            return (f"{where} {root}: no {index_file.INDEX_FILE} (a repository by URL is listed "
                    "by it: run python -m jaxport.artifact.index on the repository directory "
                    "and publish it again)")
        if "models" not in index:
            return (f"{where} {root}: its {index_file.INDEX_FILE} lists versions, so it is one "
                    "model: serve it with --model-name NAME")
    return None


class Repository:
    """Thread-safe table of model versions and their state, fed from the repository directory."""

    def __init__(
        self,
        root: str | os.PathLike[str] | Location,
        loader: Loader,
        *,
        version_policy: str = "latest",
        on_change: Callable[[VersionStatus], None] | None = None,
        single_model: str | None = None,
    ) -> None:
        """`root`: a local directory, a `file://`, `http(s)://` or `s3://` URL (module doc).
        `single_model`: serve the root as that one model (module doc)."""
        if version_policy not in POLICIES:
            raise ValueError(f"version policy must be one of {POLICIES}, got {version_policy!r}")
        if single_model is not None and _NAME.fullmatch(single_model) is None:
            raise ValueError(f"model name {single_model!r} is not valid ({NAME_RULE})")
        self._layout = _layout(root, single_model)
        location = self._layout.location
        self.location = location
        self.root: Path | str = (location.path if isinstance(location, LocalLocation)
                                 else str(location))
        self.single_model = single_model
        # The repository root as it can appear in messages (as given, absolute, resolved;
        # longest first, optionally as a file:// URL; or the URL): wire-visible reasons drop
        # it, so callers see paths relative to the repository.
        if isinstance(location, LocalLocation):
            path = location.path
            forms = sorted({str(path), str(path.absolute()), str(path.resolve())},
                           key=len, reverse=True)
            pattern = r"(?:file://)?(?:" + "|".join(re.escape(f.rstrip("/")) for f in forms) + ")"
        else:
            pattern = re.escape(location.display().rstrip("/"))
        self._root_prefix = re.compile(r"(?<![\w.~-])" + pattern + "/")
        self._loader = loader
        self._policy = version_policy
        self._on_change = on_change
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, VersionStatus]] = {}
        self._name_locks: dict[str, threading.Lock] = {}

    # -- disk ----------------------------------------------------------------------------------

    def public_text(self, message: str) -> str:
        """`message` as a caller may see it: paths inside the repository made relative to it."""
        return self._root_prefix.sub("", message)

    def discover(self) -> dict[str, list[int]]:
        """Models on disk (or in the index by URL) and their version numbers (ascending),
        without loading anything."""
        return self._layout.models()

    def _known_names(self) -> list[str]:
        with self._lock:
            names = set(self._table)
        return sorted(names)

    def unknown_model(self, name: str, detail: str = "") -> NotFoundError:
        """NOT_FOUND for a model that is not in the repository, naming up to
        MAX_KNOWN_NAMED models it has (loaded or failed)."""
        return NotFoundError(f"unknown model '{clip(name)}'{detail} "
                             f"({_known(self._known_names())})")

    def _model_versions(self, name: str) -> list[int]:
        """The versions of `name` found now; NOT_FOUND when it is no model of the repository."""
        check_name(name)
        found = self._layout.models()
        if name not in found:
            where = ("" if self.single_model is not None
                     else f": no directory {clip(name)}/ in the repository")
            with self._lock:
                names = sorted(set(self._table) | set(found))
            raise NotFoundError(f"unknown model '{clip(name)}'{where} ({_known(names)})")
        return found[name]

    # -- state ---------------------------------------------------------------------------------

    def _set(self, status: VersionStatus) -> None:
        with self._lock:
            self._table.setdefault(status.name, {})[status.version] = status
        if self._on_change is not None:
            try:
                self._on_change(status)
            except Exception:  # observers (metrics) must never break loading
                log.exception("repository change hook failed")

    def _name_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._name_locks.setdefault(name, threading.Lock())

    def load_all(self) -> list[VersionStatus]:
        """Load every model on disk per the version policy; failures are recorded, not raised."""
        for name in self.discover():
            try:
                self.load(name)
            except ProtocolError as exc:
                log.warning("model not loaded", extra={"fields": {"model": name,
                                                                  "reason": exc.message}})
        return self.index()

    def load(self, name: str) -> list[VersionStatus]:
        """(Re)load `name` from disk per the version policy; versions it no longer selects go.

        Raises NotFoundError for an unknown model and LoadError (FAILED_PRECONDITION) naming
        the version and the reason if any selected version failed; the others still load.
        """
        self._model_versions(name)  # NOT_FOUND before a per-name lock exists
        with self._name_lock(name):
            on_disk = self._model_versions(name)
            if not on_disk:
                raise _load_error(f"model '{name}' has no version directories (e.g. {name}/1/)")
            wanted = on_disk if self._policy == "all" else on_disk[-1:]
            failures: list[str] = []
            for version in wanted:
                status = self._load_version(name, version)
                if status.state != READY or status.reason:
                    failures.append(f"version {version}: {status.reason}")
            with self._lock:
                stale = [v for v in self._table.get(name, {}) if v not in wanted]
            for version in stale:
                self._set(VersionStatus(name, version, UNAVAILABLE, "unloaded: not selected by "
                                        f"the '{self._policy}' version policy"))
            if failures:
                raise _load_error(f"model '{name}' failed to load: " + "; ".join(failures))
            return self.statuses(name)

    def _load_version(self, name: str, version: int) -> VersionStatus:
        previous = self.status(name, version)
        serving = previous.model if previous and previous.state == READY else None
        if serving is None:
            self._set(VersionStatus(name, version, LOADING))
        rel = self._layout.rel(name, version)
        fields = {"model": name, "version": version,
                  "path": self.location.display(rel) if rel else str(self.location)}
        log.info("loading model", extra={"fields": fields})
        try:
            model = self._loader(name, version, self._layout.artifact(name, version))
        except ProtocolError as exc:
            reason = exc.message
        except Exception as exc:  # an unexpected loader failure is still just this version's
            log.exception("unexpected error loading model", extra={"fields": fields})
            reason = f"unexpected error: {type(exc).__name__}: {exc}"
        else:
            status = VersionStatus(name, version, READY, model=model)
            self._set(status)
            log.info("model ready", extra={"fields": {**fields, "seconds": model.load_seconds}})
            return status
        log.warning("model failed to load", extra={"fields": {**fields, "reason": reason}})
        reason = self.public_text(reason)
        if serving is not None:
            status = VersionStatus(name, version, READY, f"reload failed, previous load still "
                                   f"serving: {reason}", serving)
        else:
            status = VersionStatus(name, version, UNAVAILABLE, reason)
        self._set(status)
        return status

    def unload(self, name: str) -> list[VersionStatus]:
        """Stop serving every version of `name` (in-flight requests finish on their copy)."""
        check_name(name)
        with self._lock:
            known = name in self._table
        if not known and not self._layout.has_model(name):
            # Before taking a per-name lock: one is kept per name, so a caller unloading
            # made-up names must not grow that table.
            raise self.unknown_model(name, ": nothing to unload")
        with self._name_lock(name):
            with self._lock:
                versions = list(self._table.get(name, {}))
            if not versions:
                if self._layout.has_model(name):
                    return []
                raise self.unknown_model(name, ": nothing to unload")
            for version in versions:
                self._set(VersionStatus(name, version, UNAVAILABLE, "unloaded"))
            log.info("model unloaded", extra={"fields": {"model": name}})
            return self.statuses(name)

    # -- queries -------------------------------------------------------------------------------

    def status(self, name: str, version: int) -> VersionStatus | None:
        """The recorded status of one version, if any."""
        with self._lock:
            return self._table.get(name, {}).get(version)

    def statuses(self, name: str) -> list[VersionStatus]:
        """Recorded statuses of every version of `name`, ascending."""
        with self._lock:
            table = self._table.get(name, {})
            return [table[v] for v in sorted(table)]

    def get(self, name: str, version: str = "") -> Model:
        """The ready model for a request: `version` "" means the highest ready version.

        NOT_FOUND for an unknown model or version; UNAVAILABLE (with the reason) for a known
        one that is not ready (loading, failed, unloaded).
        """
        check_name(name)
        number = version_number(name, version)
        with self._lock:
            table = dict(self._table.get(name, {}))
        if not table:
            if self._layout.has_model(name):
                raise UnavailableError(f"model '{name}' is not loaded; load it first")
            raise self.unknown_model(name)
        if number is None:
            ready = [s for v, s in sorted(table.items()) if s.state == READY]
            if not ready:
                latest = table[max(table)]
                raise UnavailableError(
                    f"model '{name}' has no ready version (version {latest.version} is "
                    f"{latest.state}{': ' + latest.reason if latest.reason else ''})"
                )
            return ready[-1].model  # type: ignore[return-value]
        if number not in table:
            if self._layout.has_version(name, number):
                raise UnavailableError(
                    f"model '{name}' version {version} is not loaded (version policy "
                    f"'{self._policy}'); loaded: {', '.join(str(v) for v in sorted(table))}"
                )
            known = ", ".join(str(v) for v in sorted(table))
            raise NotFoundError(f"model '{name}' has no version '{version}' (known: {known})")
        status = table[number]
        if status.state != READY or status.model is None:
            reason = f": {status.reason}" if status.reason else ""
            raise UnavailableError(
                f"model '{name}' version {version} is {status.state}{reason}"
            )
        return status.model

    def is_ready(self, name: str, version: str = "") -> bool:
        """ModelReady: False for a known model that cannot serve; NOT_FOUND if unknown."""
        try:
            self.get(name, version)
        except UnavailableError:
            return False
        return True

    def ready_models(self) -> list[Model]:
        """Every model version currently serving."""
        with self._lock:
            return [s.model for t in self._table.values() for s in t.values()
                    if s.state == READY and s.model is not None]

    def index(self, ready_only: bool = False) -> list[VersionStatus]:
        """Every model version on disk or in the table, with its state and reason."""
        disk = self.discover()
        with self._lock:
            table = {n: dict(t) for n, t in self._table.items()}
        out: list[VersionStatus] = []
        for name in sorted(set(disk) | set(table)):
            known = table.get(name, {})
            if not known and not disk.get(name):
                # Listed with version 0 (shown as "") so the operator sees why it is not served.
                if not ready_only:
                    out.append(VersionStatus(name, 0, UNAVAILABLE,
                                             f"no version directories (expected {name}/1/ ...)"))
                continue
            for version in sorted(set(disk.get(name, [])) | set(known)):
                status = known.get(version) or VersionStatus(name, version, UNAVAILABLE,
                                                             "not loaded")
                if not ready_only or status.state == READY:
                    out.append(status)
        return out
