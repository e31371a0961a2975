"""The tests' export cache: each test model is exported once and shared by every test
directory and both pytest-xdist processes (and by the next run while nothing it depends on
changed).

    from support.exports import exported
    path = exported("mlp", lambda out: export(fn, params, specs, out, quiet=True),
                    sources=[Path(models.__file__)], options={"goldens": 2})

An entry is `<root>/<name>-<key>/`, where the key is a sha256 over
- the entry's name and `options` (the export options, as canonical JSON: every option that
  changes the artifact must be in it),
- the text of each file in `sources` (the model's code, and the module holding its export
  call),
- the text of every Python file of the exporter and of `jaxport.artifact` (what writes the
  artifact), and the versions of jax, jaxlib, numpy and tensorstore.
The root is JAXPORT_TEST_EXPORTS (tests/tiers.py sets it) or build/test-exports.

Safe under concurrency: the first process to need an entry takes its file lock
(`fcntl.flock`), exports into a temporary directory beside it and renames that into place
(atomic), so another process either waits on the lock or sees the finished directory, never a
half-written one. An export that raises leaves nothing behind.

Entries are shared and READ-ONLY: a test that changes an artifact copies it first (`copy_of`).
Each entry records the path, size and mtime of every file it holds (`.fingerprint` beside it);
an entry found changed is exported again, with a warning naming it.

An entry made anew replaces the entries of the same name under other keys (what earlier
sources made): the cache holds one generation per name, not one per edit. So a name stands for
one thing: two entries wanted in the same run need names of their own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from types import ModuleType

__all__ = ["ENV", "cache_root", "conformance_suite", "copy_of", "entry_key", "exported",
           "suite_models"]

REPO = Path(__file__).resolve().parents[2]
ENV = "JAXPORT_TEST_EXPORTS"
#: What writes an artifact besides the model: a change in any of these files is a new key.
WRITERS = (REPO / "exporter", REPO / "clients" / "python" / "artifact")
VERSIONED = ("jax", "jaxlib", "numpy", "tensorstore")
#: The conformance suite's models (the one definition every runner, make conformance and the
#: Ray/KServe and REST tests serve).
SUITE_MODELS = REPO / "tests" / "conformance" / "models.py"


def cache_root() -> Path:
    """Where entries live (created on first use)."""
    root = Path(os.environ.get(ENV) or REPO / "build" / "test-exports")
    root.mkdir(parents=True, exist_ok=True)
    return root


@cache
def _writers_digest() -> str:
    h = hashlib.sha256()
    for top in WRITERS:
        for path in sorted(top.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    for dist in VERSIONED:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{dist}={version}\0".encode())
    return h.hexdigest()


@cache
def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry_key(name: str, sources: Iterable[Path], options: Mapping[str, object]) -> str:
    """The key of an entry (see the module doc): 16 hex digits."""
    h = hashlib.sha256()
    h.update(name.encode() + b"\0")
    h.update(json.dumps(options, sort_keys=True, default=repr).encode() + b"\0")
    for path in sorted({Path(p).resolve() for p in sources}):
        h.update(str(path).encode() + b"\0" + _file_digest(path).encode() + b"\0")
    h.update(_writers_digest().encode())
    return h.hexdigest()[:16]


def _fingerprint(entry: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(entry.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(entry)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _intact(final: Path) -> bool:
    stamp = final.parent / f".{final.name}.fingerprint"
    return final.is_dir() and stamp.exists() and stamp.read_text() == _fingerprint(final)


def exported(name: str, export: Callable[[Path], object], *, sources: Iterable[Path],
             options: Mapping[str, object] | None = None) -> Path:
    """The cached artifact (or repository, or any directory) `export(out)` writes into `out`,
    made once under the entry's lock; its path."""
    if os.sep in name or not name:
        raise ValueError(f"entry name {name!r}: one path component")
    root = cache_root()
    final = root / f"{name}-{entry_key(name, sources, options or {})}"
    if _intact(final):
        return final
    with open(root / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _intact(final):  # made by another process while this one waited
            return final
        if final.exists():
            warnings.warn(f"export cache: {final} was changed after it was made (a test must "
                          "copy an entry before changing it: support.exports.copy_of); "
                          "exporting it again", stacklevel=2)
            shutil.rmtree(final)
        tmp = root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            export(tmp / "out")
            fingerprint = _fingerprint(tmp / "out")
            (tmp / "out").rename(final)
            (root / f".{final.name}.fingerprint").write_text(fingerprint)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _drop_other_generations(root, name, final)
    return final


def _drop_other_generations(root: Path, name: str, keep: Path) -> None:
    """Remove the entries of `name` under keys other than `keep`'s, each under its own lock
    (one another process is making right now is left alone)."""
    for entry in root.glob(f"{name}-*"):
        key = entry.name[len(name) + 1:]
        if entry == keep or len(key) != 16 or any(c not in "0123456789abcdef" for c in key):
            continue
        lock_path = root / f".{entry.name}.lock"
        with open(lock_path, "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            (root / f".{entry.name}.fingerprint").unlink(missing_ok=True)
            lock_path.unlink(missing_ok=True)


def copy_of(entry: Path, dest: Path) -> Path:
    """A private copy of a cached entry at `dest`, for a test that changes it."""
    return Path(shutil.copytree(entry, dest, symlinks=True))


def suite_models() -> ModuleType:
    """tests/conformance/models.py, loaded by path (other suites have a `models` module too).
    Relative import: this module is `support.exports` under pytest and `tests.support.exports`
    under tests/conformance/run.py."""
    from .modules import load

    return load("jaxport_conformance_suite_models", SUITE_MODELS)


def _export_suite(repository: Path) -> None:
    models = suite_models()
    for model in models.suite_models():
        models.export_model(model, repository / model.name / "1")


def conformance_suite() -> Path:
    """Every conformance suite model as `<name>/1/` (the repository make conformance serves),
    exported once per run (read-only: copy_of it to change it)."""
    return exported("conformance-suite", _export_suite, sources=[SUITE_MODELS])
