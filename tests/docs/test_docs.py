"""The docs check (docs_check.py) on this checkout, and proof that it fails where it should: on
a copy of the docs broken on purpose, one mistake of each kind.

The check runs the real `jaxport ... --help` (subprocesses, one per command path, shared by
the tests of this file through `help_of`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import docs_check

REPO = docs_check.REPO

#: Findings in files whose owner is rewriting them right now, by file: (owner, why, the
#: findings' texts). Each entry must still match a finding (a fixed one fails the test until
#: it is removed here). Empty since the onesrv merge: every finding is fixed where it is
#: written; an entry is for a doc someone else is mid-rewrite on, and names who and why.
KNOWN_PENDING: dict[str, tuple[str, str, tuple[str, ...]]] = {}


@pytest.fixture(scope="module")
def help_of() -> docs_check.HelpCache:
    return docs_check.HelpCache()


def _pending(finding: docs_check.Finding) -> bool:
    owner = KNOWN_PENDING.get(finding.path)
    return owner is not None and any(text in finding.message for text in owner[2])


def test_the_docs_of_this_checkout(help_of: docs_check.HelpCache) -> None:
    findings = docs_check.check(REPO, help_of)
    assert [str(f) for f in findings if not _pending(f)] == []
    stale = [(path, text) for path, (_, _, texts) in KNOWN_PENDING.items() for text in texts
             if not any(f.path == path and text in f.message for f in findings)]
    assert stale == [], "fixed: remove these from KNOWN_PENDING"


def test_every_help_the_docs_need_is_read(help_of: docs_check.HelpCache) -> None:
    """The commands the docs use are parsed from real help, subcommands included."""
    top = help_of(())
    assert isinstance(top, docs_check.Help) and top.subcommands is not None
    assert {"export", "verify", "serve", "infer", "model"} <= top.subcommands
    for path, flag in [(("export",), "--batch-sizes"), (("verify",), "--checks"),
                       (("serve",), "--repository"), (("infer",), "--url"),
                       (("model", "list"), "--ready")]:
        info = help_of(path)
        assert isinstance(info, docs_check.Help) and flag in info.flags, (path, info)
    model = help_of(("model",))
    assert isinstance(model, docs_check.Help) and model.subcommands == {"list", "load", "unload"}


def _tree(root: Path) -> Path:
    """A small checkout: a Go module in clients/go with one command, 3 conformance cases."""
    (root / "clients" / "go" / "cmd" / "tool").mkdir(parents=True)
    (root / "clients" / "go" / "go.mod").write_text("module example.com/go\n\ngo 1.22\n")
    (root / "clients" / "go" / "cmd" / "tool" / "main.go").write_text(
        "package main\n\nfunc main() {}\n")
    (root / "tests" / "conformance" / "cases").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / "tests" / "conformance" / "cases" / f"{name}.json").write_text("{}")
    (root / "docs").mkdir()
    return root


GOOD = """\
# Fine

| tier | command | what | time |
|---|---|---|---:|
| fast | `make test` | lint, tests | 12.6 min (753 s) |

```sh
make test   # the fast tier (12.6 min here)
jaxport export mymodel:predict --params mymodel:init --input x:float32[4,8] --out repo/m/1 \\
    --batch-sizes 1,4 --quiet
JAXPORT_ENGINE=pjrt jaxport serve --repository repo   # env, comment: ignored
jaxport model list --url HOST:PORT [--ready] [--json]
jaxport verify: OK (repo/m/1)
cd clients/go && go install ./cmd/tool
```

```console
$ jaxport verify repo/m/1 --quiet
jaxport modle is output here, not a command
```

The conformance suite has 3 cases (its rank-0 cases and the fp32 cases among them); `go -C
clients/go run ./cmd/tool` builds. `--workers N` (default 1) and `--port` (default 8001) are
serve's. `make bench` (about 8 min) is long.
"""

BROKEN = {
    "unknown subcommand": ("jaxport exprt m:f --out o",
                           "`jaxport` has no subcommand 'exprt'"),
    "unknown nested subcommand": ("jaxport model lst --url H:P",
                                  "`jaxport model` has no subcommand 'lst'"),
    "unknown flag": ("jaxport export m:f --parms m:init --out o",
                     "`jaxport export` has no flag --parms"),
    "flag of another command": ("jaxport infer --url H:P --ready",
                                "`jaxport infer` has no flag --ready"),
    "go install without a module": ("go install ./clients/go/cmd/tool",
                                    "does not resolve: no go.mod or go.work at or above the "
                                    "root (go: cannot find main module)"),
    "go run of nothing": ("cd clients/go && go run ./cmd/nope",
                          "does not resolve: no directory clients/go/cmd/nope"),
}


def _doc(root: Path, shell: str, prose: str = "") -> Path:
    doc = root / "docs" / "guide.md"
    doc.write_text(f"# Guide\n\n```sh\n{shell}\n```\n\n{prose}\n")
    return doc


def test_a_correct_doc_has_no_finding(tmp_path: Path, help_of: docs_check.HelpCache) -> None:
    root = _tree(tmp_path)
    (root / "README.md").write_text(GOOD)
    assert docs_check.check(root, help_of) == []


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_command_is_found(tmp_path: Path, help_of: docs_check.HelpCache,
                                   kind: str) -> None:
    root = _tree(tmp_path)
    (root / "README.md").write_text(GOOD)
    shell, want = BROKEN[kind]
    _doc(root, f"# a comment\n{shell}   # with a comment")
    findings = docs_check.check(root, help_of)
    assert len(findings) == 1, findings
    assert (findings[0].path, findings[0].line) == ("docs/guide.md", 5)
    assert want in findings[0].message, findings[0]


@pytest.mark.parametrize(("prose", "want"), [
    ("The suite's runners pass all 79 cases of the conformance suite.",
     "'79 cases': the conformance suite has 3 cases"),
    ("Conformance through the proxy: 2/2 each.", "'2/2 each': the conformance suite has 3"),
    ("Run `make test` (6.1-6.4 min here) first.",
     "`make test` takes 6.1-6.4 min here but 12.6 min in the tier table, README.md:5"),
    ("`make bench` is long: it took ~75 s on this machine.",
     "`make bench` takes ~75 s here but 8 min in README.md:24"),
    ("The server listens on `--port P` (default 8000) for gRPC.",
     "--port: default 8000 here, but its --help says (default: 8001)"),
    ("Last run: KServe 44 passed / 11 failed / 30 N/A.",
     "'KServe 44 passed': other servers' conformance results are written"),
    ("Last run: MLServer 35 / 27 / 23 N/A.",
     "'MLServer 35 / 27': other servers' conformance results are written"),
    ("The Go runner: `go install ./clients/go/cmd/tool` from the root.",
     "`go install ./clients/go/cmd/tool` does not resolve: no go.mod or go.work"),
])
def test_numbers_and_paths_in_prose(tmp_path: Path, help_of: docs_check.HelpCache,
                                    prose: str, want: str) -> None:
    root = _tree(tmp_path)
    (root / "README.md").write_text(GOOD)
    _doc(root, "jaxport verify repo/m/1", prose)
    findings = docs_check.check(root, help_of)
    assert [f.message for f in findings if want in f.message] and len(findings) == 1, findings


def test_fails_on_a_broken_copy_of_this_checkouts_docs(
        tmp_path: Path, help_of: docs_check.HelpCache,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The real docs, copied with one mistake of each kind put in: the command (its main,
    sharing this file's help) exits 1 and names each, beyond what it finds in the checkout."""
    root = tmp_path / "copy"
    for doc in docs_check.doc_files(REPO):
        target = root / doc.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(doc, target)
    shutil.copytree(REPO / "tests" / "conformance" / "cases", root / "tests" / "conformance"
                    / "cases")
    shutil.copytree(REPO / "clients" / "go", root / "clients" / "go",
                    ignore=shutil.ignore_patterns("*_test.go", "gen"), dirs_exist_ok=True)
    readme = root / "README.md"
    text = readme.read_text()
    assert "jaxport verify repo/mymodel/1\n" in text
    text = text.replace("jaxport verify repo/mymodel/1\n",
                        "jaxport verify repo/mymodel/1 --require-ire\n", 1)
    text += ("\n```sh\njaxport modle list --url HOST:PORT\n"
             "go install ./clients/go/cmd/jaxport-conformance\n```\n\n"
             "The conformance suite's 79 cases pass; `make test` (3 min) is quick.\n")
    readme.write_text(text)
    assert docs_check.main([str(root)], help_of) == 1
    out = capsys.readouterr().out
    for want in ("`jaxport verify` has no flag --require-ire",
                 "`jaxport` has no subcommand 'modle'",
                 "README.md:", "`go install ./clients/go/cmd/jaxport-conformance` does not "
                 "resolve: no go.mod or go.work at or above the root",
                 "'79 cases': the conformance suite has", "`make test` takes 3 min here but"):
        assert want in out, (want, out)
