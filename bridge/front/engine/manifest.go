package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Refused is why the engine will not run a model: one line naming the model and the cause, so
// the front can log it and hand the model to the Python workers instead. Reading failures
// (checksums, missing files) are no refusal: they are the version's load error, whichever
// engine would serve it.
type Refused struct {
	Model  string
	Reason string
}

func (r *Refused) Error() string {
	return fmt.Sprintf("native engine: model %s: %s", r.Model, oneLine(r.Reason))
}

// oneLine keeps the first line of a (compiler's) multi-line message and says how many followed.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	first, rest, found := strings.Cut(s, "\n")
	if !found {
		return s
	}
	return fmt.Sprintf("%s (+%d more lines)", strings.TrimSpace(first), strings.Count(rest, "\n")+1)
}

// TEMPORARY, for the package main being replaced (bridge/front/*.go) until the front
// integrates package repository: the manifest, labels and artifact by directory, through
// package artifact. Delete with package main.

// ManifestFile is artifact.ManifestFile (TEMPORARY).
const ManifestFile = artifact.ManifestFile

// ReadManifest is the checked manifest of the artifact directory dir (TEMPORARY: use
// artifact.Open).
func ReadManifest(dir string) (*jaxportv1.Manifest, error) {
	a, err := openDir(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	return a.Manifest, nil
}

// Labels are the labels of the artifact in dir by output (TEMPORARY: use Artifact.Labels).
func Labels(dir string, _ *jaxportv1.Manifest) (map[string][]string, error) {
	a, err := openDir(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	return a.Labels(context.Background())
}

func openDir(ctx context.Context, dir string) (*artifact.Artifact, error) {
	s, err := artifact.Locate(dir)
	if err != nil {
		return nil, err
	}
	return artifact.Open(ctx, s)
}
