// jaxport::Error and its kinds: see jaxport/error.h.
#include "jaxport/error.h"

#include <utility>

namespace jaxport {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

Error::Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

ArtifactError::ArtifactError(const std::string& message)
    : Error(StatusCode::kFailedPrecondition, message) {}

namespace {
// PJRT_Error_Code shares gRPC's numbering (1..16); anything else is UNKNOWN, and a failure
// that is not a plugin error (pjrt_code 0: dlopen, a missing symbol) FAILED_PRECONDITION.
StatusCode FromPjrt(int pjrt_code) {
  if (pjrt_code == 0) return StatusCode::kFailedPrecondition;
  if (pjrt_code >= 1 && pjrt_code <= 16) return static_cast<StatusCode>(pjrt_code);
  return StatusCode::kUnknown;
}
}  // namespace

PjrtError::PjrtError(const std::string& message, int pjrt_code)
    : Error(FromPjrt(pjrt_code), message), pjrt_code_(pjrt_code) {}

InvalidInputError::InvalidInputError(const std::string& message)
    : Error(StatusCode::kInvalidArgument, message) {}

CheckFailedError::CheckFailedError(std::string kind, StatusCode code, const std::string& message)
    : Error(code, message), kind_(std::move(kind)) {}

}  // namespace jaxport
