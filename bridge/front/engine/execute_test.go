//go:build cgo

package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/clients/go/conformance"
)

// TestExecuteCallsReuseTheirInputBuffers: many callers at once on one program each get the
// results of their own inputs (the goldens' cases, alternated), equal byte for byte to the
// same call through PJRT's transfers; the input sets in the pool never outnumber the callers,
// the result read from memory matched PJRT's (no fallback), and Close frees the pool.
func TestExecuteCallsReuseTheirInputBuffers(t *testing.T) {
	dir := artifacttest.Backcompat()
	m, err := OpenArtifact(ctx, testPlugin(t), openAt(t, dir), "nested")
	if err != nil {
		t.Fatal(err)
	}
	prog := m.Programs[0]
	var cases [][][]byte
	for _, c := range m.Manifest.GetGoldens() {
		var in [][]byte
		for _, a := range prog.Inputs {
			npy, err := conformance.ReadNpy(filepath.Join(dir, c.GetInputs()[a.GetName()]))
			if err != nil {
				t.Fatal(err)
			}
			in = append(in, npy.Data)
		}
		cases = append(cases, in)
	}
	want := make([][][]byte, len(cases))
	for i, in := range cases {
		if want[i], err = prog.executeUploading(in); err != nil {
			t.Fatal(err)
		}
	}
	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			for i := range 50 {
				k := (g + i) % len(cases)
				got, err := prog.Execute(cases[k])
				if err != nil {
					errs <- err
					return
				}
				for j := range got {
					if !bytes.Equal(got[j], want[k][j]) {
						errs <- fmt.Errorf("caller %d call %d: result %s differs from PJRT's transfer", g, i, prog.Results[j].GetName())
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(prog.calls.free); n < 1 || n > callers {
		t.Fatalf("%d input sets pooled for %d callers", n, callers)
	}
	if !prog.calls.checked.Load() || prog.calls.viaPJRT.Load() {
		t.Fatal("the results read from their memory did not match PJRT's transfer on the first call")
	}
	m.Close()
	if len(prog.calls.free) != 0 || !prog.calls.closed {
		t.Fatal("Close left input sets in the pool")
	}
}

// BenchmarkExecute runs the first program of $JAXPORT_BENCH_EXECUTE_ARTIFACT (default: the
// committed back-compat artifact) on zeros, one caller at a time: the engine's cost per call
// (host copies in and out, the PJRT calls, the program), with allocations; `host` is Execute
// on the CPU plugin (reused input buffers, results read from their memory), `pjrt` the path
// of other plugins (every input uploaded, every result read back through PJRT) on the same
// program, alternated so both see the same machine.
//
//	JAXPORT_BENCH_EXECUTE_ARTIFACT=/path/to/mlp8/1 go test ./engine -run '^$' -bench Execute -benchmem
func BenchmarkExecute(b *testing.B) {
	dir := os.Getenv("JAXPORT_BENCH_EXECUTE_ARTIFACT")
	if dir == "" {
		dir = artifacttest.Backcompat()
	}
	m, err := OpenArtifact(ctx, testPlugin(b), openAt(b, dir), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prog := m.Programs[0]
	inputs := make([][]byte, len(prog.Inputs))
	for i, in := range prog.Inputs {
		inputs[i] = make([]byte, in.GetByteSize())
	}
	for _, path := range []struct {
		name string
		call func([][]byte) ([][]byte, error)
	}{{"host", prog.Execute}, {"pjrt", prog.executeUploading}, {"host", prog.Execute}, {"pjrt", prog.executeUploading}} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := path.call(inputs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
