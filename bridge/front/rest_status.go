package main

// The REST answer's HTTP status: the one table from a gRPC status code (a worker's answer,
// or the front's own refusal), and restError, a request the REST codec cannot translate.

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
)

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

func httpStatus(c codes.Code) int {
	if s, ok := httpStatusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// restError is a request the codec cannot translate: HTTP status and one line.
type restError struct {
	status int
	msg    string
}

func (e *restError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &restError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}
