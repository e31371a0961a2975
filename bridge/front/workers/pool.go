// Package workers is the front's worker backend: Python processes (`python -m
// jaxport.bridge.worker`) that load artifact versions with an engine (`exported`, `pjrt`) and
// execute tensors the front has already validated, over the execute-only frame protocol of
// docs/frames.md (version 2). Nothing about the serving protocol happens here or in the
// workers: the dispatcher calls Load, Execute and Close.
//
// A Pool starts its processes lazily, with the first Load (a repository served wholly
// natively starts none), and stops them when the last model is closed. Each process loads
// every open model. A process that exits is restarted with back-off and gets every open
// model loaded again; a model's executions go to a process only once it holds that model,
// to the least busy one. The executions in flight on a process that exits fail UNAVAILABLE
// GoneMessage. Errors carry gRPC status codes.
package workers

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// DefaultCompiledShapes is how many executables a shape-polymorphic program keeps.
	DefaultCompiledShapes = 32
	// DefaultMaxFrameBytes is the largest frame payload either side accepts by default.
	DefaultMaxFrameBytes = 1 << 30
)

// ErrNoPython: Load on a pool given no interpreter (WithPython).
var ErrNoPython = errors.New("no Python interpreter configured for the execution workers")

// Tensor is one input or result: its Open Inference Protocol datatype ("FP32", "BF16",
// "BOOL", ...), shape and raw little-endian C-order bytes.
type Tensor struct {
	Datatype string
	Shape    []int64
	Data     []byte
}

// Model names an artifact version to load.
type Model struct {
	Key      string // "name/version": in logs and messages
	Location string // a local artifact directory, or a file://, http(s):// or s3:// URL
	Engine   string // "exported" or "pjrt"
}

// Program is one program a loaded model serves: Index is its position in the manifest's
// `programs` (Execute's `program`), BatchSize, Dims (a bucket program's sizes) and
// Polymorphic as the manifest says.
type Program struct {
	Index       int              `json:"index"`
	BatchSize   int              `json:"batch_size"`
	Dims        map[string]int64 `json:"dims"`
	Polymorphic bool             `json:"polymorphic"`
}

type loadAnswer struct {
	Programs    []Program          `json:"programs"`
	LoadSeconds map[string]float64 `json:"load_seconds"`
}

type options struct {
	python         string
	processes      int
	cpuDevices     int
	compiledShapes int
	maxFrameBytes  int
	threads        int
	logLevel       string
	env            []string
	stderr         io.Writer
	log            *slog.Logger
}

// Option configures a Pool.
type Option func(*options)

// WithPython sets the interpreter the processes run (`PATH -m jaxport.bridge.worker`).
func WithPython(path string) Option { return func(o *options) { o.python = path } }

// WithProcesses sets how many worker processes run (default 1); each loads every model.
func WithProcesses(n int) Option { return func(o *options) { o.processes = n } }

// WithCPUDevices sets each process's CPU device count, for sharded artifacts (0: jax's).
func WithCPUDevices(n int) Option { return func(o *options) { o.cpuDevices = n } }

// WithCompiledShapes sets the executables a shape-polymorphic program keeps (an LRU).
func WithCompiledShapes(n int) Option { return func(o *options) { o.compiledShapes = n } }

// WithMaxFrameBytes sets the largest frame payload sent or accepted, both sides.
func WithMaxFrameBytes(n int) Option { return func(o *options) { o.maxFrameBytes = n } }

// WithThreads sets how many executions each process runs at once (0: its CPU count).
func WithThreads(n int) Option { return func(o *options) { o.threads = n } }

// WithLogLevel sets the workers' log level (DEBUG, INFO, WARNING, ERROR; default INFO).
func WithLogLevel(level string) Option { return func(o *options) { o.logLevel = level } }

// WithEnv adds KEY=VALUE entries to the processes' environment (the front's otherwise).
func WithEnv(kv ...string) Option { return func(o *options) { o.env = append(o.env, kv...) } }

// WithStderr sets where the processes' output goes (default os.Stderr: their JSON log lines
// join the front's).
func WithStderr(w io.Writer) Option { return func(o *options) { o.stderr = w } }

// WithLogger sets the pool's own logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Pool is a set of worker processes and the models open on them. Safe for concurrent use.
type Pool struct {
	o options

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever a process or a load changes state
	procs    []*process    // nil while no model is open
	models   map[uint32]*Handle
	next     uint32
	closed   bool
	wg       sync.WaitGroup // supervisors
	restarts atomic.Int64
	counts   counts
	// sent (tests only) runs once an EXECUTE of the model is written to a worker.
	sent func(key string)
}

// New returns a pool; no process starts before the first Load.
func New(opts ...Option) *Pool {
	o := options{processes: 1, compiledShapes: DefaultCompiledShapes, maxFrameBytes: DefaultMaxFrameBytes,
		logLevel: "INFO", stderr: os.Stderr, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	o.processes = max(1, o.processes)
	return &Pool{o: o, changed: make(chan struct{}), models: map[uint32]*Handle{}}
}

// broadcastLocked wakes everyone waiting for a state change (pool.mu held).
func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) broadcast() {
	p.mu.Lock()
	p.broadcastLocked()
	p.mu.Unlock()
}

// PIDs returns the process ids of the worker processes running now.
func (p *Pool) PIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for _, pr := range p.procs {
		if pr.inc != nil {
			pids = append(pids, pr.inc.hello.PID)
		}
	}
	return pids
}

// Restarts returns how many times a worker process exited and was started again.
func (p *Pool) Restarts() int64 { return p.restarts.Load() }

// Load loads m into every worker process (starting them if none runs) and returns once each
// holds it compiled and warmed up. A refusal keeps the worker's status: FAILED_PRECONDITION
// with the reason (a checksum, a manifest field, too few devices, ...); UNAVAILABLE when a
// process cannot start or exits while loading.
func (p *Pool) Load(ctx context.Context, m Model) (*Handle, error) {
	if p.o.python == "" {
		return nil, status.Error(codes.Unavailable, ErrNoPython.Error())
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "the worker pool is closed")
	}
	p.next++
	h := &Handle{pool: p, number: p.next, model: m}
	p.models[h.number] = h
	if p.procs == nil {
		p.startLocked()
	}
	for _, pr := range p.procs {
		if pr.inc != nil {
			pr.inc.startLoad(h)
		}
	}
	procs := p.procs
	p.mu.Unlock()

	var first *loadAnswer
	for _, pr := range procs {
		ans, err := pr.awaitLoad(ctx, h)
		if err != nil {
			h.Close()
			return nil, err
		}
		if first == nil {
			first = ans
		}
	}
	h.programs = first.Programs
	h.loadSeconds = first.LoadSeconds
	p.o.log.Info("model loaded on the workers", "model", m.Key, "engine", m.Engine, "programs", len(first.Programs), "processes", len(procs))
	return h, nil
}

// startLocked starts the processes' supervisors (pool.mu held).
func (p *Pool) startLocked() {
	p.procs = make([]*process, p.o.processes)
	for i := range p.procs {
		pr := &process{pool: p, index: i, stop: make(chan struct{})}
		p.procs[i] = pr
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			pr.supervise()
		}()
	}
}

// stopLocked stops every process (pool.mu held); their supervisors exit on their own.
func (p *Pool) stopLocked() {
	for _, pr := range p.procs {
		close(pr.stop)
	}
	p.procs = nil
	p.broadcastLocked()
}

// Close closes every model and stops the processes; it returns once they have exited.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	for _, h := range p.models {
		h.closed = true
	}
	clear(p.models)
	if p.procs != nil {
		p.stopLocked()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// Handle is a model open on the pool's workers.
type Handle struct {
	pool        *Pool
	number      uint32
	model       Model
	programs    []Program
	loadSeconds map[string]float64
	closed      bool // under pool.mu
}

// Model returns what was loaded.
func (h *Handle) Model() Model { return h.model }

// Programs returns the programs the workers serve for this model.
func (h *Handle) Programs() []Program { return h.programs }

// LoadSeconds returns each load phase's seconds (checksum, deserialize, weights, compile,
// warmup) on the first process.
func (h *Handle) LoadSeconds() map[string]float64 { return h.loadSeconds }

// Execute runs program `program` (a Program's Index) on inputs (one per manifest input, in manifest order,
// already validated) on the least busy process holding the model, and returns every
// non-token @main result in order (outputs and check outputs). While no process holds the
// model because one is restarting, it waits (bounded by ctx). ctx's deadline travels with
// the request; ctx ending returns CANCELLED or DEADLINE_EXCEEDED at once (an execution that
// has not started then never starts).
func (h *Handle) Execute(ctx context.Context, program int, inputs []Tensor) ([]Tensor, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	var prelude [preludeSize]byte
	binary.LittleEndian.PutUint32(prelude[0:], h.number)
	binary.LittleEndian.PutUint32(prelude[4:], uint32(program))
	parts, size, err := encodeBlock(prelude[:], inputs)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", h.model.Key, err)
	}
	if size > h.pool.o.maxFrameBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "the inputs of %s take %d bytes, over the worker frame limit of %d", h.model.Key, size, h.pool.o.maxFrameBytes)
	}
	for {
		k, wait, err := h.pick()
		if err != nil {
			return nil, err
		}
		if k == nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		var sent func()
		if p := h.pool; p.sent != nil {
			sent = func() { p.sent(h.model.Key) }
		}
		r, err := k.execute(ctx, parts, sent)
		if errors.Is(err, errNotSent) {
			continue // the process died before the request left: wait for its successor
		}
		if err != nil {
			return nil, err
		}
		if err := r.err(); err != nil {
			return nil, err
		}
		out, err := decodeBlock(r.payload, 0)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: malformed results from the worker: %v", h.model.Key, err)
		}
		return out, nil
	}
}

// pick returns the least busy connection holding the model, or a channel to wait on while a
// process that will hold it is starting or loading it, or the error that leaves none.
func (h *Handle) pick() (*conn, <-chan struct{}, error) {
	p := h.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.closed {
		return nil, nil, status.Errorf(codes.Unavailable, "model %s is not open on the workers", h.model.Key)
	}
	var best *conn
	var why error
	waiting := false
	for _, pr := range p.procs {
		inc := pr.inc
		if inc == nil {
			if pr.startErr != nil {
				why = pr.startErr
			} else {
				waiting = true
			}
			continue
		}
		st := inc.models[h.number]
		if st == nil {
			waiting = true
			continue
		}
		select {
		case <-st.done:
		default:
			waiting = true
			continue
		}
		if st.err != nil { // Load succeeded before: this is a restarted process's re-LOAD
			why = status.Errorf(codes.Unavailable, "the execution worker restarted and could not load %s again: %s", h.model.Key, status.Convert(st.err).Message())
			continue
		}
		if best == nil || inc.k.inflight.Load() < best.inflight.Load() {
			best = inc.k
		}
	}
	if best != nil {
		return best, nil, nil
	}
	if waiting {
		return nil, p.changed, nil
	}
	if why == nil {
		why = status.Errorf(codes.Unavailable, "no execution worker holds %s", h.model.Key)
	}
	return nil, nil, why
}

// Close unloads the model from every process; closing the last open model stops them.
func (h *Handle) Close() error {
	p := h.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	delete(p.models, h.number)
	if len(p.models) == 0 && p.procs != nil {
		p.stopLocked()
		return nil
	}
	for _, pr := range p.procs {
		if pr.inc != nil {
			pr.inc.unload(h)
		}
	}
	p.broadcastLocked()
	return nil
}

func decodeLoad(r reply) (*loadAnswer, error) {
	var ans loadAnswer
	if err := json.Unmarshal(r.payload, &ans); err != nil {
		return nil, fmt.Errorf("the worker's LOAD answer: %v", err)
	}
	return &ans, nil
}
