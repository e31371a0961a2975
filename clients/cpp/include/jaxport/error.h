// jaxport's one error type: every failure the library reports is a jaxport::Error (a
// std::runtime_error) carrying a status code with gRPC's numbering (the codes the jaxport
// server answers with, and PJRT's own: PJRT_Error_Code uses the same values) and a one-line
// message naming what is wrong. The subclasses say where it came from, for callers that catch
// selectively:
//
//   ArtifactError      the artifact cannot be used (manifest, path rule, sha256, zarr3 array,
//                      StableHLO window, a check table the library cannot format): names the
//                      file, field or parameter. Code FAILED_PRECONDITION.
//   PjrtError          a PJRT C API call failed: "<call>: <the plugin's message>"; code() is the
//                      plugin's PJRT_Error_Code, pjrt_code() the raw value.
//   InvalidInputError  Run's inputs do not fit the model (unknown or missing name, dtype, shape,
//                      batch size, a size no bucket holds): names the input. INVALID_ARGUMENT.
//   CheckFailedError   a runtime check compiled into the model (checkify) fired: what() is
//                      exactly JAX's err.get() text, kind() the check kind, and code() the status
//                      the server answers with (user, index: INVALID_ARGUMENT; nan, div:
//                      FAILED_PRECONDITION).
//
// Other codes: INTERNAL when results contradict the manifest (a bug or a tampered artifact).
#ifndef JAXPORT_ERROR_H_
#define JAXPORT_ERROR_H_

#include <stdexcept>
#include <string>

namespace jaxport {

// gRPC's canonical codes (google.rpc.Code), which PJRT_Error_Code and absl::StatusCode share.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT", "FAILED_PRECONDITION", ... (gRPC's names); "UNKNOWN" for other values.
const char* StatusCodeName(StatusCode code);

class Error : public std::runtime_error {
 public:
  Error(StatusCode code, const std::string& message);
  StatusCode code() const noexcept { return code_; }

 private:
  StatusCode code_;
};

class ArtifactError : public Error {
 public:
  explicit ArtifactError(const std::string& message);
};

class PjrtError : public Error {
 public:
  // `pjrt_code` is the PJRT_Error_Code (0 when the failure is not a plugin error, e.g. dlopen).
  PjrtError(const std::string& message, int pjrt_code = 0);
  int pjrt_code() const noexcept { return pjrt_code_; }

 private:
  int pjrt_code_;
};

class InvalidInputError : public Error {
 public:
  explicit InvalidInputError(const std::string& message);
};

class CheckFailedError : public Error {
 public:
  CheckFailedError(std::string kind, StatusCode code, const std::string& message);
  // "user", "index", "nan" or "div".
  const std::string& kind() const noexcept { return kind_; }

 private:
  std::string kind_;
};

}  // namespace jaxport

#endif  // JAXPORT_ERROR_H_
