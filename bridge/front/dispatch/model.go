package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	"github.com/jaxport/jaxport/bridge/front/engine"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
)

// Model is one served model version: its signature (package request), the backend that has
// it open, its programs' output and check positions, its batcher, statistics and requests in
// flight (the version is released once it is closed and the last of them is done).
type Model struct {
	Name, Version string
	Manifest      *jaxportv1.Manifest
	Sig           *request.Signature
	Engine        string // EngineNative, EngineExported or EnginePJRT
	Reason        string // why not native ("" when native)
	// Batching: as it batches (nil: it does not); Preferred as the batcher applies them.
	Batching *Batching
	Stats    *telemetry.ModelStats

	exe       Executable
	programs  map[int]*programMap
	batcher   *batch.Batcher
	admission *Admission
	key       string // name/version: admission's key
	log       *slog.Logger

	mu       sync.Mutex
	requests int // requests in flight
	closed   bool
}

// programMap is where a program's outputs and checks are among its results.
type programMap struct {
	batchSize int
	outputRes []int // per manifest output: its position among the program's results
	checks    *engine.Checks
	checkErr  error // a check table the front cannot format: refused when its checks fire
}

func newModel(d *Dispatcher, a Artifact, exe Executable, eng, reason string, batching *Batching) (*Model, error) {
	m := a.Manifest
	plan := request.Plan{Engine: eng, Buckets: eng != EngineExported, DynamicBatching: batching != nil}
	sig, err := request.NewSignature(a.Model, a.Version, m, a.Labels, plan)
	if err != nil {
		return nil, err
	}
	model := &Model{Name: a.Model, Version: a.Version, Manifest: m, Sig: sig, Engine: eng, Reason: reason,
		Stats: telemetry.NewModelStats(), exe: exe, programs: map[int]*programMap{},
		admission: d.o.Admission, key: a.Model + "/" + a.Version, log: d.o.Log}
	for i, p := range m.GetPrograms() {
		pm := &programMap{batchSize: int(p.GetBatchSize())}
		for _, out := range m.GetOutputs() {
			at := slices.IndexFunc(p.GetResults(), func(r *jaxportv1.Result) bool {
				return r.GetRole() == jaxportv1.ResultRole_RESULT_ROLE_OUTPUT && r.GetName() == out.GetName()
			})
			if at < 0 {
				return nil, fmt.Errorf("%s has no result for output %s", p.GetMlirbcFile(), out.GetName())
			}
			pm.outputRes = append(pm.outputRes, at)
		}
		pm.checks, pm.checkErr = engine.NewChecks(m.GetChecks(), p.GetResults())
		model.programs[i] = pm
	}
	if batching != nil {
		cfg := batch.Config{Name: model.key, BatchSizes: sig.BatchSizes(), MaxQueueDelay: batching.MaxQueueDelay,
			MaxQueue: d.o.BatchQueueSize, InputNames: sig.InputNames(), OutputNames: sig.OutputNames()}
		for _, p := range batching.Preferred {
			if p <= slices.Max(cfg.BatchSizes) {
				cfg.Preferred = append(cfg.Preferred, p)
			}
		}
		for i := range sig.Inputs() {
			cfg.BatchedInputs = append(cfg.BatchedInputs, sig.BatchedInput(i))
			cfg.InputRowBytes = append(cfg.InputRowBytes, sig.RowBytes(i))
		}
		for i := range sig.Outputs() {
			cfg.BatchedOutputs = append(cfg.BatchedOutputs, sig.BatchedOutput(i))
			cfg.OutputRowBytes = append(cfg.OutputRowBytes, sig.OutputRowBytes(i))
		}
		if model.batcher, err = batch.New(cfg, model.executeBatch); err != nil {
			return nil, fmt.Errorf("batching: %v", err)
		}
		b := *batching
		b.Preferred = cfg.Preferred
		if len(b.Preferred) == 0 {
			b.Preferred = []int{slices.Max(cfg.BatchSizes)}
		}
		model.Batching = &b
	}
	return model, nil
}

// LoadSeconds: the load's phases.
func (m *Model) LoadSeconds() map[string]float64 { return m.exe.LoadSeconds() }

// BatchCounters: what the model's batcher did (nil: it does not batch).
func (m *Model) BatchCounters() *telemetry.BatchCounters {
	if m.batcher == nil {
		return nil
	}
	st := m.batcher.Stats()
	return &telemetry.BatchCounters{Requests: uint64(st.Requests), Immediate: uint64(st.Immediate),
		PaddedRows: uint64(st.PaddedRows), Executions: st.BatchSizeCounts}
}

// Close stops serving the version: no request is acquired from now on, and the backend lets
// it go once the requests in flight have finished (by the last one's Done). Close does not
// wait for them: an unload answers at once while they finish on this version.
func (m *Model) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	last := m.requests == 0
	m.mu.Unlock()
	if last {
		m.release()
	}
}

// release frees the version's batcher and backend copy (once: closed and no request left).
func (m *Model) release() {
	if m.batcher != nil {
		m.batcher.Close()
	}
	m.exe.Close()
}

// Acquire counts one more request in flight (the version is released after its Done); false
// once the version is closing (the caller looks it up again or answers UNAVAILABLE).
func (m *Model) Acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.requests++
	return true
}

// Done ends a request Acquire counted; the last one of a closed version releases it (in the
// background: that request's answer does not wait for the backend to let go).
func (m *Model) Done() {
	m.mu.Lock()
	m.requests--
	last := m.closed && m.requests == 0
	m.mu.Unlock()
	if last {
		go m.release()
	}
}

// Infer runs one request: the one validation (Signature.Prepare), then the batcher or
// admission + the test gate + the program, checks, the response; accounted once in the
// model's statistics, under the span "infer". shm resolves shared-memory tensors. The caller
// has the model Acquired.
func (m *Model) Infer(ctx context.Context, req *request.Request, shm request.SharedMemory) (*request.Response, error) {
	ctx, span := telemetry.StartSpan(ctx, "infer", attribute.String("jaxport.model", m.Name),
		attribute.String("jaxport.model_version", m.Version), attribute.String("jaxport.engine", m.Engine))
	defer m.Stats.Enter()()
	resp, err := m.infer(ctx, req, shm)
	telemetry.EndSpan(span, err)
	return resp, err
}

func (m *Model) infer(ctx context.Context, req *request.Request, shm request.SharedMemory) (*request.Response, error) {
	begun := time.Now()
	fail := func(err error) (*request.Response, error) {
		m.Stats.Record(time.Since(begun), status.Code(err), nil)
		return nil, err
	}
	p, err := m.Sig.Prepare(req, shm)
	if err != nil {
		return fail(err)
	}
	defer p.Release()
	var outputs []request.Tensor
	t := telemetry.Timings{Inferences: p.Rows, Executions: 1}
	if m.batcher != nil { // the test gate holds the batch's execution (executeBatch)
		bctx, span := telemetry.StartSpan(ctx, "batcher", attribute.Int("jaxport.rows", p.Rows))
		submitted := time.Now()
		var data [][]byte
		var bt batch.Timing
		data, bt, err = m.batcher.Submit(bctx, p.Rows, p.Inputs)
		batchSpans(bctx, submitted, bt, err)
		telemetry.EndSpan(span, err)
		if err != nil {
			return fail(err)
		}
		outputs = make([]request.Tensor, len(data))
		for i, d := range data {
			outputs[i] = request.Tensor{Shape: m.Sig.OutputShape(p, i), Data: d}
		}
		t.Queue, t.Infer, t.BatchRows = bt.Queue, bt.Execute, bt.BatchRows
		if !bt.First {
			t.Executions = 0
		}
	} else {
		queued := time.Now()
		_, span := telemetry.StartSpan(ctx, "admission")
		err := m.admission.Acquire(ctx, m.key)
		telemetry.EndSpan(span, err)
		if err != nil {
			return fail(err)
		}
		t.Queue = time.Since(queued)
		if err := gateWait(ctx, m.Name); err != nil {
			m.admission.Release(m.key)
			return fail(err)
		}
		ectx, span := telemetry.StartSpan(ctx, "execute", attribute.Int("jaxport.rows", p.Rows))
		outputs, t.Input, t.Infer, err = m.run(ectx, p)
		telemetry.EndSpan(span, err)
		m.admission.Release(m.key)
		if err != nil {
			return fail(err)
		}
	}
	encoded := time.Now()
	resp, err := m.Sig.Response(req, p, outputs)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = m.internal(err)
		}
		return fail(err)
	}
	t.Output = time.Since(encoded)
	m.Stats.Record(time.Since(begun), codes.OK, &t)
	return resp, nil
}

// run executes a prepared request on its program (inputs padded as the program takes them):
// every manifest output as the program produced it, the input and execution times.
func (m *Model) run(ctx context.Context, p *request.Prepared) ([]request.Tensor, time.Duration, time.Duration, error) {
	t0 := time.Now()
	pm := m.programs[p.Program]
	inputs := m.Sig.ProgramInputs(p, pm.batchSize)
	t1 := time.Now()
	outputs, err := m.execute(ctx, p.Program, inputs)
	return outputs, t1.Sub(t0), time.Since(t1), err
}

// execute runs one program and turns its results into the manifest's outputs, or the status
// of a check that fired.
func (m *Model) execute(ctx context.Context, program int, inputs []request.Tensor) ([]request.Tensor, error) {
	pm := m.programs[program]
	results, err := m.exe.Execute(ctx, program, inputs)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		return nil, m.internal(err)
	}
	if len(results) != len(m.Manifest.GetPrograms()[program].GetResults()) {
		return nil, m.internal(fmt.Errorf("program %d returned %d results, the manifest lists %d", program,
			len(results), len(m.Manifest.GetPrograms()[program].GetResults())))
	}
	switch {
	case pm.checkErr != nil:
		if err := uncheckedFailure(m.Manifest.GetChecks(), m.Manifest.GetPrograms()[program].GetResults(), results, pm.checkErr); err != nil {
			return nil, err
		}
	case pm.checks != nil:
		raw := make([][]byte, len(results))
		for i, r := range results {
			raw[i] = r.Data
		}
		fired, err := pm.checks.Failure(raw)
		if err != nil {
			return nil, m.internal(err)
		}
		if fired != nil {
			return nil, status.New(fired.Code, fired.Message)
		}
	}
	out := make([]request.Tensor, len(pm.outputRes))
	for i, at := range pm.outputRes {
		out[i] = results[at]
	}
	return out, nil
}

// executeBatch is the batcher's Exec: one full batch of an exported size; every output's
// bytes (size rows each).
func (m *Model) executeBatch(size int, inputs [][]byte) ([][]byte, error) {
	_ = gateWait(context.Background(), m.Name) // a held batch holds each of its requests
	program := m.Sig.ProgramOf(size)
	tensors := make([]request.Tensor, len(inputs))
	for i, data := range inputs {
		shape := slices.Clone(m.Manifest.GetInputs()[i].GetShape())
		if m.Sig.BatchedInput(i) {
			shape[0] = int64(size)
		}
		tensors[i] = request.Tensor{Shape: shape, Data: data}
	}
	outs, err := m.execute(context.Background(), program, tensors)
	if err != nil {
		return nil, err
	}
	data := make([][]byte, len(outs))
	for i, o := range outs {
		data[i] = o.Data
	}
	return data, nil
}

// internal: an execution the engine could not finish (logged; the caller gets INTERNAL).
func (m *Model) internal(err error) error {
	m.log.Error("execution failed", "model", m.Name, "version", m.Version, "engine", m.Engine, "error", err.Error())
	return status.New(codes.Internal, "internal error")
}

// batchSpans records a batched request's stay in its batcher from the batcher's Timing, as
// children of ctx's span: batch.queue (submitted until its execution began) and execute (the
// batch's execution, with the batch's size and real rows). A request that never ran (shed,
// deadline) has neither.
func batchSpans(ctx context.Context, submitted time.Time, bt batch.Timing, err error) {
	if err != nil || bt.BatchSize == 0 {
		return
	}
	began := submitted.Add(bt.Queue)
	telemetry.SpanAt(ctx, "batch.queue", submitted, began)
	telemetry.SpanAt(ctx, "execute", began, began.Add(bt.Execute),
		attribute.Int("jaxport.batch_size", bt.BatchSize), attribute.Int("jaxport.batch_rows", bt.BatchRows),
		attribute.Bool("jaxport.first_of_batch", bt.First))
}
