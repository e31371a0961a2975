"""Domain errors of the inference protocol, each carrying the gRPC status it maps to.

Raised by the client's codecs and by the execution worker (which answers a frame's error with
the code, docs/frames.md), neither of which imports grpc: each class carries a `Code`, an enum
independent of grpc whose members are named like the `grpc.StatusCode` members (and, being a
StrEnum, equal those names as strings).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

__all__ = [
    "AlreadyExistsError",
    "Code",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "ProtocolError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "clip",
    "clip_shape",
    "error_for_code",
]

MAX_SHOWN = 64
"""Default length at which a caller-supplied string is cut when an error echoes it."""


MAX_SHOWN_DIMS = 8
"""Default number of dimensions shown when an error echoes a caller-supplied shape."""


def clip(text: str, limit: int = MAX_SHOWN, *, count: bool = False) -> str:
    """A caller-supplied string as echoed in an error message: at most `limit` characters
    (status details travel in HTTP/2 trailers; a huge name must not make a huge status).

    `count=True` appends the full length to a cut string (`xxx...(100000 chars)`), for
    messages where the size itself is what is wrong.
    """
    if len(text) <= limit:
        return text
    cut = f"{text[: limit - 3]}..."
    return f"{cut}({len(text)} chars)" if count else cut


def clip_shape(shape: Sequence[int], limit: int = MAX_SHOWN_DIMS) -> str:
    """A caller-supplied shape as echoed in an error message: `[2, 8]`, or its first `limit`
    dimensions and the rank (`[1, 1, ...] (10002 dimensions)`)."""
    dims = list(shape)
    if len(dims) <= limit:
        return str(dims)
    return f"[{', '.join(map(str, dims[:limit]))}, ...] ({len(dims)} dimensions)"


class Code(enum.StrEnum):
    """The status codes a domain error can carry (the gRPC set, without importing grpc)."""

    OK = "OK"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"


class ProtocolError(Exception):
    """Base of every error that reaches a caller as a gRPC status.

    `code` is a `Code` (named like the grpc.StatusCode member); `message` is sent to the
    caller unchanged, so it must say what is wrong and name the offending model/input/field.
    """

    code: Code = Code.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class NotFoundError(ProtocolError):
    """Unknown model or model version."""

    code = Code.NOT_FOUND


class InvalidArgumentError(ProtocolError):
    """A malformed request: missing/extra/duplicate input, wrong shape, datatype or byte size."""

    code = Code.INVALID_ARGUMENT


class UnavailableError(ProtocolError):
    """The model (or server) exists but is not ready to serve."""

    code = Code.UNAVAILABLE


class ResourceExhaustedError(ProtocolError):
    """A request larger than the server accepts, or the server is at capacity."""

    code = Code.RESOURCE_EXHAUSTED


class FailedPreconditionError(ProtocolError):
    """The operation is valid but the system is not in a state to run it (e.g. a failed check)."""

    code = Code.FAILED_PRECONDITION


class DeadlineExceededError(ProtocolError):
    """The caller's deadline passed before the work finished."""

    code = Code.DEADLINE_EXCEEDED


class AlreadyExistsError(ProtocolError):
    """Something with that name exists already (e.g. a registered shared-memory region)."""

    code = Code.ALREADY_EXISTS


class UnauthenticatedError(ProtocolError):
    """Missing or invalid credentials."""

    code = Code.UNAUTHENTICATED


class InternalError(ProtocolError):
    """A server-side failure; the message must stay generic (details go to the log)."""

    code = Code.INTERNAL


_BY_CODE: dict[Code, type[ProtocolError]] = {
    cls.code: cls
    for cls in (
        NotFoundError,
        InvalidArgumentError,
        UnavailableError,
        ResourceExhaustedError,
        FailedPreconditionError,
        DeadlineExceededError,
        AlreadyExistsError,
        UnauthenticatedError,
        InternalError,
    )
}


def error_for_code(code: Code | str, message: str) -> ProtocolError:
    """The ProtocolError subclass instance for a code (the base class for codes without one)."""
    code = Code(code)
    cls = _BY_CODE.get(code)
    if cls is None:
        err = ProtocolError(message)
        err.code = code
        return err
    return cls(message)
