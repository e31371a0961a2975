"""Domain errors: each carries the gRPC status name the servicer maps it to, without grpc."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
from jaxport.protocol import errors

EXPECTED = {
    errors.NotFoundError: "NOT_FOUND",
    errors.InvalidArgumentError: "INVALID_ARGUMENT",
    errors.UnavailableError: "UNAVAILABLE",
    errors.ResourceExhaustedError: "RESOURCE_EXHAUSTED",
    errors.FailedPreconditionError: "FAILED_PRECONDITION",
    errors.DeadlineExceededError: "DEADLINE_EXCEEDED",
    errors.UnauthenticatedError: "UNAUTHENTICATED",
    errors.InternalError: "INTERNAL",
}


@pytest.mark.parametrize(("cls", "code"), EXPECTED.items())
def test_code_names_a_grpc_status(cls: type[errors.ProtocolError], code: str) -> None:
    err = cls("model 'm' is not loaded")
    assert isinstance(err, errors.ProtocolError)
    assert err.code == code
    assert grpc.StatusCode[err.code].name == code
    assert err.message == "model 'm' is not loaded"
    assert str(err) == "model 'm' is not loaded"


@pytest.mark.parametrize(("cls", "code"), EXPECTED.items())
def test_error_for_code_returns_the_subclass(cls: type[errors.ProtocolError], code: str) -> None:
    err = errors.error_for_code(code, "why")
    assert type(err) is cls
    assert err.message == "why"


def test_error_for_an_unlisted_code_keeps_the_code() -> None:
    err = errors.error_for_code("ABORTED", "conflict")
    assert type(err) is errors.ProtocolError
    assert err.code == "ABORTED"
    assert errors.ProtocolError("x").code == "UNKNOWN"


def test_errors_and_codecs_do_not_import_grpc() -> None:
    """The bridge's model core raises these; it must not pull grpc in."""
    code = (
        "import sys, jaxport.protocol.errors, jaxport.protocol.codecs; "
        "bad = [m for m in ('grpc', 'jax') if m in sys.modules]; "
        "sys.exit(f'imported: {bad}' if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
