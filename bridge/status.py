"""The ONE place where exceptions become gRPC statuses (code and details), whatever the
transport: the native front's workers (`jaxport.bridge.worker`), Ray Serve replicas
(`jaxport.bridge.ray`) and the servicer for ModelStreamInfer's in-stream `error_message`
all ask `status_of`.

- `jaxport.protocol.errors.ProtocolError` (raised by codecs, model, loading, repository,
  admission, batcher) -> the `grpc.StatusCode` that `STATUS` lists for its typed `err.code`
  (a `jaxport.protocol.errors.Code`), with `err.message` as details;
- anything else is a bug: INTERNAL with the generic details `INTERNAL_DETAILS`; the traceback
  goes to the log only, never to the caller.

Only grpc's `StatusCode` enum is used here (what every transport sets or sends), no server.
"""

from __future__ import annotations

import logging

import grpc
from jaxport.protocol.errors import Code, ProtocolError

log = logging.getLogger("jaxport.bridge.status")

INTERNAL_DETAILS = "internal error"
# grpc's details for a request that does not parse (kept for messages of streams too).
DESERIALIZE_FAILED = "Exception deserializing request!"

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

CODE_NAMES: dict[int, str] = {c.value[0]: c.name for c in grpc.StatusCode}
"""Status code number (as on the wire) -> name (`jaxport_grpc_requests_total`'s label)."""


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
