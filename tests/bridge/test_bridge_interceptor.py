"""The one error-mapping interceptor on a real grpc server in this process (the mapping is a
unit: a bridge process cannot be made to raise an unexpected exception on purpose).

Unary and streaming handlers raise domain errors and arbitrary exceptions; the caller must
see the domain error's code and message, or INTERNAL with the generic "internal error" and
none of the exception's text (that goes to the log only). The table itself:
test_bridge_status."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from jaxport.bridge.interceptor import ErrorInterceptor
from jaxport.bridge.status import INTERNAL_DETAILS
from jaxport.protocol.errors import InvalidArgumentError, NotFoundError, ProtocolError

SECRET = "secret-internal-detail /etc/passwd"


def _raise(kind: str) -> None:
    if kind == "not_found":
        raise NotFoundError("unknown model 'ghost'")
    if kind == "invalid":
        raise InvalidArgumentError("input 'x': expected shape [2], got [3]")
    if kind == "bug":
        raise RuntimeError(SECRET)
    if kind == "abort":
        return None
    if kind == "odd_code":
        err = ProtocolError("strange")
        err.code = "NOT_A_CODE"
        raise err


def _unary(request: bytes, context: grpc.ServicerContext) -> bytes:
    kind = request.decode()
    if kind == "abort":
        context.abort(grpc.StatusCode.PERMISSION_DENIED, "handler aborted itself")
    _raise(kind)
    return b"ok:" + request


def _stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    for request in requests:
        if request == b"ok":
            yield b"fine"
        else:
            _raise(request.decode())


@pytest.fixture(scope="module")
def server_and_calls():
    seen: list[tuple[str, str]] = []
    interceptor = ErrorInterceptor(lambda m, c: seen.append((m, c)))
    server = grpc.server(futures.ThreadPoolExecutor(4), interceptors=[interceptor])
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Stream": grpc.stream_stream_rpc_method_handler(_stream),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield channel.unary_unary("/t.T/Unary"), channel.stream_stream("/t.T/Stream"), seen
    assert interceptor.wait_idle(30)
    channel.close()
    server.stop(0)


@pytest.mark.parametrize(("kind", "code", "details"), [
    ("not_found", grpc.StatusCode.NOT_FOUND, "unknown model 'ghost'"),
    ("invalid", grpc.StatusCode.INVALID_ARGUMENT, "input 'x': expected shape [2], got [3]"),
    ("bug", grpc.StatusCode.INTERNAL, INTERNAL_DETAILS),
    ("abort", grpc.StatusCode.PERMISSION_DENIED, "handler aborted itself"),
    ("odd_code", grpc.StatusCode.UNKNOWN, "strange"),
])
def test_unary_mapping(server_and_calls, kind, code, details, caplog):
    unary, _, seen = server_and_calls
    with caplog.at_level(logging.ERROR), pytest.raises(grpc.RpcError) as info:
        unary(kind.encode(), timeout=10)
    assert info.value.code() == code
    assert info.value.details() == details
    assert SECRET not in info.value.details()
    assert seen[-1] == ("/t.T/Unary", code.name)
    if kind == "bug":
        assert SECRET in caplog.text  # the details are in the log, not on the wire


def test_unary_success_is_observed(server_and_calls):
    unary, _, seen = server_and_calls
    assert unary(b"fine", timeout=10) == b"ok:fine"
    assert seen[-1] == ("/t.T/Unary", "OK")


def test_stream_mapping(server_and_calls):
    _, stream, seen = server_and_calls
    call = stream(iter([b"ok", b"ok", b"bug"]), timeout=10)
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for item in call:
            got.append(item)
    assert got == [b"fine", b"fine"]
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert info.value.details() == INTERNAL_DETAILS
    call = stream(iter([b"invalid"]), timeout=10)
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # A stream is counted when its call terminates (after the caller got its status).
    _wait_until(lambda: ("/t.T/Stream", "INVALID_ARGUMENT") in seen)
    assert seen[-1] == ("/t.T/Stream", "INVALID_ARGUMENT")
    assert seen.count(("/t.T/Stream", "INTERNAL")) == 1


def _wait_until(condition, timeout: float = 30.0) -> None:
    """Poll `condition` (bounded): a stream's count lands when grpc finishes the call."""
    import time

    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "condition never held"
