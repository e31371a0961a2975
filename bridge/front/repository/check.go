package repository

import (
	"context"
	"os"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	grpcstatus "google.golang.org/grpc/status"
)

// CheckRoot says in one line why root cannot be served (single: the --model-name of a
// single-model root, "" for none), naming it and the fix: a missing directory, an unsupported
// URL, a repository by URL without index.json, a single-model root that is no model. Nil when
// it can be served. For the command line, before anything starts.
func CheckRoot(ctx context.Context, root, single string, opts ...artifact.Option) error {
	where := "--repository " + root
	fail := func(msg string) error { return &RootError{Msg: msg} }
	if single != "" {
		if err := CheckName(single); err != nil {
			return fail(where + ": " + grpcstatus.Convert(err).Message())
		}
	}
	l, err := newLayout(root, single, discardLog, opts)
	if err != nil {
		return fail(where + ": " + err.Error())
	}
	store := rootOf(l)
	if dir := store.Local(); dir != "" {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fail(where + " is not a directory")
		}
	}
	if s, ok := l.(*singleLayout); ok {
		versionRoot, versions := s.find(ctx)
		if !versionRoot && len(versions) == 0 {
			listed := ""
			if store.Local() == "" {
				listed = " listed in its " + artifact.IndexFile
			}
			return fail(where + " is neither an artifact (no " + artifact.ManifestFile + ") nor a model directory (no " +
				"version directories 1/, 2/ ..." + listed + ") to serve as model '" + single + "'")
		}
		return nil
	}
	if store.Local() == "" {
		idx, err := artifact.ReadIndex(ctx, store)
		if err != nil {
			return fail(where + ": " + err.Error())
		}
		if idx == nil {
			return fail(where + ": no " + artifact.IndexFile + " (a repository by URL is listed by it: run python -m " +
				"jaxport.artifact.index on the repository directory and publish it again)")
		}
		if idx.Models == nil {
			return fail(where + ": its " + artifact.IndexFile + " lists versions, so it is one model: serve it with " +
				"--model-name NAME")
		}
	}
	return nil
}

// RootError is why a repository root cannot be served: one line for the command line (usage
// error, exit status 2, as `jaxport serve` has it).
type RootError struct{ Msg string }

func (e *RootError) Error() string { return e.Msg }
