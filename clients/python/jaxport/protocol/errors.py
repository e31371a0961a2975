"""Domain errors of the inference protocol, each carrying the gRPC status it maps to.

Raised by the codecs and by the bridge's model core, which must not import grpc: the code is
a plain string naming the `grpc.StatusCode` member ("INVALID_ARGUMENT"), so ONE interceptor
in the servicer turns any `ProtocolError` into `grpc.StatusCode[err.code]` with `err.message`
as details. Anything that is not a ProtocolError is a bug and becomes INTERNAL there.
"""

from __future__ import annotations

__all__ = [
    "AlreadyExistsError",
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
    "error_for_code",
]

MAX_SHOWN = 64
"""Default length at which a caller-supplied string is cut when an error echoes it."""


def clip(text: str, limit: int = MAX_SHOWN) -> str:
    """A caller-supplied string as echoed in an error message: at most `limit` characters
    (status details travel in HTTP/2 trailers; a huge name must not make a huge status)."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


class ProtocolError(Exception):
    """Base of every error that reaches a caller as a gRPC status.

    `code` is the grpc.StatusCode member name; `message` is sent to the caller unchanged, so it
    must say what is wrong and name the offending model/input/field.
    """

    code: str = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class NotFoundError(ProtocolError):
    """Unknown model or model version."""

    code = "NOT_FOUND"


class InvalidArgumentError(ProtocolError):
    """A malformed request: missing/extra/duplicate input, wrong shape, datatype or byte size."""

    code = "INVALID_ARGUMENT"


class UnavailableError(ProtocolError):
    """The model (or server) exists but is not ready to serve."""

    code = "UNAVAILABLE"


class ResourceExhaustedError(ProtocolError):
    """A request larger than the server accepts, or the server is at capacity."""

    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(ProtocolError):
    """The operation is valid but the system is not in a state to run it (e.g. a failed check)."""

    code = "FAILED_PRECONDITION"


class DeadlineExceededError(ProtocolError):
    """The caller's deadline passed before the work finished."""

    code = "DEADLINE_EXCEEDED"


class AlreadyExistsError(ProtocolError):
    """Something with that name exists already (e.g. a registered shared-memory region)."""

    code = "ALREADY_EXISTS"


class UnauthenticatedError(ProtocolError):
    """Missing or invalid credentials."""

    code = "UNAUTHENTICATED"


class InternalError(ProtocolError):
    """A server-side failure; the message must stay generic (details go to the log)."""

    code = "INTERNAL"


_BY_CODE: dict[str, type[ProtocolError]] = {
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


def error_for_code(code: str, message: str) -> ProtocolError:
    """The ProtocolError subclass instance for a status name (base class for other codes)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = ProtocolError(message)
        err.code = code
        return err
    return cls(message)
