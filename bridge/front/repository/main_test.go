package repository_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	code := m.Run()
	artifacttest.StopMoto()
	os.Exit(code)
}

var ctx = context.Background()

var quiet = slog.New(slog.DiscardHandler)

// served is what the tests' loader opens: a real read of the version (every listed file
// checked against its sha256, as an engine's load does), and the in-flight accounting the
// front's models have.
type served struct {
	model    string
	version  uint64
	location string
	manifest string // its sha256
	closed   atomic.Bool
	inflight atomic.Int32
}

func (s *served) Close() { s.closed.Store(true) }

func (s *served) Acquire() bool {
	if s.closed.Load() {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *served) Done() { s.inflight.Add(-1) }

// loads counts the loader's calls by "model/version".
type loads struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *loads) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[key]
}

func verifyingLoader(counts *loads) repository.Loader[*served] {
	return repository.LoaderFunc[*served](func(ctx context.Context, v *repository.Version) (*served, error) {
		if counts != nil {
			counts.mu.Lock()
			if counts.n == nil {
				counts.n = map[string]int{}
			}
			counts.n[v.Model+"/"+v.String()]++
			counts.mu.Unlock()
		}
		if err := v.Artifact.VerifyFiles(ctx, nil); err != nil {
			return nil, err
		}
		return &served{model: v.Model, version: v.Number, location: v.Location, manifest: v.Artifact.ManifestSHA256}, nil
	})
}

// logs is a JSON slog handler's output, as records.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

func newRepo(t *testing.T, root string, o repository.Options) (*repository.Repository[*served], *logs) {
	t.Helper()
	l := &logs{}
	o.Log = slog.New(slog.NewJSONHandler(l, nil))
	r, err := repository.New[*served](root, verifyingLoader(nil), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, l
}

// makeRepository puts a copy of the back-compat artifact at root/<model>/<version> for each.
func makeRepository(t *testing.T, root string, models map[string][]int) string {
	t.Helper()
	for name, versions := range models {
		for _, v := range versions {
			artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, name, strconv.Itoa(v)))
		}
	}
	return root
}

// writeIndex writes root/index.json as `python -m jaxport.artifact.index` does: a model
// directory lists its versions, anything else its models and each one's versions.
func writeIndex(t *testing.T, root string) {
	t.Helper()
	versions := func(dir string) []int {
		out := []int{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			n, err := strconv.Atoi(e.Name())
			if err == nil && n > 0 && strconv.Itoa(n) == e.Name() {
				if _, err := os.Stat(filepath.Join(dir, e.Name(), artifact.ManifestFile)); err == nil {
					out = append(out, n)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	index := map[string]any{"jaxport_index": 1}
	if v := versions(root); len(v) > 0 {
		index["versions"] = v
	} else {
		models := map[string][]int{}
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				models[e.Name()] = versions(filepath.Join(root, e.Name()))
			}
		}
		index["models"] = models
	}
	raw, _ := json.Marshal(index)
	must(t, os.WriteFile(filepath.Join(root, artifact.IndexFile), raw, 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantStatus: err has code and its message starts with prefix (exactly equals it when exact).
func wantStatus(t *testing.T, err error, code codes.Code, prefix string, exact bool) {
	t.Helper()
	s, ok := grpcstatus.FromError(err)
	if err == nil || !ok || s.Code() != code {
		t.Fatalf("error %v (code %v), want %v %q", err, grpcstatus.Code(err), code, prefix)
	}
	if exact && s.Message() != prefix || !exact && !strings.HasPrefix(s.Message(), prefix) {
		t.Fatalf("message\n  %s\nwant\n  %s", s.Message(), prefix)
	}
}

type row struct{ state, reason string }

func index(r *repository.Repository[*served], readyOnly bool) map[string]row {
	out := map[string]row{}
	for _, s := range r.Index(ctx, readyOnly) {
		out[s.Name+"/"+s.VersionString()] = row{s.State, s.Reason}
	}
	return out
}

func keys(m map[string]row) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func flipFirstChunk(t *testing.T, dir string) string {
	t.Helper()
	chunk := artifacttest.FirstChunk(t, dir)
	artifacttest.FlipByte(t, filepath.Join(dir, chunk))
	return chunk
}

var _ = errors.New
var _ = fmt.Sprint
