package status

// Unit test of the REST status table (rest_status.go).

import (
	"testing"

	"google.golang.org/grpc/codes"
)

func TestHTTPStatusTable(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.NotFound: 404, codes.InvalidArgument: 400, codes.Unavailable: 503,
		codes.ResourceExhausted: 429, codes.DeadlineExceeded: 504, codes.Unauthenticated: 401,
		codes.Internal: 500, codes.Unimplemented: 501, codes.Canceled: 499, codes.Code(99): 500,
	} {
		if got := HTTPStatus(c); got != want {
			t.Errorf("%v: %d, want %d", c, got, want)
		}
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if _, ok := httpStatusOf[c]; !ok {
			t.Errorf("%v has no HTTP status", c)
		}
	}
}
