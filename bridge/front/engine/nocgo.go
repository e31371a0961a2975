//go:build !cgo

package engine

import (
	"context"
	"errors"

	"github.com/jaxport/jaxport/bridge/front/artifact"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Available says whether this build can run the engine: a CGO_ENABLED=0 build (a machine
// without a C compiler) cannot load a PJRT plugin.
const Available = false

var errNoCgo = errors.New("native engine: this binary was built without cgo (CGO_ENABLED=0), " +
	"so it cannot load a PJRT plugin; every model is served by the workers")

// Plugin is never loaded in this build.
type Plugin struct {
	Path, Platform string
	Window         Window
}

// Model is never opened in this build.
type Model struct {
	Name     string
	Manifest *jaxportv1.Manifest
	Programs []*Program
	Load     LoadStats
}

// Program is never compiled in this build.
type Program struct {
	Spec    *jaxportv1.Program
	Inputs  []*jaxportv1.Argument
	Results []*jaxportv1.Result
}

// LoadPlugin fails: no cgo.
func LoadPlugin(string) (*Plugin, error) { return nil, errNoCgo }

// OpenOption configures OpenArtifact (nothing to configure in this build).
type OpenOption func()

// WithParallelism is accepted and ignored in this build.
func WithParallelism(int) OpenOption { return func() {} }

// WithHostStaging is accepted and ignored in this build.
func WithHostStaging() OpenOption { return func() {} }

// OpenArtifact refuses: no cgo.
func OpenArtifact(_ context.Context, _ *Plugin, _ *artifact.Artifact, name string, _ ...OpenOption) (*Model, error) {
	return nil, &Refused{Model: name, Reason: errNoCgo.Error()}
}

// Execute fails: no cgo.
func (*Program) Execute([][]byte) ([][]byte, error) { return nil, errNoCgo }

// Close does nothing.
func (*Model) Close() {}

// String names the plugin (never loaded in this build).
func (p *Plugin) String() string { return p.Path }
