//go:build cgo

// Package engine is the native execution engine: it opens a jaxport artifact directory
// (docs/artifact-format.md), compiles its fixed-shape StableHLO programs through the PJRT C API
// (github.com/gomlx/gopjrt, the plugin loaded with dlopen) and executes them with the
// parameters resident as device buffers, with no Python anywhere. docs/native-engine.md.
//
// Files: manifest.go (manifest, paths, checksums, Refused), weights.go (zarr3 reader),
// window.go (StableHLO version window, XLA flags), eligible.go (what runs natively),
// plugin.go (plugin choice and loading), engine.go (Open, Program.Execute; cgo only),
// nocgo.go (the same API in a CGO_ENABLED=0 build, refusing every model).
package engine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gopjrt/dtypes"
	"github.com/gomlx/gopjrt/pjrt"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Available says whether this build can run the engine (cgo: yes).
const Available = true

// Plugin is a loaded PJRT plugin with one client on it.
type Plugin struct {
	Path     string // the plugin's .so
	Platform string // the client's platform name ("cpu", "cuda")
	Window   Window // StableHLO versions it deserializes
	plugin   *pjrt.Plugin
	client   *pjrt.Client
}

var xlaFlagsOnce sync.Once

// LoadPlugin loads the plugin `choice` names (ResolvePlugin) and creates its client. XLA_FLAGS
// gets fast min/max turned off first (before the plugin reads its flags).
func LoadPlugin(choice string) (*Plugin, error) {
	path, err := ResolvePlugin(choice)
	if err != nil {
		return nil, err
	}
	if err := setXLAFlags(); err != nil {
		return nil, err
	}
	p, err := pjrt.GetPlugin(path)
	if err != nil {
		return nil, fmt.Errorf("PJRT plugin %s: %v", path, oneLine(err.Error()))
	}
	window, err := windowFromAttributes(p.Attributes())
	if err != nil {
		return nil, fmt.Errorf("PJRT plugin %s: %v", path, err)
	}
	// Synchronous execution on the caller's thread (the CPU plugin's `asynchronous` option):
	// the default dispatches every execute to the plugin's thread pool and each result copy
	// waits on it, a futex hand-off per call that dominated the front's CPU profile under load.
	// A plugin that does not take the option is created without it.
	client, err := p.NewClient(pjrt.NamedValuesMap{"asynchronous": false})
	if err != nil {
		client, err = p.NewClient(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("PJRT plugin %s: client: %v", path, oneLine(err.Error()))
	}
	if len(client.AddressableDevices()) == 0 {
		return nil, fmt.Errorf("PJRT plugin %s: no addressable device", path)
	}
	return &Plugin{Path: path, Platform: client.Platform(), Window: window, plugin: p, client: client}, nil
}

// String names the plugin the way refusals do: path, platform, PJRT API version.
func (p *Plugin) String() string {
	major, minor := p.plugin.Version()
	return fmt.Sprintf("%s (%s, PJRT API %d.%d, StableHLO %s)", p.Path, p.Platform, major, minor, p.Window)
}

// Model is an opened artifact: every fixed-shape program compiled, parameters on the device.
type Model struct {
	Name     string
	Manifest *jaxportv1.Manifest
	Programs []*Program // fixed-shape programs in manifest order (the polymorphic one skipped)
	params   map[string]*pjrt.Buffer
}

// Program is one compiled fixed-shape program of a model.
type Program struct {
	Spec    *jaxportv1.Program
	Inputs  []*jaxportv1.Argument // the INPUT arguments, in @main order: Execute's inputs
	Results []*jaxportv1.Result   // every result, in @main order: Execute's outputs
	exe     *pjrt.LoadedExecutable
	client  *pjrt.Client
	args    []*pjrt.Buffer // @main arguments; nil where an input goes
	inputAt []int          // @main position of Inputs[i]
}

// Open loads the artifact in dir as model `name` (the serving name; the manifest's name when
// empty) on plugin p. Whatever it cannot run comes back as *Refused, one line.
func Open(p *Plugin, dir, name string) (*Model, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, &Refused{Model: orName(name, dir), Reason: err.Error()}
	}
	name = orName(name, m.GetName())
	refuse := func(format string, args ...any) error {
		return &Refused{Model: name, Reason: fmt.Sprintf(format, args...)}
	}
	if why := Eligible(m, p.Platform); why != "" {
		return nil, refuse("%s", why)
	}
	if err := p.Window.Admits(m.GetVersions().GetStablehloTarget(), p.Path); err != nil {
		return nil, refuse("%v", err)
	}
	model := &Model{Name: name, Manifest: m, params: map[string]*pjrt.Buffer{}}
	for _, spec := range m.GetPrograms() {
		if spec.GetPolymorphic() {
			continue
		}
		prog, err := model.compile(p, dir, spec)
		if err != nil {
			model.Close()
			return nil, refuse("%v", err)
		}
		model.Programs = append(model.Programs, prog)
	}
	return model, nil
}

func orName(name, fallback string) string {
	if name != "" {
		return name
	}
	return fallback
}

func (model *Model) compile(p *Plugin, dir string, spec *jaxportv1.Program) (*Program, error) {
	code, err := readListedFile(dir, model.Manifest, spec.GetMlirbcFile())
	if err != nil {
		return nil, err
	}
	exe, err := p.client.Compile().WithStableHLO(code).Done()
	if err != nil {
		return nil, fmt.Errorf("%s does not compile on %s: %v", spec.GetMlirbcFile(), p.Path, err)
	}
	prog := &Program{Spec: spec, Results: spec.GetResults(), exe: exe, client: p.client,
		args: make([]*pjrt.Buffer, len(spec.GetArguments()))}
	if n := exe.NumOutputs; n != len(spec.GetResults()) {
		return nil, fmt.Errorf("%s compiled to %d results, the manifest lists %d", spec.GetMlirbcFile(), n, len(spec.GetResults()))
	}
	for i, a := range spec.GetArguments() {
		switch a.GetRole() {
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_INPUT:
			prog.Inputs = append(prog.Inputs, a)
			prog.inputAt = append(prog.inputAt, i)
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER:
			if prog.args[i], err = model.parameter(p.client, dir, a); err != nil {
				return nil, err
			}
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_PLATFORM_INDEX:
			if prog.args[i], err = platformIndex(p, model.Manifest, a); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s argument %s has role %s", spec.GetMlirbcFile(), a.GetName(), a.GetRole())
		}
	}
	return prog, nil
}

// parameter reads, checks and uploads a parameter once per model (programs share weights/).
func (model *Model) parameter(client *pjrt.Client, dir string, a *jaxportv1.Argument) (*pjrt.Buffer, error) {
	if b, ok := model.params[a.GetName()]; ok {
		return b, nil
	}
	data, err := ReadParameter(dir, a)
	if err != nil {
		return nil, err
	}
	b, err := upload(client, data, a.GetDtype(), a.GetShape())
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %v", a.GetName(), err)
	}
	model.params[a.GetName()] = b
	return b, nil
}

// platformIndex is the scalar naming the plugin's platform among the manifest's platforms,
// in the dtype the manifest gives (int32, or int64 under x64).
func platformIndex(p *Plugin, m *jaxportv1.Manifest, a *jaxportv1.Argument) (*pjrt.Buffer, error) {
	i := slices.Index(m.GetPlatforms(), p.Platform)
	var raw []byte
	switch a.GetDtype().GetNumpy() {
	case "int32":
		raw = []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24)}
	case "int64":
		raw = []byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24), 0, 0, 0, 0}
	default:
		return nil, fmt.Errorf("platform index of dtype %s", a.GetDtype().GetNumpy())
	}
	return upload(p.client, raw, a.GetDtype(), nil)
}

// dtypeOf maps the manifest's numpy dtype names to PJRT buffer types.
var dtypeOf = map[string]dtypes.DType{
	"bool": dtypes.Bool, "int8": dtypes.Int8, "int16": dtypes.Int16, "int32": dtypes.Int32,
	"int64": dtypes.Int64, "uint8": dtypes.Uint8, "uint16": dtypes.Uint16, "uint32": dtypes.Uint32,
	"uint64": dtypes.Uint64, "float16": dtypes.Float16, "bfloat16": dtypes.BFloat16,
	"float32": dtypes.Float32, "float64": dtypes.Float64,
}

func upload(client *pjrt.Client, data []byte, dt *jaxportv1.DType, shape []int64) (*pjrt.Buffer, error) {
	t, ok := dtypeOf[dt.GetNumpy()]
	if !ok {
		return nil, fmt.Errorf("dtype %s has no PJRT buffer type here", dt.GetNumpy())
	}
	dims := make([]int, len(shape))
	for i, d := range shape {
		dims[i] = int(d)
	}
	return client.BufferFromHost().FromRawData(data, t, dims).Done()
}

// Execute runs the program on raw little-endian C-order inputs (one per Inputs entry, exactly
// its byteSize) and returns every result's raw bytes in @main order (outputs, then checks).
func (prog *Program) Execute(inputs [][]byte) ([][]byte, error) {
	if len(inputs) != len(prog.Inputs) {
		return nil, fmt.Errorf("%s takes %d inputs, got %d", prog.Spec.GetMlirbcFile(), len(prog.Inputs), len(inputs))
	}
	args := slices.Clone(prog.args)
	defer func() {
		for _, i := range prog.inputAt {
			if args[i] != nil {
				_ = args[i].Destroy()
			}
		}
	}()
	for k, in := range inputs {
		a := prog.Inputs[k]
		if uint64(len(in)) != a.GetByteSize() {
			return nil, fmt.Errorf("input %s: %d bytes, shape %v of %s needs %d",
				a.GetName(), len(in), a.GetShape(), a.GetDtype().GetNumpy(), a.GetByteSize())
		}
		b, err := upload(prog.client, in, a.GetDtype(), a.GetShape())
		if err != nil {
			return nil, fmt.Errorf("input %s: %v", a.GetName(), err)
		}
		args[prog.inputAt[k]] = b
	}
	results, err := prog.exe.Execute(args...).DonateNone().Done()
	if err != nil {
		return nil, fmt.Errorf("execute %s: %v", prog.Spec.GetMlirbcFile(), oneLine(err.Error()))
	}
	defer func() {
		for _, r := range results {
			_ = r.Destroy()
		}
	}()
	out := make([][]byte, len(results))
	for i, r := range results {
		out[i] = make([]byte, prog.Results[i].GetByteSize())
		if err := r.ToHost(out[i]); err != nil {
			return nil, fmt.Errorf("result %s: %v", prog.Results[i].GetName(), err)
		}
	}
	return out, nil
}

// Close frees the model's executables and device buffers.
func (model *Model) Close() {
	for _, prog := range model.Programs {
		_ = prog.exe.Destroy()
		for i, b := range prog.args {
			if b != nil && prog.Spec.GetArguments()[i].GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PLATFORM_INDEX {
				_ = b.Destroy()
			}
		}
	}
	for _, b := range model.params {
		_ = b.Destroy()
	}
	model.Programs, model.params = nil, nil
}
