//go:build !cgo

package engine

import (
	"errors"

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
}

// Program is never compiled in this build.
type Program struct {
	Spec    *jaxportv1.Program
	Inputs  []*jaxportv1.Argument
	Results []*jaxportv1.Result
}

// LoadPlugin fails: no cgo.
func LoadPlugin(string) (*Plugin, error) { return nil, errNoCgo }

// Open refuses: no cgo.
func Open(_ *Plugin, _ string, name string) (*Model, error) {
	return nil, &Refused{Model: name, Reason: errNoCgo.Error()}
}

// Execute fails: no cgo.
func (*Program) Execute([][]byte) ([][]byte, error) { return nil, errNoCgo }

// Close does nothing.
func (*Model) Close() {}

// String names the plugin (never loaded in this build).
func (p *Plugin) String() string { return p.Path }
