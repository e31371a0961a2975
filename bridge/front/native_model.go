package main

// One natively served model version (native.go): the opened artifact, its programs by batch
// size, the request signature (infer_request.go), its batcher (package batch) when the workers
// batch it, its statistics, and the count of requests in flight (closing waits for them).

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	"github.com/jaxport/jaxport/bridge/front/engine"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/status"
)

type nativeModel struct {
	name, version, dir string
	identity           string // artifactIdentity(dir) when opened
	key                string // name/version: admission's key
	m                  *engine.Model
	sig                *signature
	sizes              []int // exported batch sizes ascending (one entry: the fixed program)
	bySize             map[int]*nativeProgram
	batched            bool // the manifest has a batching section
	batcher            *batch.Batcher
	stats              *nativeStats
	inflight           sync.WaitGroup
}

// nativeProgram is one compiled program with the manifest's inputs and outputs mapped onto its
// @main positions.
type nativeProgram struct {
	prog      *engine.Program
	size      int
	inputArg  []int          // per manifest input: its position in prog.Inputs, -1 when jax dropped it
	outputRes []int          // per manifest output: its position in prog.Results
	checks    *engine.Checks // nil: no check results
}

// nativeSupport says what the front does not serve natively yet although the engine runs it
// ("" = served natively): docs/native-engine.md, "What runs natively".
func nativeSupport(m *jaxportv1.Manifest) string {
	switch {
	case len(m.GetDimensions()) > 0:
		return "symbolic dimensions: requests are padded to bucket programs by the workers (not in the front yet)"
	case m.GetVjpOrder() > 0:
		return "a VJP export (its gradient programs run on the workers)"
	}
	return ""
}

// openNative opens dir as model name/version; cfg is the workers' ModelConfig (dynamic
// batching as they apply it).
func openNative(p *engine.Plugin, dir, name, version string, cfg *inferencepb.ModelConfig, f *front) (*nativeModel, error) {
	manifest, err := engine.ReadManifest(dir)
	if err != nil {
		return nil, &engine.Refused{Model: name, Reason: err.Error()}
	}
	if why := engine.Eligible(manifest, p.Platform); why != "" { // the engine's reason first
		return nil, &engine.Refused{Model: name, Reason: why}
	}
	if why := nativeSupport(manifest); why != "" {
		return nil, &engine.Refused{Model: name, Reason: why}
	}
	labels, err := engine.Labels(dir, manifest)
	if err != nil {
		return nil, &engine.Refused{Model: name, Reason: err.Error()}
	}
	sig, err := newSignature(name, version, manifest, labels)
	if err != nil {
		return nil, &engine.Refused{Model: name, Reason: err.Error()}
	}
	// The workers batch this model: requests are checked the batcher's way (prepare's rows).
	sig.dynamicBatching = cfg.GetDynamicBatching() != nil
	m, err := engine.Open(p, dir, name)
	if err != nil {
		return nil, err
	}
	model := &nativeModel{name: name, version: version, dir: dir, key: name + "/" + version, m: m, sig: sig,
		bySize: map[int]*nativeProgram{}, batched: manifest.GetBatching() != nil, stats: newNativeStats()}
	for _, prog := range m.Programs {
		np, err := mapProgram(manifest, prog)
		if err != nil {
			m.Close()
			return nil, &engine.Refused{Model: name, Reason: err.Error()}
		}
		model.bySize[np.size] = np
		model.sizes = append(model.sizes, np.size)
	}
	slices.Sort(model.sizes)
	if db := cfg.GetDynamicBatching(); db != nil {
		model.batcher, err = batch.New(model.batchConfig(db, f), model.executeBatch)
		if err != nil {
			m.Close()
			return nil, &engine.Refused{Model: name, Reason: "batching: " + err.Error()}
		}
	}
	if err := model.warmUp(); err != nil {
		model.close()
		return nil, &engine.Refused{Model: name, Reason: "warm-up run failed: " + err.Error()}
	}
	return model, nil
}

func mapProgram(m *jaxportv1.Manifest, prog *engine.Program) (*nativeProgram, error) {
	np := &nativeProgram{prog: prog, size: int(prog.Spec.GetBatchSize())}
	for _, in := range m.GetInputs() {
		np.inputArg = append(np.inputArg, slices.IndexFunc(prog.Inputs, func(a *jaxportv1.Argument) bool { return a.GetName() == in.GetName() }))
	}
	for _, out := range m.GetOutputs() {
		i := slices.IndexFunc(prog.Results, func(r *jaxportv1.Result) bool {
			return r.GetRole() == jaxportv1.ResultRole_RESULT_ROLE_OUTPUT && r.GetName() == out.GetName()
		})
		if i < 0 {
			return nil, fmt.Errorf("%s has no result for output %s", prog.Spec.GetMlirbcFile(), out.GetName())
		}
		np.outputRes = append(np.outputRes, i)
	}
	checks, err := engine.NewChecks(m.GetChecks(), prog.Results)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", prog.Spec.GetMlirbcFile(), err)
	}
	np.checks = checks
	return np, nil
}

// warmUp executes every program once with zeros (as Model.warm_up: check results ignored).
func (model *nativeModel) warmUp() error {
	for _, np := range model.bySize {
		in := make([][]byte, len(np.prog.Inputs))
		for i, a := range np.prog.Inputs {
			in[i] = make([]byte, a.GetByteSize())
		}
		if _, err := np.prog.Execute(in); err != nil {
			return err
		}
	}
	return nil
}

// close frees the model once its requests in flight have finished.
func (model *nativeModel) close() {
	model.inflight.Wait()
	if model.batcher != nil {
		model.batcher.Close()
	}
	model.m.Close()
}

// run executes a prepared request on `np` (inputs in manifest order, `rows` rows of the
// batched ones, padded here to the program's size); every manifest output's bytes, `rows` rows
// of the batched ones. A fired check is the status its kind maps to.
func (model *nativeModel) run(np *nativeProgram, inputs [][]byte, rows int) ([][]byte, time.Duration, time.Duration, error) {
	t0 := time.Now()
	args := make([][]byte, len(np.prog.Inputs))
	for i, data := range inputs {
		at := np.inputArg[i]
		if at < 0 {
			continue // jax dropped this input: validated, not passed
		}
		if model.batched && model.sig.batchedInput(i) && rows < np.size {
			data = padRows(data, rows, np.size)
		}
		args[at] = data
	}
	t1 := time.Now()
	results, err := np.prog.Execute(args)
	if err != nil {
		return nil, 0, 0, internalError(model, err)
	}
	infer := time.Since(t1)
	if np.checks != nil {
		fired, err := np.checks.Failure(results)
		if err != nil {
			return nil, 0, 0, internalError(model, err)
		}
		if fired != nil {
			return nil, 0, 0, status.Error(fired.Code, fired.Message)
		}
	}
	out := make([][]byte, len(np.outputRes))
	for i, at := range np.outputRes {
		data := results[at]
		if model.batched && model.sig.batchedOutput(i) && rows < np.size {
			data = data[:len(data)/np.size*rows]
		}
		out[i] = data
	}
	return out, t1.Sub(t0), infer, nil
}

// padRows extends `rows` rows of data up to `size` rows with copies of the last row, as
// bridge/batcher.py's pad_rows does (a row-wise check trips on padding only if it trips on a
// real row).
func padRows(data []byte, rows, size int) []byte {
	row := len(data) / rows
	out := make([]byte, row*size)
	copy(out, data)
	last := data[len(data)-row:]
	for r := rows; r < size; r++ {
		copy(out[r*row:], last)
	}
	return out
}

// executeBatch is the batcher's Exec: one full batch of an exported size.
func (model *nativeModel) executeBatch(size int, inputs [][]byte) ([][]byte, error) {
	out, _, _, err := model.run(model.bySize[size], inputs, size)
	return out, err
}

func (model *nativeModel) batchConfig(db *inferencepb.ModelDynamicBatching, f *front) batch.Config {
	cfg := batch.Config{Name: model.key, BatchSizes: model.sizes,
		MaxQueueDelay: time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond,
		MaxQueue:      f.batchQueueSize}
	for _, p := range db.GetPreferredBatchSize() {
		cfg.Preferred = append(cfg.Preferred, int(p))
	}
	for i, in := range model.m.Manifest.GetInputs() {
		cfg.InputNames = append(cfg.InputNames, in.GetName())
		cfg.BatchedInputs = append(cfg.BatchedInputs, model.sig.batchedInput(i))
		cfg.InputRowBytes = append(cfg.InputRowBytes, model.sig.rowBytes(i))
	}
	for i, out := range model.m.Manifest.GetOutputs() {
		cfg.OutputNames = append(cfg.OutputNames, out.GetName())
		cfg.BatchedOutputs = append(cfg.BatchedOutputs, model.sig.batchedOutput(i))
		cfg.OutputRowBytes = append(cfg.OutputRowBytes, model.sig.outputRowBytes(i))
	}
	return cfg
}

// program is the smallest exported program holding `rows` rows (prepare checked rows <= max).
func (model *nativeModel) program(rows int) *nativeProgram {
	for _, s := range model.sizes {
		if s >= rows {
			return model.bySize[s]
		}
	}
	return model.bySize[model.sizes[len(model.sizes)-1]]
}
