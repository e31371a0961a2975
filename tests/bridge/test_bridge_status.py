"""The one exception -> status table (`jaxport.bridge.status`), as a unit: every transport
(the native front's workers, Ray replicas) answers with what it gives."""

from __future__ import annotations

import logging

import grpc
import pytest
from jaxport.bridge.status import CODE_NAMES, INTERNAL_DETAILS, STATUS, status_of
from jaxport.protocol.errors import Code, InvalidArgumentError, NotFoundError, ProtocolError

SECRET = "secret-internal-detail /etc/passwd"


def test_the_one_table_maps_every_error_code_to_its_namesake():
    """Every `Code` but OK has exactly the grpc.StatusCode of the same name; OK has none."""
    assert set(STATUS) == set(Code) - {Code.OK}
    assert all(status.name == code.name for code, status in STATUS.items())
    assert len(set(STATUS.values())) == len(STATUS)


def test_code_names_are_the_wire_numbers_of_grpc():
    assert CODE_NAMES[0] == "OK"
    assert all(CODE_NAMES[s.value[0]] == s.name for s in grpc.StatusCode)


@pytest.mark.parametrize(("exc", "code", "details"), [
    (NotFoundError("unknown model 'ghost'"), grpc.StatusCode.NOT_FOUND, "unknown model 'ghost'"),
    (InvalidArgumentError("input 'x': expected shape [2], got [3]"),
     grpc.StatusCode.INVALID_ARGUMENT, "input 'x': expected shape [2], got [3]"),
])
def test_a_domain_error_keeps_its_code_and_message(exc, code, details):
    assert status_of(exc, "/t.T/Unary") == (code, details)


def test_a_bug_is_internal_with_its_text_in_the_log_only(caplog):
    with caplog.at_level(logging.ERROR):
        assert status_of(RuntimeError(SECRET), "/t.T/Unary") == (
            grpc.StatusCode.INTERNAL, INTERNAL_DETAILS)
    assert SECRET in caplog.text and "/t.T/Unary" in caplog.text


def test_an_error_carrying_ok_is_unknown(caplog):
    err = ProtocolError("claims success")
    err.code = Code.OK
    with caplog.at_level(logging.ERROR):
        assert status_of(err) == (grpc.StatusCode.UNKNOWN, "claims success")
    assert "no error status" in caplog.text
