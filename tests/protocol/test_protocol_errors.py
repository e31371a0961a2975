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
    assert isinstance(err.code, errors.Code)
    assert code in {status.name for status in grpc.StatusCode}
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


def test_codes_are_the_grpc_status_names() -> None:
    assert {c.value for c in errors.Code} == {status.name for status in grpc.StatusCode}
    assert all(c.name == c.value for c in errors.Code)


def test_clip_cuts_long_strings_only() -> None:
    assert errors.clip("x" * 64) == "x" * 64
    cut = errors.clip("n" * 100_000)
    assert cut == "n" * 61 + "..." and len(cut) == errors.MAX_SHOWN
    assert errors.clip("n" * 100_000, 10) == "n" * 7 + "..."
    assert errors.clip("n" * 100_000, count=True) == "n" * 61 + "...(100000 chars)"
    assert errors.clip("short", count=True) == "short"


def test_clip_shape_keeps_the_rank_of_a_long_shape() -> None:
    assert errors.clip_shape([2, 8]) == "[2, 8]"
    assert errors.clip_shape((1,) * 8) == str([1] * 8)
    assert errors.clip_shape([1] * 10_002) == "[1, 1, 1, 1, 1, 1, 1, 1, ...] (10002 dimensions)"
    assert errors.clip_shape([3, 4, 5], 2) == "[3, 4, ...] (3 dimensions)"


def test_errors_and_codecs_do_not_import_grpc() -> None:
    """The bridge's model core raises these; it must not pull grpc in."""
    code = (
        "import sys, jaxport.protocol.errors, jaxport.protocol.codecs; "
        "bad = [m for m in ('grpc', 'jax') if m in sys.modules]; "
        "sys.exit(f'imported: {bad}' if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
