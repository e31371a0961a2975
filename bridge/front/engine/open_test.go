//go:build cgo

package engine

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/clients/go/conformance"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

var (
	pluginOnce sync.Once
	plugin     *Plugin
	pluginErr  error
)

// testPlugin is the CPU plugin `make pjrt-plugin` puts in the checkout (or $JAXPORT_PJRT_PLUGIN);
// a test that needs it fails without it.
func testPlugin(t testing.TB) *Plugin {
	t.Helper()
	pluginOnce.Do(func() {
		choice := os.Getenv(PluginEnv)
		if choice == "" {
			choice = filepath.Join(artifacttest.RepoRoot(), CPUPluginDir, CPUPluginFile)
		}
		plugin, pluginErr = LoadPlugin(choice)
	})
	if pluginErr != nil {
		t.Fatalf("the CPU PJRT plugin (run `make pjrt-plugin` or set %s): %v", PluginEnv, pluginErr)
	}
	return plugin
}

func openAt(t testing.TB, where string) *artifact.Artifact {
	t.Helper()
	s, err := artifact.Locate(where)
	if err != nil {
		t.Fatal(err)
	}
	a, err := artifact.Open(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// runGoldens executes every golden case of the back-compat artifact (dir holds its files) and
// compares each output with JAX's: int32 exactly, float32 within |a-e| <= 1e-5 + 1e-4|e|.
func runGoldens(t *testing.T, m *Model, dir string) {
	t.Helper()
	prog := m.Programs[0]
	for _, c := range m.Manifest.GetGoldens() {
		inputs := make([][]byte, len(prog.Inputs))
		for i, in := range prog.Inputs {
			npy, err := conformance.ReadNpy(filepath.Join(dir, c.GetInputs()[in.GetName()]))
			if err != nil {
				t.Fatal(err)
			}
			inputs[i] = npy.Data
		}
		out, err := prog.Execute(inputs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range prog.Results {
			want, err := conformance.ReadNpy(filepath.Join(dir, c.GetOutputs()[r.GetName()]))
			if err != nil {
				t.Fatal(err)
			}
			if len(out[i]) != len(want.Data) {
				t.Fatalf("%s %s: %d bytes, want %d", c.GetName(), r.GetName(), len(out[i]), len(want.Data))
			}
			for k := 0; k < len(want.Data); k += 4 {
				g, w := binary.LittleEndian.Uint32(out[i][k:]), binary.LittleEndian.Uint32(want.Data[k:])
				if r.GetDtype().GetNumpy() == "float32" {
					gf, wf := float64(math.Float32frombits(g)), float64(math.Float32frombits(w))
					if math.Abs(gf-wf) > 1e-5+1e-4*math.Abs(wf) {
						t.Fatalf("%s %s[%d]: %g, JAX %g", c.GetName(), r.GetName(), k/4, gf, wf)
					}
				} else if g != w {
					t.Fatalf("%s %s[%d]: %d, JAX %d", c.GetName(), r.GetName(), k/4, g, w)
				}
			}
		}
	}
}

// TestOpenArtifactAnswersTheGoldens: the committed artifact opened from a directory, over
// HTTP and through host staging answers JAX's goldens; on the CPU plugin every parameter lives
// in a buffer over the memory it was read into (no host copy), staged ones in buffers of
// their own; the load's figures count each parameter once.
func TestOpenArtifactAnswersTheGoldens(t *testing.T) {
	p := testPlugin(t)
	dir := artifacttest.Backcompat()
	srv, reqs := artifacttest.ServeDir(t, dir)
	for _, tc := range []struct {
		name   string
		where  string
		opts   []OpenOption
		shared bool
	}{
		{"directory", dir, nil, true},
		{"http", srv.URL, []OpenOption{WithParallelism(2)}, true},
		{"staged", dir, []OpenOption{WithHostStaging()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := openAt(t, tc.where)
			m, err := OpenArtifact(ctx, p, a, "nested", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			runGoldens(t, m, dir)
			var bytes int64
			params := 0
			for _, arg := range m.Manifest.GetPrograms()[0].GetArguments() {
				if arg.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER {
					bytes += int64(arg.GetByteSize())
					params++
					if shared := m.params[arg.GetName()].IsShared(); shared != tc.shared {
						t.Errorf("parameter %s: shared buffer %v", arg.GetName(), shared)
					}
				}
			}
			if m.Load.Bytes != bytes || m.Load.Chunks != params || m.Load.GiBPerSecond <= 0 || m.Load.Phases["compile"] <= 0 {
				t.Fatalf("load stats %+v (want %d bytes in %d chunks)", m.Load, bytes, params)
			}
		})
	}
	for _, path := range []string{"/manifest.json", "/model.mlirbc", "/model.jaxexport", "/goldens/case1/outputs/head.npy",
		"/weights/params.embed/c/0/0"} {
		if !reqs.Has(path) {
			t.Errorf("%s was not read over HTTP", path)
		}
	}
}

// TestOpenArtifactRefusesWhatDoesNotMatchItsManifest: a tampered chunk, program or golden file
// is a checksum error naming it (the version's load failure, not a refusal that would send it
// to another engine).
func TestOpenArtifactRefusesWhatDoesNotMatchItsManifest(t *testing.T) {
	p := testPlugin(t)
	for _, rel := range []string{"", "model.mlirbc", "goldens/case1/inputs/x.npy", "model.jaxexport"} {
		dir := filepath.Join(t.TempDir(), "1")
		artifacttest.CopyTree(t, artifacttest.Backcompat(), dir)
		if rel == "" {
			rel = artifacttest.FirstChunk(t, dir)
		}
		artifacttest.FlipByte(t, filepath.Join(dir, rel))
		s, err := artifact.Locate(dir)
		if err != nil {
			t.Fatal(err)
		}
		a, err := artifact.Open(ctx, s) // reads (and checks) the program's bytecode
		if err == nil {
			_, err = OpenArtifact(ctx, p, a, "nested")
		}
		var refused *Refused
		if errors.As(err, &refused) || !isChecksum(err) ||
			!strings.HasPrefix(err.Error(), filepath.Join(dir, rel)+": sha256 mismatch: expected ") {
			t.Errorf("%s: %T %v", rel, err, err)
		}
	}
	// Outside the engine's reach: a refusal, one line naming why.
	dir := filepath.Join(t.TempDir(), "1")
	artifacttest.CopyTree(t, artifacttest.Backcompat(), dir)
	a := openAt(t, dir)
	a.Manifest.Platforms = []string{"cuda"}
	_, err := OpenArtifact(ctx, p, a, "nested")
	var refused *Refused
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "lowered for [cuda], the PJRT plugin runs cpu") {
		t.Fatalf("%T %v", err, err)
	}
}
