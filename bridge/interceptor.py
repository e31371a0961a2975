"""The ONE place where exceptions become gRPC statuses, for every RPC, streams included.

- `jaxport.protocol.errors.ProtocolError` (raised by codecs, model, loading, repository,
  admission, batcher) -> the `grpc.StatusCode` that `STATUS` lists for its typed `err.code`
  (a `jaxport.protocol.errors.Code`), with `err.message` as details;
- anything else is a bug: INTERNAL with the generic details "internal error"; the traceback
  goes to the log only, never to the caller.

`status_of()` is also what ModelStreamInfer uses to word the `error_message` of a failed
request inside a stream that continues (Triton's behaviour).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from jaxport.protocol.errors import Code, ProtocolError

log = logging.getLogger("jaxport.bridge.interceptor")

INTERNAL_DETAILS = "internal error"

RpcObserver = Callable[[str, str], None]
"""`observer(method, code_name)`, called once per finished RPC (metrics)."""

STATUS: dict[Code, grpc.StatusCode] = {
    Code.CANCELLED: grpc.StatusCode.CANCELLED,
    Code.UNKNOWN: grpc.StatusCode.UNKNOWN,
    Code.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    Code.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    Code.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    Code.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    Code.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    Code.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Code.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    Code.ABORTED: grpc.StatusCode.ABORTED,
    Code.OUT_OF_RANGE: grpc.StatusCode.OUT_OF_RANGE,
    Code.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    Code.INTERNAL: grpc.StatusCode.INTERNAL,
    Code.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    Code.DATA_LOSS: grpc.StatusCode.DATA_LOSS,
    Code.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}
"""The one `Code` -> `grpc.StatusCode` table. `Code.OK` is absent: an error cannot be OK."""


def status_of(exc: BaseException, method: str = "") -> tuple[grpc.StatusCode, str]:
    """The status code and details a caller sees for `exc` (logs unexpected ones)."""
    if isinstance(exc, ProtocolError):
        code = STATUS.get(exc.code)
        if code is not None:
            return code, exc.message
        log.error("ProtocolError with code %r, which is no error status", exc.code)
        return grpc.StatusCode.UNKNOWN, exc.message
    log.error("unexpected error in %s", method or "rpc", exc_info=exc,
              extra={"fields": {"method": method}})
    return grpc.StatusCode.INTERNAL, INTERNAL_DETAILS


def _aborted(context: grpc.ServicerContext) -> bool:
    """True if the handler already ended the call with `context.abort` (keep its status)."""
    code = context.code()
    return code is not None and code is not grpc.StatusCode.OK


def _code_name(context: grpc.ServicerContext) -> str:
    code = context.code()
    return "OK" if code is None else code.name


class ErrorInterceptor(grpc.ServerInterceptor):
    """Maps exceptions escaping any handler to statuses and reports each RPC's outcome."""

    def __init__(self, observer: RpcObserver | None = None) -> None:
        self._observer = observer

    def _observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            try:
                self._observer(method, code)
            except Exception:
                log.exception("rpc observer failed")

    def _fail(self, exc: Exception, context: grpc.ServicerContext, method: str) -> None:
        if _aborted(context):
            self._observe(method, _code_name(context))
            raise exc
        code, details = status_of(exc, method)
        self._observe(method, code.name)
        context.abort(code, details)

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
        if kind == (False, False):
            inner = handler.unary_unary

            def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    response = inner(request, context)
                except Exception as exc:
                    self._fail(exc, context, method)
                    raise  # unreachable: _fail aborts
                self._observe(method, _code_name(context))
                return response

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer)

        if kind == (True, True) or kind == (False, True):
            inner_stream = handler.stream_stream if kind[0] else handler.unary_stream

            def streaming(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                try:
                    yield from inner_stream(request, context)
                except Exception as exc:
                    self._fail(exc, context, method)
                    raise
                self._observe(method, _code_name(context))

            factory = (grpc.stream_stream_rpc_method_handler if kind[0]
                       else grpc.unary_stream_rpc_method_handler)
            return factory(streaming, handler.request_deserializer, handler.response_serializer)

        inner_su = handler.stream_unary

        def stream_unary(request_iterator: Any, context: grpc.ServicerContext) -> Any:
            try:
                response = inner_su(request_iterator, context)
            except Exception as exc:
                self._fail(exc, context, method)
                raise
            self._observe(method, _code_name(context))
            return response

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, handler.request_deserializer, handler.response_serializer)
