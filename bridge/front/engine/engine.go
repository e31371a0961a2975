//go:build cgo

// Package engine is the native execution engine: it opens a jaxport artifact
// (docs/artifact-format.md; a directory or a URL, read through package artifact), compiles its
// fixed-shape StableHLO programs through the PJRT C API (github.com/gomlx/gopjrt, the plugin
// loaded with dlopen) and executes them with the parameters resident as device buffers, with
// no Python anywhere. docs/native-engine.md.
//
// Files: manifest.go (Refused), weights.go (the zarr3 reader, through package artifact),
// window.go (StableHLO version window, XLA flags), eligible.go (what runs natively),
// plugin.go (plugin choice and loading), engine.go (OpenArtifact, Program.Execute; cgo only),
// nocgo.go (the same API in a CGO_ENABLED=0 build, refusing every model).
package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"

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
	Load     LoadStats  // what opening it cost (the load log line)
	params   map[string]*pjrt.Buffer
	release  []func() // memory of ours under parameter buffers, freed after them
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
	calls   calls          // the execute path's reused input buffers (execute.go)
}

// OpenOption configures OpenArtifact.
type OpenOption func(*openConfig)

type openConfig struct {
	parallel int
	staging  bool
}

// WithParallelism reads at most n chunk files at once (default: artifact.Parallelism).
func WithParallelism(n int) OpenOption { return func(c *openConfig) { c.parallel = n } }

// WithHostStaging reads each parameter into host memory and uploads it, freeing the host copy
// once the device buffer exists: what a plugin whose device memory is not the host's (cuda)
// gets; on the CPU plugin parameters are read straight into their device buffers.
func WithHostStaging() OpenOption { return func(c *openConfig) { c.staging = true } }

// stagingBudget bounds the host memory parameters being staged hold at once (one larger
// parameter still goes through, alone).
const stagingBudget = 256 << 20

// OpenArtifact opens artifact a (its manifest read and checked, from a directory or a URL) as
// model name (the serving name; the manifest's name when empty) on plugin p: every listed file
// checked against its sha256 (the weights and programs as they are read), every parameter read
// once (chunks in parallel) and placed on the device with no host copy left, every fixed-shape
// program compiled, all three at once. What the engine cannot run (Eligible, the StableHLO
// window, a program that does not compile) is a *Refused, one line; a file that is missing or
// does not match the manifest is the *artifact.Error the reader gave (the version cannot be
// served by any engine). a comes from artifact.Open, which has checked the manifest against
// its programs' @main.
func OpenArtifact(ctx context.Context, p *Plugin, a *artifact.Artifact, name string, opts ...OpenOption) (*Model, error) {
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	if p.Platform != "cpu" {
		cfg.staging = true
	}
	m := a.Manifest
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
	began := time.Now()
	model := &Model{Name: name, Manifest: m, params: map[string]*pjrt.Buffer{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Every parameter once (the programs share weights/), its zarr.json read first: the plan
	// says which files the weights' readers check themselves.
	var args []*jaxportv1.Argument
	seen := map[string]bool{}
	var fixed []*jaxportv1.Program
	for _, spec := range m.GetPrograms() {
		if spec.GetPolymorphic() {
			continue
		}
		fixed = append(fixed, spec)
		for _, arg := range spec.GetArguments() {
			if arg.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER && !seen[arg.GetName()] {
				seen[arg.GetName()] = true
				args = append(args, arg)
			}
		}
	}
	plans, err := planAll(ctx, a, args, artifact.Parallelism(a.Store))
	if err != nil {
		return nil, err
	}
	read := map[string]bool{}
	for _, plan := range plans {
		for _, f := range plan.files() {
			read[f] = true
		}
	}
	for _, spec := range fixed {
		read[spec.GetMlirbcFile()] = true
	}

	var wg sync.WaitGroup
	var verifyErr, weightsErr, compileErr error
	var verifySecs, weightsSecs, compileSecs float64
	reader := newWeightReader(a, cfg.parallel)
	exes := make([]*pjrt.LoadedExecutable, len(fixed))
	wg.Go(func() {
		t := time.Now()
		verifyErr = a.VerifyFiles(ctx, func(rel string) bool { return read[rel] })
		verifySecs = since(t)
		if verifyErr != nil {
			cancel()
		}
	})
	wg.Go(func() {
		t := time.Now()
		weightsErr = model.placeParameters(ctx, p.client, reader, plans, cfg.staging)
		weightsSecs = since(t)
		if weightsErr != nil {
			cancel()
		}
	})
	wg.Go(func() {
		t := time.Now()
		for i, spec := range fixed {
			if exes[i], compileErr = compile(ctx, p, a, spec); compileErr != nil {
				cancel()
				break
			}
		}
		compileSecs = since(t)
	})
	wg.Wait()
	fail := func(err error) (*Model, error) {
		for _, exe := range exes {
			if exe != nil {
				_ = exe.Destroy()
			}
		}
		model.Close()
		return nil, err
	}
	// A file that does not match its checksum first (whichever reader met it), then what the
	// weights or the compiler said.
	for _, err := range []error{verifyErr, weightsErr, compileErr} {
		if isChecksum(err) {
			return fail(err)
		}
	}
	for _, err := range []error{verifyErr, weightsErr} {
		if err != nil && !errors.Is(err, context.Canceled) {
			return fail(err)
		}
	}
	if compileErr != nil && !errors.Is(compileErr, context.Canceled) {
		var ae *artifact.Error
		if errors.As(compileErr, &ae) {
			return fail(compileErr)
		}
		return fail(refuse("%v", compileErr))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	for i, spec := range fixed {
		prog, err := model.program(p, spec, exes[i])
		if err != nil {
			exes[i] = nil // model.Close destroys the programs it has
			for _, exe := range exes[i+1:] {
				_ = exe.Destroy()
			}
			model.Close()
			return nil, refuse("%v", err)
		}
		model.Programs = append(model.Programs, prog)
	}
	model.Load = LoadStats{Bytes: reader.bytes, Chunks: reader.chunks, Seconds: since(began), WeightsSeconds: weightsSecs,
		Phases: map[string]float64{"checksum": verifySecs, "weights": weightsSecs, "compile": compileSecs}}
	if weightsSecs > 0 {
		model.Load.GiBPerSecond = float64(reader.bytes) / (1 << 30) / weightsSecs
	}
	return model, nil
}

func isChecksum(err error) bool {
	var ae *artifact.Error
	return errors.As(err, &ae) && ae.Checksum
}

// planAll plans every parameter (their zarr.json read at most parallel at once).
func planAll(ctx context.Context, a *artifact.Artifact, args []*jaxportv1.Argument, parallel int) ([]*paramPlan, error) {
	plans := make([]*paramPlan, len(args))
	errs := make([]error, len(args))
	slots := make(chan struct{}, max(1, parallel))
	var wg sync.WaitGroup
	for i, arg := range args {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			plans[i], errs[i] = planParameter(ctx, a, arg)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if isChecksum(err) {
			return nil, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return plans, nil
}

// placeParameters reads every parameter into a device buffer: on the CPU plugin straight into
// the buffer's own memory (a buffer created over memory of ours, which PJRT then owns);
// staging: into host memory, uploaded, the host copy freed at once (at most stagingBudget of
// host memory in use, one larger parameter alone).
func (model *Model) placeParameters(ctx context.Context, client *pjrt.Client, r *weightReader, plans []*paramPlan, staging bool) error {
	var mu sync.Mutex
	var first error
	record := func(name string, b *pjrt.Buffer, release func(), err error) {
		mu.Lock()
		defer mu.Unlock()
		if b != nil {
			model.params[name] = b
		}
		if release != nil {
			model.release = append(model.release, release)
		}
		if err != nil && (first == nil || isChecksum(err) && !isChecksum(first)) {
			first = err
		}
	}
	budget := &byteBudget{limit: stagingBudget}
	var wg sync.WaitGroup
	for _, plan := range plans {
		wg.Go(func() {
			var b *pjrt.Buffer
			var release func()
			var err error
			if staging {
				b, err = placeStaged(ctx, client, r, plan, budget)
			} else {
				b, release, err = placeShared(ctx, client, r, plan)
			}
			record(plan.arg.GetName(), b, release, err)
		})
	}
	wg.Wait()
	return first
}

// placeShared reads a parameter straight into a new device buffer's memory (CPU plugin).
func placeShared(ctx context.Context, client *pjrt.Client, r *weightReader, plan *paramPlan) (*pjrt.Buffer, func(), error) {
	dt, dims, err := bufferShape(plan.arg)
	if err != nil {
		return nil, nil, err
	}
	if plan.size == 0 {
		b, err := uploadBytes(client, make([]byte, 1)[:0], dt, dims)
		return b, nil, err
	}
	b, dst, release, err := deviceMemory(client, dt, dims, plan.size)
	if err != nil {
		return nil, nil, fmt.Errorf("parameter %s: device buffer of %d bytes: %v", plan.arg.GetName(), plan.size, oneLine(err.Error()))
	}
	if err := r.read(ctx, plan, dst); err != nil {
		_ = b.Destroy()
		release()
		return nil, nil, err
	}
	return b, release, nil
}

// placeStaged reads a parameter into host memory of its own, uploads it and frees the memory.
func placeStaged(ctx context.Context, client *pjrt.Client, r *weightReader, plan *paramPlan, budget *byteBudget) (*pjrt.Buffer, error) {
	dt, dims, err := bufferShape(plan.arg)
	if err != nil {
		return nil, err
	}
	if err := budget.acquire(ctx, plan.size); err != nil {
		return nil, err
	}
	defer budget.release(plan.size)
	if plan.size == 0 {
		return uploadBytes(client, make([]byte, 1)[:0], dt, dims)
	}
	dst, free, err := hostMemory(plan.size)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %d bytes of host memory: %v", plan.arg.GetName(), plan.size, err)
	}
	defer free()
	if err := r.read(ctx, plan, dst); err != nil {
		return nil, err
	}
	return uploadBytes(client, dst, dt, dims)
}

func bufferShape(arg *jaxportv1.Argument) (dtypes.DType, []int, error) {
	t, ok := dtypeOf[arg.GetDtype().GetNumpy()]
	if !ok {
		return t, nil, fmt.Errorf("parameter %s: dtype %s has no PJRT buffer type here", arg.GetName(), arg.GetDtype().GetNumpy())
	}
	dims := make([]int, len(arg.GetShape()))
	for i, d := range arg.GetShape() {
		dims[i] = int(d)
	}
	return t, dims, nil
}

func uploadBytes(client *pjrt.Client, data []byte, t dtypes.DType, dims []int) (*pjrt.Buffer, error) {
	return client.BufferFromHost().FromRawData(data, t, dims).Done()
}

// byteBudget bounds bytes in use; a request above the limit waits until nothing else is in use.
type byteBudget struct {
	mu    sync.Mutex
	cond  *sync.Cond
	limit int64
	used  int64
}

func (b *byteBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cond == nil {
		b.cond = sync.NewCond(&b.mu)
	}
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	for b.used > 0 && b.used+n > b.limit {
		if err := ctx.Err(); err != nil {
			return err
		}
		b.cond.Wait()
	}
	b.used += n
	return ctx.Err()
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.cond != nil {
		b.cond.Broadcast()
	}
	b.mu.Unlock()
}

func orName(name, fallback string) string {
	if name != "" {
		return name
	}
	return fallback
}

// compile reads a fixed-shape program's StableHLO (a listed file: sha256-checked) and
// compiles it on p.
func compile(ctx context.Context, p *Plugin, a *artifact.Artifact, spec *jaxportv1.Program) (*pjrt.LoadedExecutable, error) {
	code, err := a.ReadListed(ctx, spec.GetMlirbcFile())
	if err != nil {
		return nil, err
	}
	exe, err := p.client.Compile().WithStableHLO(code).Done()
	if err != nil {
		return nil, fmt.Errorf("%s does not compile on %s: %v", spec.GetMlirbcFile(), p.Path, err)
	}
	return exe, nil
}

// program binds a compiled program's @main arguments: the model's parameters, the platform
// index; inputs are Execute's.
func (model *Model) program(p *Plugin, spec *jaxportv1.Program, exe *pjrt.LoadedExecutable) (*Program, error) {
	prog := &Program{Spec: spec, Results: spec.GetResults(), exe: exe, client: p.client,
		args: make([]*pjrt.Buffer, len(spec.GetArguments()))}
	if n := exe.NumOutputs; n != len(spec.GetResults()) {
		_ = exe.Destroy()
		return nil, fmt.Errorf("%s compiled to %d results, the manifest lists %d", spec.GetMlirbcFile(), n, len(spec.GetResults()))
	}
	for i, a := range spec.GetArguments() {
		var err error
		switch a.GetRole() {
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_INPUT:
			prog.Inputs = append(prog.Inputs, a)
			prog.inputAt = append(prog.inputAt, i)
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER:
			if prog.args[i] = model.params[a.GetName()]; prog.args[i] == nil {
				err = fmt.Errorf("parameter %s was not placed", a.GetName())
			}
		case jaxportv1.ArgumentRole_ARGUMENT_ROLE_PLATFORM_INDEX:
			prog.args[i], err = platformIndex(p, model.Manifest, a)
		default:
			err = fmt.Errorf("%s argument %s has role %s", spec.GetMlirbcFile(), a.GetName(), a.GetRole())
		}
		if err != nil {
			prog.destroyOwn()
			return nil, err
		}
	}
	return prog, nil
}

// destroyOwn frees the program's executable and the buffers it owns (the platform index).
func (prog *Program) destroyOwn() {
	prog.closeCalls()
	_ = prog.exe.Destroy()
	for i, b := range prog.args {
		if b != nil && prog.Spec.GetArguments()[i].GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PLATFORM_INDEX {
			_ = b.Destroy()
		}
	}
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

// Close frees the model's executables and device buffers.
func (model *Model) Close() {
	for _, prog := range model.Programs {
		prog.destroyOwn()
	}
	for _, b := range model.params {
		_ = b.Destroy()
	}
	for _, release := range model.release {
		release()
	}
	model.Programs, model.params, model.release = nil, nil, nil
}
