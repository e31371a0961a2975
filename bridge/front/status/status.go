// Package status is the front's one table from an error to what a caller sees: gRPC status
// codes (their Python names, as the bridge has always spelled them), the HTTP status of a REST
// answer, and the text helpers every message uses (Clip, ClipShape, PyRepr, Ints), so a message
// reads the same whichever transport or engine produced it.
//
// It wraps google.golang.org/grpc/status so the front's packages import one status package:
// Errorf/New make a status error, Code/Convert read one (a context error becomes CANCELLED or
// DEADLINE_EXCEEDED).
package status

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// New is a status error with code c and message msg.
func New(c codes.Code, msg string) error { return grpcstatus.Error(c, msg) }

// Errorf is a status error with code c and a formatted message.
func Errorf(c codes.Code, format string, args ...any) error {
	return grpcstatus.Error(c, fmt.Sprintf(format, args...))
}

// Invalid is the INVALID_ARGUMENT status every request error is.
func Invalid(format string, args ...any) error {
	return grpcstatus.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// Code is err's status code: OK for nil, CANCELLED / DEADLINE_EXCEEDED for a context error,
// UNKNOWN for an error without one.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Code()
	}
	if errors.Is(err, context.Canceled) {
		return codes.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// Convert is err as a status (see Code for errors without one).
func Convert(err error) *grpcstatus.Status {
	if s, ok := grpcstatus.FromError(err); ok {
		return s
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return grpcstatus.FromContextError(err)
	}
	return grpcstatus.Convert(err)
}

// FromContext is the status of a call whose context ended (CANCELLED, DEADLINE_EXCEEDED).
func FromContext(err error) error { return grpcstatus.FromContextError(err).Err() }

// CodeName is a status code as Python's grpc.StatusCode names it (INVALID_ARGUMENT, ...): the
// spelling of stream error messages and metric labels.
func CodeName(c codes.Code) string { return code.Code(c).String() }

// httpStatusOf is THE table from a gRPC status code to the HTTP status of a REST answer:
// google.rpc.Code's documented HTTP mapping, which agrees with Triton's HTTP front for every
// code Triton answers with (INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503, UNIMPLEMENTED 501,
// INVALID_ARGUMENT 400) and with KServe's (404 unknown model, 400 invalid input, 503 not ready).
var httpStatusOf = map[codes.Code]int{
	codes.OK:                 http.StatusOK,
	codes.Canceled:           499, // client closed request
	codes.Unknown:            http.StatusInternalServerError,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted:            http.StatusConflict,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Internal:           http.StatusInternalServerError,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DataLoss:           http.StatusInternalServerError,
	codes.Unauthenticated:    http.StatusUnauthorized,
}

// HTTPStatus is the HTTP status of a REST answer failing with code c.
func HTTPStatus(c codes.Code) int {
	if s, ok := httpStatusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// HTTPError is a REST request refused before it became a call (a body that is no request, too
// large, in an unknown encoding): its HTTP status and one line.
type HTTPError struct {
	Status int
	Msg    string
}

func (e *HTTPError) Error() string { return e.Msg }

// BadRequest is a 400 HTTPError.
func BadRequest(format string, args ...any) error {
	return &HTTPError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// HTTP is the HTTP status and message a REST answer gives for err: an HTTPError's own, else the
// status code's through HTTPStatus.
func HTTP(err error) (int, string) {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status, he.Msg
	}
	st := Convert(err)
	return HTTPStatus(st.Code()), st.Message()
}

// FromError is err's status, and whether it has one (grpc's status.FromError).
func FromError(err error) (*grpcstatus.Status, bool) { return grpcstatus.FromError(err) }
