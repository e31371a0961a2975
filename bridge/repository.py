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
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.paths import resolve_inside
from jaxport.bridge.loading import LoadError
from jaxport.bridge.model import Model
from jaxport.protocol.errors import NotFoundError, ProtocolError, UnavailableError, clip

log = logging.getLogger("jaxport.bridge.repository")

READY = "READY"
LOADING = "LOADING"
UNAVAILABLE = "UNAVAILABLE"

POLICIES = ("latest", "all")

Loader = Callable[[str, int, Path], Model]
"""`loader(name, version, artifact_dir) -> Model`; raises LoadError (or anything) on refusal."""


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


class Repository:
    """Thread-safe table of model versions and their state, fed from the repository directory."""

    def __init__(
        self,
        root: Path,
        loader: Loader,
        *,
        version_policy: str = "latest",
        on_change: Callable[[VersionStatus], None] | None = None,
    ) -> None:
        if version_policy not in POLICIES:
            raise ValueError(f"version policy must be one of {POLICIES}, got {version_policy!r}")
        self.root = Path(root)
        # The repository directory as it can appear in messages (as given, absolute, resolved;
        # longest first, optionally as a file:// URL): wire-visible reasons drop it.
        forms = sorted({str(self.root), str(self.root.absolute()), str(self.root.resolve())},
                       key=len, reverse=True)
        self._root_prefix = re.compile(
            r"(?<![\w.~-])(?:file://)?(?:" + "|".join(re.escape(f.rstrip("/")) for f in forms)
            + ")/"
        )
        self._loader = loader
        self._policy = version_policy
        self._on_change = on_change
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, VersionStatus]] = {}
        self._name_locks: dict[str, threading.Lock] = {}

    # -- disk ----------------------------------------------------------------------------------

    def _check_inside(self, rel: str) -> None:
        """Refuse `ROOT/rel` unless it stays inside the repository (the one path rule of
        `jaxport.artifact.paths`: symlinks followed)."""
        try:
            resolve_inside(self.root, rel, f"'{rel}'")
        except ArtifactError:
            path = self.root / rel
            log.warning("path outside the repository",
                        extra={"fields": {"path": str(path), "target": str(path.resolve())}})
            raise LoadError(f"'{rel}' resolves outside the repository; refused") from None

    def public_text(self, message: str) -> str:
        """`message` as a caller may see it: paths inside the repository made relative to it."""
        return self._root_prefix.sub("", message)

    def discover(self) -> dict[str, list[int]]:
        """Models on disk and their version numbers (ascending), without loading anything."""
        found: dict[str, list[int]] = {}
        if not self.root.is_dir():
            return found
        for entry in sorted(self.root.iterdir()):
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            found[entry.name] = self._versions_on_disk(entry)
        return found

    @staticmethod
    def _versions_on_disk(model_dir: Path) -> list[int]:
        versions = []
        for v in model_dir.iterdir():
            if _VERSION.fullmatch(v.name) and v.is_dir():
                versions.append(int(v.name))
        return sorted(versions)

    def _model_dir(self, name: str) -> Path:
        check_name(name)
        path = self.root / name
        if not path.is_dir():
            raise NotFoundError(
                f"unknown model '{clip(name)}': no directory {clip(name)}/ in the repository")
        return path

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
        model_dir = self._model_dir(name)
        with self._name_lock(name):
            on_disk = self._versions_on_disk(model_dir)
            if not on_disk:
                raise LoadError(f"model '{name}' has no version directories (e.g. {name}/1/)")
            wanted = on_disk if self._policy == "all" else on_disk[-1:]
            failures: list[str] = []
            for version in wanted:
                status = self._load_version(name, version, model_dir / str(version))
                if status.state != READY or status.reason:
                    failures.append(f"version {version}: {status.reason}")
            with self._lock:
                stale = [v for v in self._table.get(name, {}) if v not in wanted]
            for version in stale:
                self._set(VersionStatus(name, version, UNAVAILABLE, "unloaded: not selected by "
                                        f"the '{self._policy}' version policy"))
            if failures:
                raise LoadError(f"model '{name}' failed to load: " + "; ".join(failures))
            return self.statuses(name)

    def _load_version(self, name: str, version: int, path: Path) -> VersionStatus:
        previous = self.status(name, version)
        serving = previous.model if previous and previous.state == READY else None
        if serving is None:
            self._set(VersionStatus(name, version, LOADING))
        fields = {"model": name, "version": version, "path": str(path)}
        log.info("loading model", extra={"fields": fields})
        try:
            self._check_inside(f"{name}/{version}")
            model = self._loader(name, version, path)
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
        if not known and not (self.root / name).is_dir():
            # Before taking a per-name lock: one is kept per name, so a caller unloading
            # made-up names must not grow that table.
            raise NotFoundError(f"unknown model '{clip(name)}': nothing to unload")
        with self._name_lock(name):
            with self._lock:
                versions = list(self._table.get(name, {}))
            if not versions:
                if (self.root / name).is_dir():
                    return []
                raise NotFoundError(f"unknown model '{clip(name)}': nothing to unload")
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
            if (self.root / name).is_dir():
                raise UnavailableError(f"model '{name}' is not loaded; load it first")
            raise NotFoundError(f"unknown model '{clip(name)}'")
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
            if (self.root / name / version).is_dir():
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
