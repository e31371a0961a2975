// Package native is the native backend: model versions executed by the front itself through
// the PJRT C API (package engine), no Python on their request path (docs/native-engine.md).
// It opens an artifact (compiles its fixed-shape programs, parameters on the device, every
// program warmed up once) and executes one program on validated inputs; which model runs
// here, and everything about requests, is the dispatcher's.
package native

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/engine"
	"github.com/jaxport/jaxport/bridge/front/request"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Engine is a loaded PJRT plugin.
type Engine struct{ plugin *engine.Plugin }

// Load loads the plugin choice names ("cpu", "cuda", a .so path). An error says why the native
// engine is off (no plugin, CGO_ENABLED=0 build, a plugin that does not load).
func Load(choice string) (*Engine, error) {
	if !engine.Available {
		return nil, fmt.Errorf("this build has no native engine (CGO_ENABLED=0)")
	}
	p, err := engine.LoadPlugin(choice)
	if err != nil {
		return nil, err
	}
	return &Engine{plugin: p}, nil
}

// String names the plugin: path, platform, PJRT API and StableHLO window.
func (e *Engine) String() string { return e.plugin.String() }

// Path is the plugin's .so.
func (e *Engine) Path() string { return e.plugin.Path }

// Refusal is why a model cannot run here (no program compiled): one line for the load log and
// ModelConfig's `reason`.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

// Model is an opened artifact: every fixed-shape program compiled and warmed up.
type Model struct {
	m           *engine.Model
	programs    map[int]*program // by manifest program index
	loadSeconds map[string]float64
}

type program struct {
	prog     *engine.Program
	inputArg []int     // per manifest input: its position in prog.Inputs, -1 when jax dropped it
	shapes   [][]int64 // every result's shape, in @main order
}

// Open opens artifact a (any store: a directory, file://, http(s)://, s3://) as model name.
// A *Refusal says why the engine cannot run it (the caller serves it elsewhere); any other
// error (a missing or tampered file) is the version's failure to load, whatever the engine.
func (e *Engine) Open(ctx context.Context, a *artifact.Artifact, name string) (*Model, error) {
	m := a.Manifest
	if why := engine.Eligible(m, e.plugin.Platform); why != "" {
		return nil, &Refusal{why}
	}
	if err := e.plugin.Window.Admits(m.GetVersions().GetStablehloTarget(), e.plugin.Path); err != nil {
		return nil, &Refusal{err.Error()}
	}
	if m.GetVjpOrder() > 0 {
		return nil, &Refusal{"a VJP export (its gradient programs run on the workers)"}
	}
	began := time.Now()
	em, err := engine.OpenArtifact(ctx, e.plugin, a, name)
	if err != nil {
		if r, ok := err.(*engine.Refused); ok {
			return nil, &Refusal{r.Reason}
		}
		return nil, err
	}
	model := &Model{m: em, programs: map[int]*program{}, loadSeconds: map[string]float64{}}
	for phase, secs := range em.Load.Phases {
		model.loadSeconds[phase] = secs
	}
	for _, prog := range em.Programs {
		at := -1
		for i, spec := range m.GetPrograms() {
			if spec.GetMlirbcFile() == prog.Spec.GetMlirbcFile() && spec.GetBatchSize() == prog.Spec.GetBatchSize() {
				at = i
				break
			}
		}
		if at < 0 {
			em.Close()
			return nil, fmt.Errorf("program %s is not among the manifest's programs", prog.Spec.GetMlirbcFile())
		}
		p := &program{prog: prog}
		for _, in := range m.GetInputs() {
			k := -1
			for j, a := range prog.Inputs {
				if a.GetName() == in.GetName() {
					k = j
				}
			}
			p.inputArg = append(p.inputArg, k)
		}
		for _, r := range prog.Results {
			p.shapes = append(p.shapes, r.GetShape())
		}
		model.programs[at] = p
	}
	if _, ok := model.loadSeconds["compile"]; !ok {
		model.loadSeconds["compile"] = time.Since(began).Seconds()
	}
	warm := time.Now()
	for _, p := range model.programs { // zeros, check results ignored (zeros may trip checks)
		in := make([][]byte, len(p.prog.Inputs))
		for i, a := range p.prog.Inputs {
			in[i] = make([]byte, a.GetByteSize())
		}
		if _, err := p.prog.Execute(in); err != nil {
			em.Close()
			// The engine compiled the program; a run on the manifest's own argument shapes
			// that fails says the manifest and the program disagree (an edited manifest) or
			// the plugin cannot run it: name what the manifest claims.
			return nil, fmt.Errorf("warm-up run of %s on the input shapes the manifest gives (%s) failed: %v",
				p.prog.Spec.GetMlirbcFile(), argShapes(p.prog.Inputs), err)
		}
	}
	model.loadSeconds["warmup"] = time.Since(warm).Seconds()
	return model, nil
}

// Programs: the manifest program indices this model executes.
func (m *Model) Programs() []int {
	out := make([]int, 0, len(m.programs))
	for i := range m.programs {
		out = append(out, i)
	}
	return out
}

// LoadSeconds: the load's phases (checksum, weights, compile, warmup).
func (m *Model) LoadSeconds() map[string]float64 { return m.loadSeconds }

// Load: what reading the weights cost (bytes, GiB/s), for the load log line.
func (m *Model) Load() engine.LoadStats { return m.m.Load }

// Execute runs manifest program `program` on inputs (manifest input order, the program's
// shapes) and returns every result in @main order (outputs and check results) with its shape.
// The execution is one synchronous PJRT call; ctx is not consulted once it has begun.
func (m *Model) Execute(_ context.Context, program int, inputs []request.Tensor) ([]request.Tensor, error) {
	p := m.programs[program]
	if p == nil {
		return nil, fmt.Errorf("program %d is not compiled", program)
	}
	args := make([][]byte, len(p.prog.Inputs))
	for i, t := range inputs {
		if at := p.inputArg[i]; at >= 0 {
			args[at] = t.Data
		}
	}
	results, err := p.prog.Execute(args)
	if err != nil {
		return nil, err
	}
	out := make([]request.Tensor, len(results))
	for i, r := range results {
		out[i] = request.Tensor{Shape: p.shapes[i], Data: r}
	}
	return out, nil
}

// Close frees the executables and device buffers (the caller waits for its executions).
func (m *Model) Close() { m.m.Close() }

// argShapes: "x FP32 [4, 16], t INT32 [4]" (each argument's datatype and shape).
func argShapes(args []*jaxportv1.Argument) string {
	parts := make([]string, len(args))
	for i, a := range args {
		dims := make([]string, len(a.GetShape()))
		for j, d := range a.GetShape() {
			dims[j] = strconv.FormatInt(d, 10)
		}
		parts[i] = fmt.Sprintf("%s %s [%s]", a.GetName(), a.GetDtype().GetDatatype(), strings.Join(dims, ", "))
	}
	return strings.Join(parts, ", ")
}
