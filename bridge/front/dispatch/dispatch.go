// Package dispatch is where a validated request meets the engine that executes it: the
// Backend interface (open an artifact version; execute validated inputs with a deadline) and
// its two implementations, `native` (package native, the PJRT C API in the front) and the
// Python workers (package workers); the choice of backend per model version, made once at
// load, logged in one line and given as ModelConfig's `engine` and `reason`; admission,
// dynamic batching (package batch) for every model whichever backend executes it, the test
// gate, statistics, and checkify results turned into JAX's message (engine.Checks) for both
// backends.
//
// The repository calls Load for each version it serves; a version is READY once Load
// returned: its backend has it open (native: compiled and warmed; workers: loaded and warmed
// in every worker).
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/native"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

// Engine names: the native engine, the workers' two (jaxport serve --engine).
const (
	EngineNative   = "native"
	EngineExported = "exported"
	EnginePJRT     = "pjrt"
)

// Executable is one model version a backend has open.
type Executable interface {
	// Execute runs manifest program `program` on inputs (manifest input order, at the shapes
	// the program takes; a polymorphic program: the request's) and returns every result of
	// the program in the manifest's `programs[program].results` order (outputs and check
	// results), each with its shape. Errors keep a status code (a context's end: CANCELLED /
	// DEADLINE_EXCEEDED; a worker gone: UNAVAILABLE); an error without one is an engine
	// failure (INTERNAL, logged).
	Execute(ctx context.Context, program int, inputs []request.Tensor) ([]request.Tensor, error)
	// LoadSeconds: the load's phases (jaxport_model_load_seconds).
	LoadSeconds() map[string]float64
	// Close releases the version (its executions have finished).
	Close()
}

// Workers is the backend of the Python workers (package workers, adapted in workers.go): it
// opens a version with an engine (exported, pjrt) in every worker, starting them on first use.
type Workers interface {
	Open(ctx context.Context, a Artifact, engine string) (Executable, error)
}

// Artifact is one model version to open: what the repository hands its loader.
type Artifact struct {
	Model, Version string
	Artifact       *artifact.Artifact  // its store and manifest (read and checked)
	Manifest       *jaxportv1.Manifest // = Artifact.Manifest
	Location       string              // the directory or URL the workers open
	Labels         map[string][]string // classification labels by output (read from its labels files)
}

// Batching is how one model batches (--batching, --batching-models): nil = it does not.
type Batching struct {
	MaxQueueDelay time.Duration
	Preferred     []int
	// Listed: named in --batching-models (a model exported without --batch-sizes then fails
	// to load; --batching alone skips it).
	Listed bool
}

// Options configure a Dispatcher.
type Options struct {
	Native    *native.Engine // nil: the native engine is off (NativeOff says why)
	NativeOff string
	// Workers: nil when no worker Python is configured (--worker-python): a model that needs
	// them is UNAVAILABLE, the reason naming the flag.
	Workers Workers
	// Engine: "" (native where it can, else the workers' exported engine), or exported / pjrt:
	// every model on the workers with that engine (--engine).
	Engine         string
	Batching       func(model string) *Batching
	BatchQueueSize int
	Admission      *Admission
	Log            *slog.Logger
}

// Dispatcher opens model versions on their backend and executes their requests.
type Dispatcher struct {
	o Options
}

// New is a dispatcher with o.
func New(o Options) *Dispatcher {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Batching == nil {
		o.Batching = func(string) *Batching { return nil }
	}
	if o.BatchQueueSize < 1 {
		o.BatchQueueSize = 1024
	}
	if o.Admission == nil {
		o.Admission = NewAdmission(4, 64)
	}
	return &Dispatcher{o: o}
}

// Admission is the dispatcher's admission control (its totals feed /metrics).
func (d *Dispatcher) Admission() *Admission { return d.o.Admission }

// LoadError is why a version cannot be served: FAILED_PRECONDITION, as the repository reports
// a version that fails to load.
func LoadError(format string, args ...any) error {
	return status.Errorf(codes.FailedPrecondition, format, args...)
}

// Load opens one model version on the backend that will serve it (the engine choice, logged
// in one line) and returns it ready: READY from now on. The error is the version's reason.
func (d *Dispatcher) Load(ctx context.Context, a Artifact) (*Model, error) {
	began := time.Now()
	if a.Manifest == nil && a.Artifact != nil {
		a.Manifest = a.Artifact.Manifest
	}
	m := a.Manifest
	batching := d.o.Batching(a.Model)
	if batching != nil && len(m.GetDimensions()) > 0 {
		names := ""
		for i, dim := range m.GetDimensions() {
			if i > 0 {
				names += ", "
			}
			names += dim.GetName()
		}
		return nil, LoadError("model '%s' (version %s) has symbolic dimensions (%s): dynamic batching of a "+
			"shape-polymorphic model is not built; serve it without --batching (each request then runs unpadded at "+
			"its own size)", a.Model, a.Version, names)
	}
	batchSizes := len(m.GetBatching().GetBatchedInputs()) > 0
	if batching != nil && !batchSizes {
		if batching.Listed {
			return nil, LoadError("model '%s' (version %s) is named in --batching-models but was exported without "+
				"--batch-sizes; export it with batch sizes or drop it from the list", a.Model, a.Version)
		}
		batching = nil // --batching alone skips models without batch sizes
	}
	exe, engine, reason, err := d.open(ctx, a)
	if err != nil {
		return nil, err
	}
	model, err := newModel(d, a, exe, engine, reason, batching)
	if err != nil {
		exe.Close()
		return nil, LoadError("%s", err.Error())
	}
	attrs := []any{"model", a.Model, "version", a.Version, "engine", engine}
	if reason != "" {
		attrs = append(attrs, "reason", reason)
	}
	if n, ok := exe.(*native.Model); ok {
		load := n.Load()
		attrs = append(attrs, "plugin", d.o.Native.Path(), "weight_bytes", load.Bytes,
			"weights_gib_per_s", load.GiBPerSecond)
	}
	attrs = append(attrs, "batching", model.batcher != nil, "load_seconds", time.Since(began).Seconds())
	d.o.Log.Info("model served", attrs...)
	return model, nil
}

// open chooses the backend (PLAN decision 1): the native engine when it is on, admits the
// model and no --engine was asked for; else the workers, with the reason.
func (d *Dispatcher) open(ctx context.Context, a Artifact) (Executable, string, string, error) {
	engine, reason := EngineExported, ""
	switch {
	case d.o.Engine != "":
		engine, reason = d.o.Engine, fmt.Sprintf("--engine %s was asked for", d.o.Engine)
	case d.o.Native == nil:
		reason = d.o.NativeOff
	default:
		exe, err := d.o.Native.Open(ctx, a.Artifact, a.Model)
		if err == nil {
			return exe, EngineNative, "", nil
		}
		var refused *native.Refusal
		if !errors.As(err, &refused) {
			return nil, "", "", err // a missing or tampered file: the version's reason (the repository words it)
		}
		reason = refused.Reason
	}
	if d.o.Workers == nil {
		return nil, "", "", status.Errorf(codes.Unavailable, "the model needs the Python workers (%s) and no worker "+
			"Python is configured: start the front with --worker-python PATH (env JAXPORT_WORKER_PYTHON), as jaxport "+
			"serve does", reason)
	}
	exe, err := d.o.Workers.Open(ctx, a, engine)
	if err != nil {
		return nil, "", "", err
	}
	return exe, engine, reason, nil
}
