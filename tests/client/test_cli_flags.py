"""Every `jaxport` command parses its flags the same way (jaxport.cli.CommandParser): spelled
out in full (argparse's prefix matching off: `--mod` is not `--model`, `--repo` is not
`--repository`), and a flag the command does not have is ONE line naming it and the flags it
may have meant. No server needed: the `jaxport` entry point, called in this process (parsing
fails before anything would connect or import JAX)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from jaxport.cli import main as jaxport_main

REPO = Path(__file__).resolve().parents[2]


def usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one stderr line of a usage mistake (exit 2, nothing on stdout)."""
    status = jaxport_main(list(args))
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert status == 2 and out.out == "" and len(lines) == 1, (status, out.out, out.err)
    return lines[0]


@pytest.mark.parametrize(("args", "want"), [
    # Abbreviations of real flags: refused, naming every flag they could abbreviate.
    (("infer", "--url", "127.0.0.1:1", "--mod", "m", "--input", "x=@x.npy"),
     "jaxport infer: error: unknown option --mod (did you mean --model or --model-version? "
     "flags are spelled out in full) (see `jaxport infer --help`)"),
    (("model", "list", "--ur", "127.0.0.1:1"),
     "jaxport model: error: unknown option --ur (did you mean --url? flags are spelled out "
     "in full) (see `jaxport model list --help`)"),
    (("export", "m:f", "--param", "m:init", "--input", "x:float32[2]", "--out", "o"),
     "jaxport export: error: unknown option --param (did you mean --params or --params-path? "
     "flags are spelled out in full) (see `jaxport export --help`)"),
    (("verify", "dir", "--check", "checksums"),
     "jaxport verify: error: unknown option --check (did you mean --checks? flags are "
     "spelled out in full) (see `jaxport verify --help`)"),
    # A typo gets the closest flag; a flag of no command gets none.
    (("verify", "dir", "--chekcs", "checksums"),
     "jaxport verify: error: unknown option --chekcs (did you mean --checks? flags are "
     "spelled out in full) (see `jaxport verify --help`)"),
    (("model", "list", "--url", "127.0.0.1:1", "--bogus"),
     "jaxport model: error: unknown option --bogus (flags are spelled out in full) "
     "(see `jaxport model --help`)"),
])
def test_flags_are_spelled_out_in_full(capsys: pytest.CaptureFixture[str],
                                       args: tuple[str, ...], want: str) -> None:
    assert usage_error(capsys, *args) == want


def test_full_flag_with_equals_still_parses(capsys: pytest.CaptureFixture[str]) -> None:
    """`--flag=value` of a real flag is no unknown option (the mistake named is the real one)."""
    line = usage_error(capsys, "model", "list", "--url=http://127.0.0.1:8000")
    assert line.startswith("jaxport model: error: --url 'http://127.0.0.1:8000' is a URL")


@pytest.mark.parametrize("scheme", ["http", "https", "HTTP"])
def test_url_with_a_scheme_is_a_usage_error(capsys: pytest.CaptureFixture[str],
                                            scheme: str) -> None:
    """--url is gRPC's HOST:PORT: a URL is refused before anything connects, saying so."""
    url = f"{scheme}://127.0.0.1:8001"
    assert usage_error(capsys, "infer", "--url", url, "--model", "m", "--input", "x=@x.npy") \
        == (f"jaxport infer: error: --url '{url}' is a URL; a gRPC address is HOST:PORT with no "
            "scheme, e.g. '127.0.0.1:8001' (jaxport serve: gRPC on --port, default 8001; "
            "http://HOST:PORT is its REST endpoint, --http-port, default 8000)")


def test_classes_must_be_positive(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert usage_error(capsys, "infer", "--url", "127.0.0.1:1", "--model", "m", "--input",
                       f"x=@{tmp_path / 'x.npy'}", "--classes", "0") \
        == "jaxport infer: error: --classes must be >= 1, got 0"


def _parser_constructions(path: Path, root: Path = REPO) -> list[str]:
    """Where `path` builds an argparse parser that could take abbreviations: a class derived
    from argparse.ArgumentParser other than CommandParser, or an ArgumentParser(...) call
    without allow_abbrev=False."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name != "CommandParser":
            for base in node.bases:
                if ast.unparse(base).endswith("ArgumentParser"):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: class {node.name} "
                                 "derives from ArgumentParser, not jaxport.cli.CommandParser")
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
            abbrev = [k for k in node.keywords if k.arg == "allow_abbrev"]
            if not abbrev or not (isinstance(abbrev[0].value, ast.Constant)
                                  and abbrev[0].value.value is False):
                found.append(f"{path.relative_to(root)}:{node.lineno}: ArgumentParser(...) "
                             "without allow_abbrev=False")
    return found


def test_every_parser_of_the_exporter_and_the_client_refuses_abbreviations() -> None:
    """A parser added later to the exporter (export, verify and its worker) or to the client
    distribution (the `jaxport` dispatcher, infer, model) cannot take abbreviations either."""
    roots = [REPO / "exporter", REPO / "clients" / "python" / "jaxport",
             REPO / "clients" / "python" / "artifact"]
    files = [p for root in roots for p in sorted(root.rglob("*.py")) if "gen" not in p.parts]
    assert len(files) > 20
    found = [f for p in files for f in _parser_constructions(p)]
    assert found == []


def test_the_scan_finds_a_parser_that_takes_abbreviations(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("import argparse\n"
                   "class P(argparse.ArgumentParser):\n    pass\n"
                   "p = argparse.ArgumentParser(prog='x')\n"
                   "q = argparse.ArgumentParser(prog='y', allow_abbrev=True)\n"
                   "ok = argparse.ArgumentParser(prog='z', allow_abbrev=False)\n")
    found = _parser_constructions(bad, tmp_path)
    assert [f.split(": ", 1)[0] for f in found] == ["probe.py:2", "probe.py:4", "probe.py:5"]
