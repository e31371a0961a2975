"""grpcio's server interceptor: exceptions escaping any handler, streams included, end their
call with the status `jaxport.bridge.status.status_of` gives (the one table, shared with the
native front's workers and Ray Serve replicas); plus in-flight accounting for the drain and
hostile-traffic logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from jaxport.bridge import logs
from jaxport.bridge.status import DESERIALIZE_FAILED, status_of
from jaxport.protocol.errors import InternalError, clip

log = logging.getLogger("jaxport.bridge.interceptor")

RpcObserver = Callable[[str, str], None]
"""`observer(method, code_name)`, called once per finished RPC (metrics)."""


def _aborted(context: grpc.ServicerContext) -> bool:
    """True if the handler already ended the call with `context.abort` (keep its status)."""
    code = context.code()
    return code is not None and code is not grpc.StatusCode.OK


def _code_name(context: grpc.ServicerContext) -> str:
    code = context.code()
    return "OK" if code is None else code.name


def _gone_code(context: grpc.ServicerContext) -> str:
    """Why a call ended on the caller's side: its deadline passed, or it was cancelled (or
    the connection dropped)."""
    remaining = context.time_remaining()
    return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"


def _peer_cancelled(context: grpc.ServicerContext) -> bool:
    """True once grpc has seen the peer cancel the call (RST_STREAM, a closed connection, an
    expired deadline). Read from grpcio's call state: after the call ends, `is_active()` is
    False for every call, and a stream whose peer vanished first sees its request iterator
    simply end (the failed read arrives before the cancellation), so nothing public tells
    the two apart. Only meaningful once the call has terminated (termination callbacks)."""
    state = getattr(context, "_state", None)
    return getattr(state, "client", None) == "cancelled"


class _Undecodable:
    """What the request deserializer gives for a message that does not parse; the wrapped
    handler (unary request) or request iterator (streams) raises `UndecodableRequest`."""

    __slots__ = ()


_UNDECODABLE = _Undecodable()


class UndecodableRequest(InternalError):
    """A request message that does not parse: the call ends with grpc's own status and words
    for it (INTERNAL, `DESERIALIZE_FAILED`)."""

    def __init__(self) -> None:
        super().__init__(DESERIALIZE_FAILED)


def _requests(iterator: Iterator[Any]) -> Iterator[Any]:
    for request in iterator:
        if request is _UNDECODABLE:
            raise UndecodableRequest()
        yield request


class ErrorInterceptor(grpc.ServerInterceptor):
    """Maps exceptions escaping any handler to statuses and reports each RPC's outcome.

    Also the bridge's one view of the RPCs in flight (`active`, `wait_idle`: the drain), and
    where hostile traffic is recognised: a message that does not parse (counted INTERNAL, the
    status grpc answers, logged at WARNING) and a caller that went away (counted CANCELLED or
    DEADLINE_EXCEEDED, logged at INFO), both rate-limited and without a traceback, which is
    kept for bugs in our code.

    Undecodable messages never reach grpc's own handling of them (grpcio 1.85): inside a
    stream it sends the status twice (once when the message fails to parse, again when the
    handler returns) and the second send leaves the call forever unfinished, so
    `server.stop(grace)` never completes; for a unary call it leaks ~19 KiB each. Instead the
    request deserializer marks the message and the call ends once, through the handler, with
    the status and words grpc uses (`UndecodableRequest`: INTERNAL "Exception deserializing
    request!").
    """

    def __init__(self, observer: RpcObserver | None = None) -> None:
        self._observer = observer
        self._idle = threading.Condition()
        self._active = 0
        self._finished = 0
        self._throttled = logs.Throttled(log)

    # -- RPCs in flight ----------------------------------------------------------------------

    @property
    def active(self) -> int:
        """RPCs whose handler is running now (streams until they end)."""
        with self._idle:
            return self._active

    @property
    def finished(self) -> int:
        """RPCs whose handler has ended, since the start."""
        with self._idle:
            return self._finished

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no RPC is in flight (True) or `timeout` seconds passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def _enter(self) -> None:
        with self._idle:
            self._active += 1

    def _leave(self) -> None:
        with self._idle:
            self._active -= 1
            self._finished += 1
            if self._active == 0:
                self._idle.notify_all()

    # -- outcomes ----------------------------------------------------------------------------

    def _observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            try:
                self._observer(method, code)
            except Exception:
                log.exception("rpc observer failed")

    def _finish(self, context: grpc.ServicerContext, method: str) -> None:
        """The handler returned: count its status (or the caller's leaving, if it left)."""
        code = _code_name(context)
        if code == "OK" and not context.is_active():
            self._gone(context, method)
        else:
            self._observe(method, code)

    def _gone(self, context: grpc.ServicerContext, method: str) -> None:
        code = _gone_code(context)
        self._observe(method, code)
        self._throttled.log(logging.INFO, f"gone:{method}", "call ended by cancellation",
                            {"method": method, "code": code})

    def _stream_ended(self, context: grpc.ServicerContext, method: str) -> None:
        """A stream's call terminated (grpc's callback, or its handler if it ended first):
        count its status, or CANCELLED/DEADLINE_EXCEEDED when the peer ended it, then leave.

        Streams are counted here, not when the handler returns: a peer that goes away without
        closing (every `perf_analyzer --streaming` run at exit) ends the request iterator as
        if the stream had been closed, and a response that can no longer be sent leaves the
        handler suspended, never resumed; only the call's termination says what happened."""
        try:
            if _peer_cancelled(context):
                self._gone(context, method)
            else:
                self._observe(method, _code_name(context))
        finally:
            self._leave()

    def _fail(self, exc: Exception, context: grpc.ServicerContext, method: str,
              observe: bool = True) -> bool:
        """Abort the call with `exc`'s status (raises), unless the caller is gone: then count
        that and return True (the exception is grpc's own news of it; nobody is listening).
        `observe=False`: leave the counting to `_stream_ended`."""
        if isinstance(exc, grpc.RpcError) and not context.is_active():
            if observe:
                self._gone(context, method)
            return True
        if _aborted(context):
            if observe:
                self._observe(method, _code_name(context))
            raise exc
        code, details = status_of(exc, method)
        if observe:
            self._observe(method, code.name)
        context.abort(code, details)
        return False  # unreachable: abort raises

    def _deserializer(self, method: str, parse: Callable[[bytes], Any] | None
                      ) -> Callable[[bytes], Any] | None:
        """`parse`, logging (WARNING, rate-limited, no traceback) a message that does not parse
        and giving a marker instead: the wrapped handler then ends the call with grpc's own
        status for it (`UndecodableRequest`), counted like any other. grpc's own handling
        is never reached: it leaks ~19 KiB per unary call (grpcio 1.85) and sends a stream's
        status twice (see the class doc)."""
        if parse is None:
            return None

        def deserialize(data: bytes) -> Any:
            try:
                return parse(data)
            except Exception as exc:
                self._throttled.log(
                    logging.WARNING, f"undecodable:{method}", "undecodable request message",
                    {"method": method, "bytes": len(data),
                     "error": clip(f"{type(exc).__name__}: {exc}")})
                return _UNDECODABLE

        return deserialize

    # -- the wrapping ------------------------------------------------------------------------

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """Wrap the behaviour of whatever handler serves this call."""
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        kind = (handler.request_streaming, handler.response_streaming)
        parse = self._deserializer(method, handler.request_deserializer)
        if kind == (False, False):
            inner = handler.unary_unary

            def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
                self._enter()
                try:
                    if request is _UNDECODABLE:
                        raise UndecodableRequest()
                    response = inner(request, context)
                except Exception as exc:
                    self._fail(exc, context, method)
                    raise
                finally:
                    self._leave()
                self._finish(context, method)
                return response

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, parse, handler.response_serializer)

        if kind == (True, True) or kind == (False, True):
            inner_stream = handler.stream_stream if kind[0] else handler.unary_stream

            def streaming(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                self._enter()
                # Counted (and left) when the call terminates; if it already has, at the end.
                registered = context.add_callback(lambda: self._stream_ended(context, method))
                try:
                    if request is _UNDECODABLE:
                        raise UndecodableRequest()
                    yield from inner_stream(_requests(request) if kind[0] else request, context)
                except Exception as exc:
                    if self._fail(exc, context, method, observe=False):
                        return
                    raise
                finally:
                    if not registered:
                        self._stream_ended(context, method)

            factory = (grpc.stream_stream_rpc_method_handler if kind[0]
                       else grpc.unary_stream_rpc_method_handler)
            return factory(streaming, parse, handler.response_serializer)

        inner_su = handler.stream_unary

        def stream_unary(request_iterator: Any, context: grpc.ServicerContext) -> Any:
            self._enter()
            try:
                response = inner_su(_requests(request_iterator), context)
            except Exception as exc:
                self._fail(exc, context, method)
                raise
            finally:
                self._leave()
            self._finish(context, method)
            return response

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, parse, handler.response_serializer)
