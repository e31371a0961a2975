"""The artifact package's one error family, raised by every reader and writer of the format.

An `ArtifactError` message is ONE line naming the file, field or parameter at fault and what is
wrong with it. Exporter, `verify` and bridge each decide what it means for them (an exit code, a
load refusal); nothing here knows about gRPC or the exporter.
"""

from __future__ import annotations

__all__ = ["ArtifactError", "CheckFailedError", "ChecksumError", "SchemaVersionError"]


class ArtifactError(Exception):
    """An artifact that is missing, malformed or inconsistent with its manifest."""

    def __init__(self, message: str) -> None:
        # One line even when a wrapped library message spans several.
        super().__init__(" ".join(str(message).split()))

    @property
    def message(self) -> str:
        """The one-line message."""
        return str(self)


class SchemaVersionError(ArtifactError):
    """A manifest whose schema version this jaxport cannot read."""


class ChecksumError(ArtifactError):
    """A file or parameter whose bytes do not match the sha256 in the manifest."""


class CheckFailedError(Exception):
    """A runtime check compiled into the program (checkify) fired on the given inputs.

    `kind` is one of `jaxport.artifact.checks.KINDS`; `message` is exactly the text JAX's
    `err.get()` gives for the same inputs; `code` is the status the kind maps to
    (`jaxport.artifact.checks.STATUS`).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    @property
    def code(self):
        from jaxport.artifact.checks import STATUS

        return STATUS[self.kind]
