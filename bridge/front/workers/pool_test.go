package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaxport/jaxport/clients/go/conformance"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// long bounds every wait in these tests: a loaded 2-core machine starts a worker (JAX import)
// and compiles in seconds, never minutes.
const long = 5 * time.Minute

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), long)
	t.Cleanup(cancel)
	return ctx
}

// quiet keeps the workers' JSON log lines out of the test output unless -v.
func quiet() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

func newTestPool(opts ...Option) *Pool {
	return New(append([]Option{WithPython(python), WithStderr(quiet())}, opts...)...)
}

// The shared pool: one process with 4 CPU devices (the sharded artifact needs them) serving
// every model of TestGoldensThroughWorkers.
var (
	sharedOnce sync.Once
	shared     *Pool
)

func sharedPool(t *testing.T) *Pool {
	needSetup(t)
	sharedOnce.Do(func() { shared = newTestPool(WithCPUDevices(4), WithThreads(2)) })
	return shared
}

func closeShared() {
	if shared != nil {
		shared.Close()
	}
}

func load(t *testing.T, p *Pool, name, engine string) *Handle {
	t.Helper()
	h, err := p.Load(testCtx(t), Model{Key: name + "/" + engine, Location: artifacts[name], Engine: engine})
	if err != nil {
		t.Fatalf("Load %s with %s: %v", name, engine, err)
	}
	return h
}

func readManifest(t *testing.T, dir string) *jaxportv1.Manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := &jaxportv1.Manifest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// tolerance is `jaxport verify`'s rule |got - want| <= atol + rtol*|want| with its values
// (docs/artifact-format.md, Tolerances); integers, bool and check outputs exact.
func tolerance(datatype string) (atol, rtol float64) {
	switch datatype {
	case "FP64":
		return 1e-12, 1e-10
	case "FP32":
		return 1e-5, 1e-4
	case "FP16":
		return 2e-3, 2e-3
	case "BF16":
		return 1.6e-2, 1.6e-2
	}
	return 0, 0
}

// programFor is the program of h that runs golden case c.
func programFor(t *testing.T, h *Handle, m *jaxportv1.Manifest, c *jaxportv1.GoldenCase) Program {
	t.Helper()
	for _, p := range h.Programs() {
		spec := m.GetPrograms()[p.Index]
		if p.Polymorphic {
			return p
		}
		if int64(spec.GetBatchSize()) != int64(c.GetBatchSize()) || len(spec.GetDims()) != len(c.GetDims()) {
			continue
		}
		same := true
		for k, v := range c.GetDims() {
			same = same && spec.GetDims()[k] == v
		}
		if same {
			return p
		}
	}
	t.Fatalf("no program of %s runs golden %s (batch size %d, dims %v): %+v", h.Model().Key, c.GetName(), c.GetBatchSize(), c.GetDims(), h.Programs())
	return Program{}
}

func readNpy(t testing.TB, dir, rel string) conformance.Npy {
	t.Helper()
	n, err := conformance.ReadNpy(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runGoldens executes every golden case of h's artifact and compares each output and check
// output with the golden; it returns the input shapes it ran.
func runGoldens(t *testing.T, h *Handle, dir string) []string {
	t.Helper()
	m := readManifest(t, dir)
	var shapes []string
	if len(m.GetGoldens()) == 0 {
		t.Fatalf("%s has no golden cases", dir)
	}
	for _, c := range m.GetGoldens() {
		prog := programFor(t, h, m, c)
		var inputs []Tensor
		for _, spec := range m.GetInputs() {
			n := readNpy(t, dir, c.GetInputs()[spec.GetName()])
			inputs = append(inputs, Tensor{Datatype: spec.GetDtype().GetDatatype(), Shape: n.Shape, Data: n.Data})
		}
		shapes = append(shapes, fmt.Sprint(inputs[0].Shape))
		got, err := h.Execute(testCtx(t), prog.Index, inputs)
		if err != nil {
			t.Fatalf("%s golden %s: %v", h.Model().Key, c.GetName(), err)
		}
		var plain []*jaxportv1.Result
		for _, r := range m.GetPrograms()[prog.Index].GetResults() {
			if r.GetRole() != jaxportv1.ResultRole_RESULT_ROLE_TOKEN {
				plain = append(plain, r)
			}
		}
		if len(got) != len(plain) {
			t.Fatalf("%s golden %s: %d results, the manifest lists %d", h.Model().Key, c.GetName(), len(got), len(plain))
		}
		byName := map[string]int{}
		for i, r := range plain {
			byName[r.GetName()] = i
			if got[i].Datatype != r.GetDtype().GetDatatype() {
				t.Errorf("%s result %s: datatype %s, manifest %s", h.Model().Key, r.GetName(), got[i].Datatype, r.GetDtype().GetDatatype())
			}
		}
		compare := func(wants map[string]string, exact bool) {
			for name, rel := range wants {
				i, ok := byName[name]
				if !ok {
					t.Fatalf("%s golden %s names %s, not a result", h.Model().Key, c.GetName(), name)
				}
				want := readNpy(t, dir, rel)
				dt := plain[i].GetDtype().GetDatatype()
				atol, rtol := tolerance(dt)
				if exact {
					atol, rtol = 0, 0
				}
				spec := conformance.TensorSpec{Name: name, Datatype: jaxport.Datatype(dt), Shape: want.Shape, Atol: atol, Rtol: rtol}
				gotT := jaxport.RawTensor(name, jaxport.Datatype(got[i].Datatype), got[i].Shape, got[i].Data)
				if err := conformance.CompareTensor(spec, gotT, want.Data); err != nil {
					t.Errorf("%s golden %s: %v", h.Model().Key, c.GetName(), err)
				}
			}
		}
		compare(c.GetOutputs(), false)
		compare(c.GetCheckOutputs(), true)
		if len(c.GetOutputs())+len(c.GetCheckOutputs()) == 0 {
			t.Fatalf("%s golden %s compares nothing", h.Model().Key, c.GetName())
		}
	}
	return shapes
}

func TestGoldensThroughWorkers(t *testing.T) {
	p := sharedPool(t)
	for _, c := range []struct{ name, engine string }{
		{"mlp", "exported"}, {"mlp", "pjrt"},
		{"batched", "exported"}, {"batched", "pjrt"},
		{"seq", "exported"},
		{"sharded", "exported"}, {"sharded", "pjrt"},
		{"checked", "exported"}, {"checked", "pjrt"},
		{"big", "exported"},
	} {
		t.Run(c.name+"/"+c.engine, func(t *testing.T) {
			h := load(t, p, c.name, c.engine)
			defer h.Close()
			sent, received := p.counts.memfdSent.Load(), p.counts.memfdReceived.Load()
			shapes := runGoldens(t, h, artifacts[c.name])
			switch c.name {
			case "batched":
				var sizes []int
				for _, prog := range h.Programs() {
					sizes = append(sizes, prog.BatchSize)
				}
				sort.Ints(sizes)
				if fmt.Sprint(sizes) != "[1 4]" {
					t.Errorf("batched programs have batch sizes %v, want [1 4]", sizes)
				}
			case "seq":
				progs := h.Programs()
				if len(progs) != 1 || !progs[0].Polymorphic {
					t.Errorf("seq programs %+v, want one polymorphic", progs)
				}
				distinct := map[string]bool{}
				for _, s := range shapes {
					distinct[s] = true
				}
				if len(distinct) < 2 {
					t.Errorf("the polymorphic model ran at shapes %v only; want at least two", shapes)
				}
			case "big": // 2 MiB in and 1.25 MiB out, each way in a memfd
				if p.counts.memfdSent.Load() == sent || p.counts.memfdReceived.Load() == received {
					t.Errorf("memfd frames sent %d -> %d, received %d -> %d: the large tensors went through the socket",
						sent, p.counts.memfdSent.Load(), received, p.counts.memfdReceived.Load())
				}
			}
			if secs := h.LoadSeconds(); secs["compile"] <= 0 || secs["warmup"] <= 0 {
				t.Errorf("load seconds %v lack compile/warmup", secs)
			}
		})
	}
}

// wantStatus fails unless err has code and its message contains every part.
func wantStatus(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: err = %v, want code %v", what, err, code)
	}
	for _, part := range parts {
		if !strings.Contains(status.Convert(err).Message(), part) {
			t.Errorf("%s: message %q does not say %q", what, status.Convert(err).Message(), part)
		}
	}
}

// copyDir copies an artifact directory (for one to corrupt).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCrashCancelAndRestart holds an execution in flight on a one-process pool (one
// execution at a time), cancels a call queued behind it, SIGKILLs the worker: only the call
// in flight fails, and the next calls succeed on the restarted worker, every model re-loaded
// (one whose artifact changed meanwhile is refused, naming why).
// Load refusals come on the same (one-device) pool, which keeps serving after them.
func TestCrashCancelAndRestart(t *testing.T) {
	needSetup(t)
	p := newTestPool(WithThreads(1))
	defer p.Close()
	sent := make(chan string, 4)
	p.sent = func(key string) { sent <- key }
	spin := load(t, p, "spin", "exported")
	mlp := load(t, p, "mlp", "exported")
	// A copy of mlp whose weights change while the worker is down: its re-LOAD fails.
	fragileDir := filepath.Join(t.TempDir(), "fragile")
	copyDir(t, artifacts["mlp"], fragileDir)
	fragile, err := p.Load(testCtx(t), Model{Key: "fragile/1", Location: fragileDir, Engine: "exported"})
	if err != nil {
		t.Fatal(err)
	}
	pids := p.PIDs()
	if len(pids) != 1 {
		t.Fatalf("PIDs %v, want one process", pids)
	}

	t.Run("refusals", func(t *testing.T) {
		ctx := testCtx(t)
		corrupt := filepath.Join(t.TempDir(), "corrupt")
		copyDir(t, artifacts["mlp"], corrupt)
		if err := os.WriteFile(filepath.Join(corrupt, "weights", "params.b2", "c", "0"), []byte("not the weights"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			model Model
			code  codes.Code
			parts []string
		}{
			{Model{"corrupt/1", corrupt, "exported"}, codes.FailedPrecondition, []string{"checksum verification failed", "params.b2"}},
			{Model{"missing/1", filepath.Join(t.TempDir(), "nothing"), "exported"}, codes.FailedPrecondition, []string{"manifest.json"}},
			{Model{"sharded/1", artifacts["sharded"], "exported"}, codes.FailedPrecondition, []string{"sharded over 4 devices", "--cpu-devices 4"}},
			{Model{"seq/1", artifacts["seq"], "pjrt"}, codes.FailedPrecondition, []string{"symbolic dimensions (B, T)", "--engine exported"}},
			{Model{"mlp/9", artifacts["mlp"], "iree"}, codes.FailedPrecondition, []string{"unknown engine 'iree'"}},
		} {
			_, err := p.Load(ctx, c.model)
			wantStatus(t, "Load "+c.model.Key, err, c.code, c.parts...)
		}
		if got := p.PIDs(); fmt.Sprint(got) != fmt.Sprint(pids) {
			t.Errorf("refused loads changed the processes: %v -> %v", pids, got)
		}
	})

	x := spinInput(1 << 30) // effectively endless
	spun := make(chan error, 1)
	go func() {
		_, err := spin.Execute(context.Background(), 0, x)
		spun <- err
	}()
	if key := <-sent; key != "spin/exported" {
		t.Fatalf("first execution sent: %s", key)
	}

	// A call queued behind it, cancelled by its caller: CANCELLED at once.
	ctx, cancel := context.WithCancel(testCtx(t))
	queued := make(chan error, 1)
	go func() {
		_, err := mlp.Execute(ctx, 0, mlpInput(t))
		queued <- err
	}()
	<-sent
	cancel()
	wantStatus(t, "cancelled call", <-queued, codes.Canceled)
	select {
	case err := <-spun:
		t.Fatalf("the held execution ended early: %v", err)
	default:
	}

	// SIGKILL mid-call: only the call in flight fails.
	if err := os.WriteFile(filepath.Join(fragileDir, "weights", "params.b2", "c", "0"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "call in flight on the killed worker", <-spun, codes.Unavailable, GoneMessage)

	// The next calls wait for the restart and run on a worker that re-loaded every model.
	runGoldens(t, mlp, artifacts["mlp"])
	runGoldens(t, spin, artifacts["spin"])
	_, err = fragile.Execute(testCtx(t), 0, mlpInput(t))
	wantStatus(t, "a model whose re-LOAD failed", err, codes.Unavailable, "could not load fragile/1 again", "checksum verification failed")
	if p.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", p.Restarts())
	}
	if now := p.PIDs(); len(now) != 1 || now[0] == pids[0] {
		t.Errorf("PIDs after the restart %v (before %v)", now, pids)
	}
}

func spinInput(rounds int32) []Tensor {
	x := make([]byte, 256*256*4)
	n := []byte{byte(rounds), byte(rounds >> 8), byte(rounds >> 16), byte(rounds >> 24)}
	return []Tensor{{Datatype: "FP32", Shape: []int64{256, 256}, Data: x}, {Datatype: "INT32", Shape: []int64{}, Data: n}}
}

func mlpInput(t testing.TB) []Tensor {
	n := readNpy(t, artifacts["mlp"], "goldens/case0/inputs/x.npy")
	return []Tensor{{Datatype: "FP32", Shape: n.Shape, Data: n.Data}}
}

// TestLeastBusyWorker: with two processes running one execution each at a time, a call made
// while one is held busy goes to the other (on the busy one it would wait forever).
func TestLeastBusyWorker(t *testing.T) {
	needSetup(t)
	p := newTestPool(WithProcesses(2), WithThreads(1))
	defer p.Close()
	sent := make(chan string, 4)
	p.sent = func(key string) { sent <- key }
	spin := load(t, p, "spin", "exported")
	mlp := load(t, p, "mlp", "exported")
	if pids := p.PIDs(); len(pids) != 2 {
		t.Fatalf("PIDs %v, want two processes (each loads every model)", pids)
	}
	go spin.Execute(context.Background(), 0, spinInput(1<<30)) // ends when the pool closes
	<-sent
	for range 3 {
		runGoldens(t, mlp, artifacts["mlp"])
		<-sent
	}
}

// TestProcessesStartLazilyAndStopWithTheLastModel: no process before the first Load, none
// once the last model is closed, a new one with the next Load.
func TestProcessesStartLazilyAndStopWithTheLastModel(t *testing.T) {
	needSetup(t)
	p := newTestPool()
	defer p.Close()
	if pids := p.PIDs(); len(pids) != 0 {
		t.Fatalf("processes before any Load: %v", pids)
	}
	h := load(t, p, "mlp", "exported")
	first := p.PIDs()
	if len(first) != 1 {
		t.Fatalf("PIDs after Load: %v", first)
	}
	h.Close()
	if pids := p.PIDs(); len(pids) != 0 {
		t.Errorf("processes after the last model closed: %v", pids)
	}
	_, err := h.Execute(testCtx(t), 0, mlpInput(t))
	wantStatus(t, "Execute on a closed model", err, codes.Unavailable, "mlp/exported", "not open")
	p.wg.Wait() // the supervisor has reaped it
	if err := syscall.Kill(first[0], 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("worker %d still exists after the last model closed (kill 0: %v)", first[0], err)
	}
	h = load(t, p, "mlp", "exported")
	if again := p.PIDs(); len(again) != 1 || again[0] == first[0] {
		t.Errorf("PIDs after a new Load: %v (first %v)", again, first)
	}
	runGoldens(t, h, artifacts["mlp"])
}

func TestLoadWithoutPython(t *testing.T) {
	_, err := New().Load(context.Background(), Model{Key: "mlp/1", Location: "/nowhere", Engine: "exported"})
	wantStatus(t, "Load without python", err, codes.Unavailable, ErrNoPython.Error())
	bad := filepath.Join(t.TempDir(), "no-python")
	p := New(WithPython(bad), WithStderr(io.Discard))
	defer p.Close()
	_, err = p.Load(testCtx(t), Model{Key: "mlp/1", Location: "/nowhere", Engine: "exported"})
	wantStatus(t, "Load with a missing python", err, codes.Unavailable, "could not start", bad)
}

func TestWorkerThatCannotImportJaxport(t *testing.T) {
	// A real interpreter without jaxport on its path: the one line says why.
	sh := filepath.Join(t.TempDir(), "python")
	if err := os.WriteFile(sh, []byte("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'jaxport'\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := New(WithPython(sh), WithStderr(io.Discard))
	defer p.Close()
	_, err := p.Load(testCtx(t), Model{Key: "mlp/1", Location: "/nowhere", Engine: "exported"})
	wantStatus(t, "Load", err, codes.Unavailable, "could not start", "No module named 'jaxport'")
}

func TestExecuteRefusedBeforeAnyWorker(t *testing.T) {
	h := &Handle{pool: New(WithMaxFrameBytes(1000)), number: 1, model: Model{Key: "m/1"}}
	_, err := h.Execute(context.Background(), 0, []Tensor{{Datatype: "FP32", Shape: []int64{1000}, Data: make([]byte, 4000)}})
	wantStatus(t, "inputs over the frame limit", err, codes.ResourceExhausted, "m/1", "4", "frame limit of 1000")
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = h.Execute(ctx, 0, nil)
	wantStatus(t, "expired deadline", err, codes.DeadlineExceeded)
}
