"""The exporter's one error family.

Every user mistake the exporter or `verify` can detect is raised as an `ExportError` (or a
subclass) whose message is ONE line saying what is wrong and how to fix it. The CLI prints it as
`jaxport <cmd>: error: <message>` and exits with `exit_code`; anything else is a bug.
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "ChecksumError",
    "ExportError",
    "SchemaVersionError",
    "UsageError",
]


class ExportError(Exception):
    """A user-facing exporter error: one line, no traceback, exit code 1."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        # Keep the promise of one line even when a wrapped library message spans several.
        super().__init__(" ".join(str(message).split()))


class UsageError(ExportError):
    """Bad command-line usage (malformed flag value): exit code 2, like argparse."""

    exit_code = 2


class ArtifactError(ExportError):
    """An artifact directory that is missing, malformed or inconsistent with its manifest."""


class SchemaVersionError(ArtifactError):
    """A manifest whose schema version this jaxport cannot read."""


class ChecksumError(ArtifactError):
    """A file or parameter whose bytes do not match the sha256 in the manifest."""
