"""The exporter's one error family.

Every user mistake the exporter can detect is raised as an `ExportError` (or a subclass) whose
message is ONE line saying what is wrong and how to fix it. An artifact that is missing or
malformed is a `jaxport.artifact.ArtifactError` (the format's own family), handled the same
way. The CLI prints it as `jaxport <cmd>: error: <message>` and exits with `exit_code` (1 for
an ArtifactError); anything else is a bug.
"""

from __future__ import annotations

__all__ = [
    "ExportError",
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

