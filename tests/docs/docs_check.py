#!/usr/bin/env python3
"""The docs check: what README.md, docs/*.md and clients/*/README.md tell a user to type must
work, and a number they quote twice must be the same number.

    .venv/bin/python tests/docs/docs_check.py [ROOT]     # one line per finding; exit 1 if any

1. Commands. Every fenced shell block (```sh/bash/shell/console or unlabeled) is read line by
   line (`\\` continuations joined, `$ ` prompts and `# comments` dropped, output lines such as
   `jaxport verify: OK` skipped). Each simple command that runs `jaxport` (after `&&`, `;`,
   `|`, environment assignments, `exec`/`sudo`/`time`/`nice -n N`) is parsed against the
   real `jaxport ... --help`, run as a subprocess: every subcommand must exist (`jaxport
   model list`, `jaxport pjrt install cpu`) and every flag must be in the help of the deepest
   subcommand. Help is whatever the installed command prints: `jaxport serve --help` is the
   server's own (the Go front's, which `jaxport serve` execs), never an imported Settings.
   Placeholders (`...`, `<NAME>`, `[--FLAG VALUE]`) are not flags.
2. Go paths. Every `go install` / `go run` of a local path (`./...`), in a fenced block or an
   inline code span, must name a directory of Go files that `go` resolves from where the doc
   runs it: the directory of a `cd DIR &&` / `-C DIR` before it, else the checkout's root or
   the doc's own directory; the package must be in the main module found there (the nearest
   go.mod at or above it) or in a module of a go.work there. A path that only exists, with no
   module to build it in, fails as `go` fails ("cannot find main module").
3. Numbers quoted twice. (a) The conformance suite's case count: a paragraph about the suite
   that says "N cases" (or "N-case", "N/N each") must say the number of case files in
   tests/conformance/cases/. (b) The wall time of a make target (`make test`, `make
   test-all`, `.ci/run`, `make test-scale`, ...): quoted in the README's tier table for the
   tiers, and anywhere else only if it agrees with every other quote of the same target
   (ranges overlapping within 5%); a time is attributed to a target when it opens the
   parenthesis right after it ("`make test-scale` (about 2 min"), sits in the `# comment` of
   a fenced `make X` line, or follows "took"/"takes"/"about"/"~" in a clause whose first
   target it is. (c) Other servers' conformance results (Triton, KServe, MLServer: "44 passed",
   "35 / 27 / 23") are quoted in docs/conformance-report.md only, which `make
   conformance-peers` writes; elsewhere they go stale, so docs refer to the report. (d) A
   numeric default quoted in prose ("`--workers N` (default 2)") is the one the command's
   --help states ("(default: 2)"), for the flags of export, verify, serve, infer and model.

A finding is fixed where it is written. test_docs.py's KNOWN_PENDING (empty since the
one-server merge) may name, with its owner, a finding in a doc someone is rewriting right now.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JAXPORT = Path(sys.executable).parent / "jaxport"

__all__ = ["Finding", "HelpCache", "check", "doc_files", "main"]


@dataclass(frozen=True, order=True)
class Finding:
    """One problem: where (repo-relative path, 1-based line) and what."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def doc_files(root: Path) -> list[Path]:
    """The docs a user reads: README.md, docs/*.md, clients/*/README.md."""
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "clients").glob("*/README.md"))]
    return [f for f in files if f.is_file()]


# --- markdown -------------------------------------------------------------------------------

SHELL_LANGS = {"", "sh", "bash", "shell", "console", "zsh", "shell-session"}
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass
class Block:
    """A fenced code block: its info string and (line number, text) of each line."""

    lang: str
    lines: list[tuple[int, str]] = field(default_factory=list)


def split_markdown(text: str) -> tuple[list[Block], list[tuple[int, str]]]:
    """(fenced blocks, prose lines outside them)."""
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(2)
                blocks.append(Block(m.group(3).lower()))
            else:
                prose.append((number, line))
        elif m and m.group(2)[0] == fence[0] and len(m.group(2)) >= len(fence) \
                and not m.group(3):
            fence = None
        else:
            blocks[-1].lines.append((number, line))
    return blocks, prose


def shell_lines(block: Block) -> Iterator[tuple[int, str, str]]:
    """(line number, command text, comment) of a shell block: continuations joined, prompts
    stripped; in a console transcript (```console) only the `$ ` lines are commands, the
    rest is their output."""
    transcript = block.lang in ("console", "shell-session")
    pending: list[str] = []
    first = 0
    for number, raw in block.lines:
        line = raw.strip()
        if not pending:
            first = number
            if line.startswith("$ "):
                line = line[2:]
            elif transcript:
                continue
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        text = " ".join(pending)
        pending = []
        command, comment = _split_comment(text)
        yield first, command, comment


def _split_comment(text: str) -> tuple[str, str]:
    """`cmd  # comment` -> (cmd, comment); a `#` inside quotes or a word is not a comment."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i], text[i + 1:].strip()
    return text, ""


_SEPARATORS = {"&&", "||", ";", "|", "(", ")", "&", ";;"}
_WRAPPERS = {"exec", "sudo", "time", "env", "nohup", "command"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def tokens(text: str) -> list[str]:
    """Shell words and operators of `text` (quotes removed); whitespace split when the text
    is not shell (an unbalanced quote in prose)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return text.split()


def simple_commands(text: str) -> Iterator[list[str]]:
    """Each simple command of a line, environment assignments and wrappers removed."""
    current: list[str] = []
    for token in [*tokens(text), ";"]:
        if token in _SEPARATORS or set(token) <= set("&|;()<>"):
            words = current
            current = []
            while words and (_ASSIGNMENT.match(words[0]) or words[0] in _WRAPPERS):
                words = words[1:]
            if len(words) >= 3 and words[0] == "nice" and words[1] == "-n":
                words = words[3:]
            elif words and words[0] == "nice":
                words = words[1:]
            if words:
                yield words
        else:
            current.append(token)


# --- jaxport commands -----------------------------------------------------------------------


@dataclass(frozen=True)
class Help:
    """What one `--help` offers: its flags and, if it has them, its subcommands."""

    flags: frozenset[str]
    subcommands: frozenset[str] | None
    defaults: tuple[tuple[str, str], ...] = ()


_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def parse_help(text: str) -> Help:
    """Flags from the option lines (two spaces, then `-`: argparse's and the Go front's
    layout), subcommands from a `commands:` section (the `jaxport` dispatcher) or argparse's
    `{a,b,c}` positional."""
    flags: set[str] = set()
    subcommands: set[str] | None = None
    section = ""
    described: list[tuple[list[str], list[str]]] = []  # (flags of an option, its help text)
    for line in text.splitlines():
        if line and not line[0].isspace():
            section = line.strip().rstrip(":").lower()
            continue
        m = re.match(r"^ {2}(-\S.*)$", line)
        if m:
            column, *rest = re.split(r"\s{2,}", m.group(1), maxsplit=1)
            names = _FLAG.findall(column)
            flags.update(names)
            described.append((names, rest))
            continue
        if described and line.startswith("   "):
            described[-1][1].append(line.strip())
        choices = re.match(r"^ {2}\{([\w,-]+)\}", line)
        if choices and section.startswith("positional"):
            subcommands = set(choices.group(1).split(","))
            continue
        if section == "commands":
            name = re.match(r"^ {2}([a-z][\w-]*)(?:\s|$)", line)
            if name:
                subcommands = (subcommands or set()) | {name.group(1)}
    defaults = []
    for names, words in described:
        found = re.search(r"\(default: ([^()]*)\)", " ".join(words))
        if found:
            defaults += [(n, found.group(1).strip()) for n in names if n.startswith("--")]
    return Help(frozenset(flags), frozenset(subcommands) if subcommands is not None else None,
                tuple(defaults))


class HelpCache:
    """`jaxport <path> --help`, run once per path."""

    def __init__(self, jaxport: Sequence[str] = (str(JAXPORT),)) -> None:
        self.jaxport = list(jaxport)
        self._cache: dict[tuple[str, ...], Help | str] = {}

    def __call__(self, path: tuple[str, ...]) -> Help | str:
        """The parsed help, or one line saying why it could not be had."""
        if path not in self._cache:
            cmd = [*self.jaxport, *path, "--help"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                                      env={**os.environ, "JAX_PLATFORMS": "cpu"})
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._cache[path] = f"`{' '.join(['jaxport', *path])} --help` failed: {exc}"
            else:
                if done.returncode != 0 or not done.stdout.strip():
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    self._cache[path] = (f"`{' '.join(['jaxport', *path])} --help` exited "
                                         f"{done.returncode}: {tail}")
                else:
                    self._cache[path] = parse_help(done.stdout)
        return self._cache[path]


def _bare(token: str) -> str:
    """A word without the brackets, braces and separators of usage notation."""
    return token.strip("[](){}|,")


def _placeholder(word: str) -> bool:
    return (not word or word.startswith(("<", "$")) or "..." in word
            or any(c.isupper() for c in word) or not re.fullmatch(r"[a-z][\w.-]*", word))


def check_jaxport(words: Sequence[str], help_of: Callable[[tuple[str, ...]], Help | str]
                  ) -> list[str]:
    """What is wrong with `jaxport WORDS...` (empty: nothing)."""
    path: tuple[str, ...] = ()
    info = help_of(path)
    if isinstance(info, str):
        return [info]
    rest = list(words)
    while info.subcommands is not None and rest:
        word = _bare(rest[0])
        if word.startswith("-") or _placeholder(word):
            break
        if word not in info.subcommands:
            where = " ".join(["jaxport", *path])
            return [f"`{where}` has no subcommand {word!r} (it has "
                    f"{', '.join(sorted(info.subcommands))}; see `{where} --help`)"]
        path = (*path, word)
        rest = rest[1:]
        info = help_of(path)
        if isinstance(info, str):
            return [info]
    if not path:
        return []  # `jaxport`, `jaxport --help`, `jaxport <command>`
    where = " ".join(["jaxport", *path])
    problems = []
    for token in rest:
        if token == "--":
            break
        flag = _bare(token).split("=", 1)[0]
        if not re.fullmatch(r"--?[a-z0-9][a-z0-9-]*", flag) or flag.lstrip("-").isdigit():
            continue  # a value, a placeholder (--FLAG), a number
        if flag not in info.flags:
            problems.append(f"`{where}` has no flag {flag} (see `{where} --help`)")
    return problems


def jaxport_invocations(command: str) -> Iterator[list[str]]:
    """The arguments of each `jaxport ...` simple command of a line (none for output lines
    such as `jaxport verify: OK (dir)` or `jaxport front: listening on ...`)."""
    for words in simple_commands(command):
        if Path(words[0]).name != "jaxport":
            continue
        if len(words) > 1 and words[1].endswith(":"):
            continue  # output a jaxport command printed
        yield words[1:]


# --- go install / go run ------------------------------------------------------------------


def _inline_spans(prose: Sequence[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """(line number where it starts, text) of each inline code span; a span may run over a
    line break inside its paragraph, never over a blank line."""
    paragraph: list[tuple[int, str]] = []
    for number, line in [*prose, (0, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        text = "\n".join(line for _, line in paragraph)
        starts = [0]
        for _, line in paragraph:
            starts.append(starts[-1] + len(line) + 1)
        for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
            row = max(i for i, start in enumerate(starts[:-1]) if start <= m.start())
            yield paragraph[row][0], " ".join(m.group(2).split())
        paragraph = []


def go_invocations(text: str) -> Iterator[tuple[str | None, str]]:
    """(directory it runs in, package path) of each `go install`/`go run` of a local path in
    a command line: the directory is a `cd DIR` earlier on the line and/or `-C DIR`."""
    cwd: str | None = None
    for words in simple_commands(text):
        if words[0] == "cd" and len(words) > 1:
            cwd = words[1] if cwd is None else f"{cwd}/{words[1]}"
            continue
        if words[0] != "go" or len(words) < 3 or words[1] not in ("install", "run"):
            continue
        where = cwd
        args = words[2:]
        while args and args[0].startswith("-"):
            if args[0] == "-C" and len(args) > 1:
                where = args[1] if where is None else f"{where}/{args[1]}"
                args = args[2:]
            else:
                args = args[1:]
        if args and args[0].startswith((".", "/")):
            yield where, args[0]


def _up_to(start: Path, root: Path, name: str) -> Path | None:
    """The nearest directory at or above `start`, not above `root`, holding `name`."""
    here = start
    while True:
        if (here / name).is_file():
            return here
        if here == root or root not in here.parents:
            return None
        here = here.parent


def _go_work_uses(work: Path) -> set[Path]:
    text = (work / "go.work").read_text()
    uses: set[Path] = set()
    for m in re.finditer(r"^\s*use\s+(?:\(\s*([^)]*)\)|(\S+))", text, re.M):
        for entry in (m.group(1) or m.group(2)).split():
            uses.add((work / entry.strip('"')).resolve())
    return uses


def go_problem(root: Path, cwd: Path, package: str) -> str | None:
    """Why `go install PACKAGE` run in `cwd` would fail (None: it resolves)."""
    rel = package[:-4] if package.endswith("/...") else package
    target = (cwd / rel).resolve()
    shown = os.path.relpath(target, root)
    if not cwd.is_dir():
        return f"no directory {os.path.relpath(cwd, root)}"
    if not target.is_dir():
        return f"no directory {shown}"
    pattern = "**/*.go" if package.endswith("/...") else "*.go"
    if not any(target.glob(pattern)):
        return f"no Go files in {shown}"
    work = _up_to(cwd, root, "go.work")
    module = _up_to(target, root, "go.mod")
    if work is not None:
        if module is None or module.resolve() not in _go_work_uses(work):
            return f"{shown} is in no module of {os.path.relpath(work, root)}/go.work"
        return None
    main = _up_to(cwd, root, "go.mod")
    where = os.path.relpath(cwd, root)
    if main is None:
        return (f"no go.mod or go.work at or above {'the root' if where == '.' else where} "
                "(go: cannot find main module)")
    if module != main:
        return (f"{shown} is not in the main module of {where} "
                f"({os.path.relpath(main, root)}/go.mod)")
    return None


def check_go(root: Path, doc: Path, cwd: str | None, package: str) -> str | None:
    """None when the path resolves from the checkout's root or the doc's directory (with the
    `cd`/`-C` directory applied); else why, from the root."""
    bases = [root] if doc.parent == root else [root, doc.parent]
    reasons = []
    for base in bases:
        where = base / cwd if cwd else base
        problem = go_problem(root, where, package)
        if problem is None:
            return None
        reasons.append(problem)
    return reasons[0]


# --- numbers --------------------------------------------------------------------------------

_DURATION = re.compile(
    r"(?<![\w.,])(~\s?)?(\d+(?:\.\d+)?)(?:\s?-\s?(\d+(?:\.\d+)?))?\s?(min(?:utes?)?|s|seconds?)"
    r"(?![\w])")
_TARGET = re.compile(r"`?(make [a-z][\w-]*|\.ci/run)`?")
_CUE = re.compile(r"(?:took|takes|taking|lasts|about|~|in)\s*$")


def _seconds(m: re.Match[str]) -> tuple[float, float]:
    scale = 60.0 if m.group(4).startswith("min") else 1.0
    lo = float(m.group(2)) * scale
    hi = float(m.group(3)) * scale if m.group(3) else lo
    return lo, hi


def _agree(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] * 0.95 <= b[1] * 1.05 and b[0] * 0.95 <= a[1] * 1.05


@dataclass(frozen=True)
class Quote:
    path: str
    line: int
    target: str
    text: str
    seconds: tuple[float, float]
    table: bool = False


def _tier_table_quotes(path: str, prose: Sequence[tuple[int, str]]) -> list[Quote]:
    """The README's tier table (`| tier | command | ... |`): each row's command and the first
    time of its last cell; a `;`-clause of that cell naming another target times that one."""
    quotes = []
    in_table = False
    for number, line in prose:
        if re.match(r"^\|\s*tier\s*\|\s*command\s*\|", line):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if not in_table or re.match(r"^\|[\s|:-]+\|$", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        command = _TARGET.search(cells[1]) if len(cells) > 2 else None
        if command is None:
            continue
        for i, clause in enumerate(cells[-1].split(";")):
            named = _TARGET.search(clause)
            target = command.group(1) if i == 0 or named is None else named.group(1)
            duration = _DURATION.search(clause)
            if duration and (i == 0 or named is not None):
                quotes.append(Quote(path, number, target, duration.group(0).strip(),
                                    _seconds(duration), table=True))
    return quotes


def _prose_quotes(path: str, prose: Sequence[tuple[int, str]]) -> list[Quote]:
    quotes = []
    for number, line in prose:
        if line.startswith("|") and re.match(r"^\|\s*(fast|full)\s*\|", line):
            continue  # the tier table (read by _tier_table_quotes)
        consumed: list[tuple[int, int]] = []
        for m in re.finditer(_TARGET.pattern + r"\s*\(([^()]*)\)", line):
            inner = m.group(2)
            duration = _DURATION.search(inner)
            if duration and (duration.start() <= 8 or _CUE.search(inner[:duration.start()])):
                quotes.append(Quote(path, number, m.group(1), duration.group(0).strip(),
                                    _seconds(duration)))
            consumed.append(m.span())
        text = line
        for start, end in reversed(consumed):
            text = text[:start] + " " * (end - start) + text[end:]
        for clause in re.split(r"(?<=[.;])\s", text):
            target = _TARGET.search(clause)
            if target is None:
                continue
            for duration in _DURATION.finditer(clause, target.end()):
                if _CUE.search(clause[:duration.start()]):
                    quotes.append(Quote(path, number, target.group(1),
                                        duration.group(0).strip(), _seconds(duration)))
                    break
    return quotes


def _block_quotes(path: str, blocks: Sequence[Block]) -> list[Quote]:
    quotes = []
    for block in blocks:
        if block.lang not in SHELL_LANGS:
            continue
        for number, command, comment in shell_lines(block):
            target = re.match(r"^\s*(make [a-z][\w-]*|\.ci/run)\b", command)
            duration = _DURATION.search(comment) if target else None
            if target and duration:
                quotes.append(Quote(path, number, target.group(1), duration.group(0).strip(),
                                    _seconds(duration)))
    return quotes


def check_durations(quotes: Sequence[Quote]) -> list[Finding]:
    """Every quote of a target's time agrees with the tier table's (when it has one) and with
    the target's first quote."""
    findings = []
    first: dict[str, Quote] = {}
    for q in sorted(quotes, key=lambda q: (not q.table, q.path != "README.md", q.path, q.line)):
        ref = first.setdefault(q.target, q)
        if ref is q or _agree(ref.seconds, q.seconds):
            continue
        where = "the tier table, " if ref.table else ""
        findings.append(Finding(q.path, q.line, (
            f"`{q.target}` takes {q.text} here but {ref.text} in {where}{ref.path}:{ref.line}: "
            "quote a time once (tiers: README.md's tier table) and refer to it")))
    return findings


_CASES = re.compile(r"(?<![\w,.-])(\d+)(?:[ -]cases?\b|/\1 each\b)")


def check_case_counts(path: str, prose: Sequence[tuple[int, str]], count: int
                      ) -> list[Finding]:
    """"N cases" in a paragraph about the conformance suite is the number of case files."""
    findings = []
    paragraphs: list[list[tuple[int, str]]] = [[]]
    for number, line in prose:
        if not line.strip() or line.startswith("|") or (paragraphs[-1] and
                                                        paragraphs[-1][-1][1].startswith("|")):
            paragraphs.append([])
        if line.strip():
            paragraphs[-1].append((number, line))
    for para in paragraphs:
        text = " ".join(line for _, line in para)
        if not re.search(r"conformance|\bsuite\b", text, re.I) or \
                re.search(r"fuzz|campaign|hostile", text, re.I):
            continue
        for number, line in para:
            for m in _CASES.finditer(line):
                if int(m.group(1)) != count:
                    findings.append(Finding(path, number, (
                        f"{m.group(0)!r}: the conformance suite has {count} cases "
                        "(tests/conformance/cases/*.json); say 'every case' or quote the "
                        "count once and refer to it")))
    return findings


_DEFAULT_QUOTE = re.compile(r"`(--[a-z][a-z0-9-]*)[^`]*`[^.;`]{0,12}?\(default:?\s*\**`?"
                            r"(\d+(?:\.\d+)?)`?\**(?![\w.])")
HELP_PATHS = (("serve",), ("export",), ("verify",), ("infer",), ("model", "list"))


def help_defaults(help_of: Callable[[tuple[str, ...]], Help | str]) -> dict[str, str]:
    """flag -> the default its command's --help states (flags whose commands disagree, or
    whose help states none, left out)."""
    seen: dict[str, set[str]] = {}
    for path in HELP_PATHS:
        info = help_of(path)
        if isinstance(info, Help):
            for flag, value in info.defaults:
                seen.setdefault(flag, set()).add(value)
    return {flag: values.pop() for flag, values in seen.items() if len(values) == 1}


def check_defaults(path: str, prose: Sequence[tuple[int, str]],
                   defaults: Callable[[], dict[str, str]]) -> list[Finding]:
    """A numeric default quoted in prose equals the one --help states."""
    findings = []
    for number, line in prose:
        for m in _DEFAULT_QUOTE.finditer(line):
            stated = defaults().get(m.group(1))
            if stated is not None and re.fullmatch(r"\d+(?:\.\d+)?", stated) \
                    and float(stated) != float(m.group(2)):
                findings.append(Finding(path, number, (
                    f"{m.group(1)}: default {m.group(2)} here, but its --help says "
                    f"(default: {stated})")))
    return findings


REPORT = "docs/conformance-report.md"
_PEER_RESULT = re.compile(r"\b(Triton|KServe|MLServer)\b[^.;|]{0,60}?\b\d+ (?:passed|/ ?\d+)")


def check_peer_results(path: str, prose: Sequence[tuple[int, str]]) -> list[Finding]:
    """Peers' results outside the report that writes them."""
    if path == REPORT:
        return []
    return [Finding(path, number, (
        f"{m.group(0)!r}: other servers' conformance results are written by make "
        f"conformance-peers into {REPORT}; refer to it instead of quoting them"))
        for number, line in prose for m in _PEER_RESULT.finditer(line)]


# --- the check ------------------------------------------------------------------------------


def check(root: Path = REPO, help_of: Callable[[tuple[str, ...]], Help | str] | None = None
          ) -> list[Finding]:
    """Every finding of the docs under `root`, sorted."""
    help_of = help_of or HelpCache()
    findings: list[Finding] = []
    quotes: list[Quote] = []
    count = len(list((root / "tests" / "conformance" / "cases").glob("*.json")))
    cached: list[dict[str, str]] = []

    def defaults() -> dict[str, str]:
        if not cached:
            cached.append(help_defaults(help_of))
        return cached[0]

    for doc in doc_files(root):
        rel = doc.relative_to(root).as_posix()
        blocks, prose = split_markdown(doc.read_text(encoding="utf-8"))
        go_lines: list[tuple[int, str]] = list(_inline_spans(prose))
        for block in blocks:
            if block.lang not in SHELL_LANGS:
                continue
            for number, command, _ in shell_lines(block):
                go_lines.append((number, command))
                for words in jaxport_invocations(command):
                    findings += [Finding(rel, number, p) for p in check_jaxport(words, help_of)]
        for number, text in go_lines:
            for cwd, package in go_invocations(text):
                problem = check_go(root, doc, cwd, package)
                if problem:
                    shown = f"cd {cwd} && " if cwd else ""
                    findings.append(Finding(rel, number, (
                        f"`{shown}go {'install' if 'install' in text else 'run'} {package}` "
                        f"does not resolve: {problem}")))
        quotes += _tier_table_quotes(rel, prose) + _prose_quotes(rel, prose) + \
            _block_quotes(rel, blocks)
        if count:
            findings += check_case_counts(rel, prose, count)
        findings += check_peer_results(rel, prose)
        findings += check_defaults(rel, prose, defaults)
    findings += check_durations(quotes)
    return sorted(set(findings))


def main(argv: Sequence[str],
         help_of: Callable[[tuple[str, ...]], Help | str] | None = None) -> int:
    root = Path(argv[0]).resolve() if argv else REPO
    findings = check(root, help_of)
    for finding in findings:
        print(finding)
    print(f"docs check: {len(findings)} finding(s) in {len(doc_files(root))} files")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
