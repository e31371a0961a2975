"""The `jaxport` command: dispatches to export/verify/serve/pjrt/infer/model, importing each
lazily.

It ships with the JAX-free `jaxport-client` distribution so `jaxport infer` and `jaxport model`
work alone; `export`, `verify`, `serve` and `pjrt` live in the full `jaxport` distribution and
are only imported when asked for, so `jaxport infer` and `jaxport model` never load JAX.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any, NoReturn

# name -> (module, function, one-line description, needs the full `jaxport` distribution)
SUBCOMMANDS: dict[str, tuple[str, str, str, bool]] = {
    "export": (
        "jaxport.exporter.cli",
        "export_main",
        "export a JAX function to a StableHLO artifact directory",
        True,
    ),
    "verify": (
        "jaxport.exporter.cli",
        "verify_main",
        "check an artifact's manifest, checksums and goldens",
        True,
    ),
    "serve": (
        "jaxport.bridge.cli",
        "serve_main",
        "serve a model repository over the Open Inference Protocol (gRPC)",
        True,
    ),
    "pjrt": (
        "jaxport.bridge.pjrt",
        "pjrt_main",
        "install the PJRT plugin the native engine loads (jaxport pjrt install cpu|cuda)",
        True,
    ),
    "infer": (
        "jaxport.client.cli",
        "infer_main",
        "call a model on an Open Inference Protocol server",
        False,
    ),
    "model": (
        "jaxport.client.cli",
        "model_main",
        "list, load or unload the models of a running server (--url HOST:PORT)",
        False,
    ),
}


class CommandParser(argparse.ArgumentParser):
    """argparse as every `jaxport` subcommand parses its flags.

    Flags are spelled out in full: abbreviations are off whatever the caller passes (argparse
    would take `--repo` for `--repository` and `--mod` for `--model` silently, and a flag added
    later would change what an old abbreviation meant). A mistake is ONE line: `error` raises
    `usage_error(message)` (a subclass names its exception type) instead of printing usage and
    exiting, and a flag the command does not have is named first, with the closest one it has:
    `unknown option --mod (did you mean --model? flags are spelled out in full)`.
    """

    usage_error: Callable[[str], Exception] = ValueError

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _options(self) -> set[str]:
        """Every option string of this parser and of its subcommands' parsers."""
        known = set(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    known |= sub._options() if isinstance(sub, CommandParser) else set(
                        sub._option_string_actions)
        return known

    def unknown_flag(self, tokens: Sequence[str]) -> str | None:
        """The first of `tokens` that is a flag no parser of this command has, with the
        closest one it has; None when there is none."""
        known = self._options()
        for token in tokens:
            if token == "--":
                break
            flag = token.split("=", 1)[0]
            if not flag.startswith("-") or flag in known or flag == "-" or _is_number(flag):
                continue
            # An abbreviation names the flags it abbreviates; a typo its closest flag.
            close = ([k for k in sorted(known) if k.startswith(flag)]
                     or difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.7))
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            return f"unknown option {flag} ({hint}flags are spelled out in full)"
        return None

    def error(self, message: str) -> NoReturn:
        extra = "unrecognized arguments: "
        tokens = message[len(extra):].split() if message.startswith(extra) else self._given
        unknown = self.unknown_flag(tokens)
        raise self.usage_error(f"{unknown or message} (see `{self.prog} --help`)")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_text() -> str:
    """`jaxport <version>` plus the client distribution's version."""
    full = _version("jaxport")
    client = _version("jaxport-client") or "unknown"
    if full is None:
        return f"jaxport-client {client} (full `jaxport` distribution not installed)"
    return f"jaxport {full} (jaxport-client {client})"


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [
        "usage: jaxport <command> [options]   (jaxport <command> --help for its options)",
        "",
        "commands:",
        *(f"  {name:<{width}}  {desc}" for name, (_, _, desc, _) in SUBCOMMANDS.items()),
        "",
        "options:",
        "  -h, --help     show this help",
        "  --version      show the installed version",
    ]
    return "\n".join(lines)


def _load(command: str) -> Callable[[list[str]], int] | str:
    """The subcommand's main function, or a one-line error explaining what is missing."""
    module_name, function, _, needs_full = SUBCOMMANDS[command]
    if not needs_full:
        # The client commands' errors are one line: gRPC's C core would print its own log
        # lines around them (e.g. when a server refuses the TLS handshake); the failure still
        # reaches the user through the status. Set before grpc is first imported; a caller's
        # own setting wins.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if not needs_full:
            raise
        installed = _version("jaxport")
        if installed is None:
            return (
                f"jaxport {command}: error: needs the full jaxport distribution "
                f"(JAX, exporter, bridge), which is not installed here ({exc}); "
                "install it with `pip install jaxport`"
            )
        return (
            f"jaxport {command}: error: cannot import {module_name} ({exc}): the installed "
            f"jaxport {installed} is incomplete; reinstall it with "
            "`pip install --force-reinstall jaxport`"
        )
    return getattr(module, function)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jaxport` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(usage(), file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if command in ("-h", "--help", "help"):
        print(usage())
        return 0
    if command == "--version":
        print(version_text())
        return 0
    if command not in SUBCOMMANDS:
        print(
            f"jaxport: error: unknown command {command!r}; expected one of "
            f"{', '.join(SUBCOMMANDS)} (see `jaxport --help`)",
            file=sys.stderr,
        )
        return 2
    entry = _load(command)
    if isinstance(entry, str):
        print(entry, file=sys.stderr)
        return 1
    try:
        return int(entry(rest) or 0)
    except KeyboardInterrupt:
        print(f"jaxport {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
