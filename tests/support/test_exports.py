"""The tests' export cache (support.exports): an entry is made once and shared, by this process
and by others; a change in its sources is a new entry that drops the old generation; an entry
changed after it was made is made again, with a warning; an export that fails leaves nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import exports

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(exports.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def writer(calls: list[Path]):
    def make(out: Path) -> None:
        calls.append(out)
        out.mkdir()
        (out / "model.txt").write_text("made")
    return make


def test_an_entry_is_made_once_and_shared(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.py"
    source.write_text("v = 1\n")
    calls: list[Path] = []
    first = exports.exported("m", writer(calls), sources=[source], options={"goldens": 1})
    again = exports.exported("m", writer(calls), sources=[source], options={"goldens": 1})
    assert first == again and len(calls) == 1
    assert first.parent == root and (first / "model.txt").read_text() == "made"
    other = exports.exported("m", writer(calls), sources=[source], options={"goldens": 2})
    assert other != first and len(calls) == 2  # the options are part of the key
    assert not first.exists()  # one generation per name


def test_a_changed_source_is_a_new_entry_and_drops_the_old_one(root: Path,
                                                               tmp_path: Path) -> None:
    source = tmp_path / "model.py"
    source.write_text("v = 1\n")
    calls: list[Path] = []
    old = exports.exported("m", writer(calls), sources=[source])
    kept = exports.exported("m-2", writer(calls), sources=[source])  # another name: kept
    source.write_text("v = 2\n")
    exports._file_digest.cache_clear()
    new = exports.exported("m", writer(calls), sources=[source])
    assert new != old and len(calls) == 3
    assert not old.exists() and not (root / f".{old.name}.fingerprint").exists()
    assert not (root / f".{old.name}.lock").exists()
    assert kept.exists() and new.exists()
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(
        [kept.name, new.name])


def test_an_entry_changed_after_it_was_made_is_made_again(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.py"
    source.write_text("v = 1\n")
    calls: list[Path] = []
    entry = exports.exported("m", writer(calls), sources=[source])
    (entry / "model.txt").write_text("changed by a test that should have copied it")
    with pytest.warns(UserWarning, match=f"{entry} was changed after it was made"):
        again = exports.exported("m", writer(calls), sources=[source])
    assert again == entry and len(calls) == 2
    assert (entry / "model.txt").read_text() == "made"
    copy = exports.copy_of(entry, tmp_path / "mine")
    (copy / "model.txt").write_text("mine")
    assert exports.exported("m", writer(calls), sources=[source]) == entry and len(calls) == 2


def test_a_failed_export_leaves_nothing(root: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.py"
    source.write_text("v = 1\n")

    def fails(out: Path) -> None:
        out.mkdir()
        (out / "half.txt").write_text("half")
        raise RuntimeError("export failed: model 'm'")

    with pytest.raises(RuntimeError, match="export failed: model 'm'"):
        exports.exported("m", fails, sources=[source])
    assert [p for p in root.iterdir() if not p.name.endswith(".lock")] == []


CHILD = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from support import exports

def make(out):
    with open(sys.argv[3], "a") as log:
        log.write(f"{os.getpid()}\\n")
    out.mkdir()
    (out / "model.txt").write_text("made")

print(json.dumps(str(exports.exported("m", make, sources=[Path(sys.argv[2])]))))
"""


def test_processes_at_once_export_once(root: Path, tmp_path: Path) -> None:
    """Three processes ask for the same entry at the same time: one exports, all get it (in
    whatever order the processes reach the lock)."""
    source = tmp_path / "model.py"
    source.write_text("v = 1\n")
    log = tmp_path / "exports.log"
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(TESTS), str(source), str(log)],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    paths = {json.loads(o) for o in outs}
    assert len(paths) == 1 and len(log.read_text().splitlines()) == 1, (paths, log.read_text())
