package artifact

import (
	"context"
	"errors"
	"strings"
)

// Error is an artifact that is missing, malformed or inconsistent with its manifest (Python's
// jaxport.artifact ArtifactError): ONE line naming the file, field or parameter at fault and
// what is wrong with it. Checksum marks a file or parameter whose bytes do not match the
// manifest (ChecksumError). Nothing here knows about gRPC: the repository turns it into a load
// failure (LoadReason).
type Error struct {
	Msg      string
	Checksum bool
	cause    error // a context's end, kept for errors.Is
}

func (e *Error) Error() string { return e.Msg }

// Unwrap is the context error that ended a read, if one did.
func (e *Error) Unwrap() error { return e.cause }

// withCause keeps err's context error (if any) under msg.
func withCause(msg string, err error) *Error {
	e := errorf(msg)
	if errors.Is(err, context.Canceled) {
		e.cause = context.Canceled
	} else if errors.Is(err, context.DeadlineExceeded) {
		e.cause = context.DeadlineExceeded
	}
	return e
}

// errorf is an *Error whose message is made one line, as ArtifactError does (every run of
// whitespace, newlines included, becomes one space).
func errorf(msg string) *Error { return &Error{Msg: oneLine(msg)} }

// checksumError is a ChecksumError.
func checksumError(msg string) *Error { return &Error{Msg: oneLine(msg), Checksum: true} }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// LoadReason is why an artifact cannot be served, worded as the Python loader words it
// (bridge/loading.py): a checksum failure is "checksum verification failed: ...", any other
// artifact error "manifest.json: ..." (what the manifest says, or is, cannot be served); an
// error that is no *Error keeps its own text.
func LoadReason(err error) string {
	var ae *Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	if ae.Checksum {
		return "checksum verification failed: " + ae.Msg
	}
	return "manifest.json: " + ae.Msg
}
