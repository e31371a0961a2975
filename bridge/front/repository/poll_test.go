package repository_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"google.golang.org/grpc/codes"
)

// touchManifest changes a version's manifest.json bytes (not what it says), as a re-export
// changes its exportedAt.
func touchManifest(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, artifact.ManifestFile)
	raw, err := os.ReadFile(path)
	must(t, err)
	must(t, os.WriteFile(path, append(raw, ' '), 0o644))
}

// TestPollModeFollowsTheRepository: each rescan (Rescan, what the ticker calls) loads new
// versions, reloads changed ones, keeps serving when a reload fails, unloads removed ones;
// load/unload requests are refused as Triton refuses them.
func TestPollModeFollowsTheRepository(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}, "other": {1}})
	counts := &loads{}
	r, err := repository.New[*served](root, verifyingLoader(counts), repository.Options{Mode: "poll", PollEvery: time.Hour, Log: quiet})
	must(t, err)
	defer r.Close()
	r.Start(ctx)
	for _, err := range []error{r.Load(ctx, "mlp"), r.Unload(ctx, "mlp")} {
		wantStatus(t, err, codes.Unavailable, repository.ControlRefused, true)
	}
	v1, err := r.Get("mlp", "")
	must(t, err)
	v1.Done()

	r.Rescan(ctx) // nothing changed: nothing is loaded again
	if counts.count("mlp/1") != 1 || counts.count("other/1") != 1 {
		t.Fatalf("loads %v", counts.n)
	}

	// A new version: loaded; the old one is no longer selected (latest) and is closed.
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, "mlp", "2"))
	r.Rescan(ctx)
	v2, err := r.Get("mlp", "")
	must(t, err)
	v2.Done()
	if v2.version != 2 || !v1.closed.Load() {
		t.Fatalf("after a new version: serving %d, version 1 closed %v", v2.version, v1.closed.Load())
	}
	if st, _ := r.Status("mlp", 1); st.Reason != "unloaded: not selected by the 'latest' version policy" {
		t.Fatalf("version 1 %+v", st)
	}

	// A changed manifest: reloaded (the new Served replaces and closes the old one).
	touchManifest(t, filepath.Join(root, "mlp", "2"))
	r.Rescan(ctx)
	v2b, err := r.Get("mlp", "")
	must(t, err)
	v2b.Done()
	if v2b == v2 || !v2.closed.Load() || counts.count("mlp/2") != 2 || v2b.manifest == v2.manifest {
		t.Fatalf("changed manifest not reloaded: %d loads", counts.count("mlp/2"))
	}

	// A change that does not load: the serving version stays, the reason says so.
	touchManifest(t, filepath.Join(root, "mlp", "2"))
	flipFirstChunk(t, filepath.Join(root, "mlp", "2"))
	r.Rescan(ctx)
	still, err := r.Get("mlp", "")
	must(t, err)
	still.Done()
	st, _ := r.Status("mlp", 2)
	if still != v2b || v2b.closed.Load() || st.State != "READY" ||
		!strings.HasPrefix(st.Reason, "reload failed, previous load still serving: checksum verification failed: mlp/2/weights/") {
		t.Fatalf("failed reload: %+v", st)
	}
	r.Rescan(ctx) // the same broken manifest is not tried again at every rescan
	if counts.count("mlp/2") != 3 {
		t.Fatalf("%d loads of mlp/2", counts.count("mlp/2"))
	}

	// A removed model: unloaded, closed, gone from the index and the table.
	gone, err := r.Get("other", "")
	must(t, err)
	gone.Done()
	must(t, os.RemoveAll(filepath.Join(root, "other")))
	r.Rescan(ctx)
	if !gone.closed.Load() {
		t.Fatal("removed model still open")
	}
	if _, ok := index(r, false)["other/1"]; ok {
		t.Fatal("removed model still listed")
	}
	_, err = r.Get("other", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'other' (known models: mlp)", true)

	// A removed version: the one before it serves again.
	must(t, os.RemoveAll(filepath.Join(root, "mlp", "2")))
	r.Rescan(ctx)
	back, err := r.Get("mlp", "")
	must(t, err)
	back.Done()
	if back.version != 1 || !still.closed.Load() {
		t.Fatalf("serving %d after removing version 2", back.version)
	}
	if got := keys(index(r, false)); strings.Join(got, " ") != "mlp/1" {
		t.Fatalf("index %v", got)
	}
}

// TestPollModeRescansOnItsOwn: the ticker's rescans, awaited through OnChange (no sleeps),
// load a version copied into the repository file by file while they run (the copy is not
// atomic: the version fails while partial, and loads once it is whole).
func TestPollModeRescansOnItsOwn(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}})
	var mu sync.Mutex
	states := map[string]string{}
	changed := make(chan struct{}, 1)
	r, err := repository.New[*served](root, verifyingLoader(nil), repository.Options{Mode: "poll", Log: quiet,
		PollEvery: 10 * time.Millisecond, OnChange: func(s repository.Status) {
			mu.Lock()
			states[s.Name+"/"+s.VersionString()] = s.State
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	must(t, err)
	r.Start(ctx)
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, "mlp", "2"))
	deadline := time.After(2 * time.Minute)
	for {
		mu.Lock()
		done := states["mlp/2"] == "READY" && states["mlp/1"] == "UNAVAILABLE"
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no rescan loaded mlp/2: %v", states)
		}
	}
	served, err := r.Serving("mlp")
	must(t, err)
	r.Close()
	if len(served) != 1 || served[0].version != 2 || !served[0].closed.Load() {
		t.Fatalf("serving %v; Close must close it", served)
	}
}

// TestPollModeDoesNotRetryWhatCannotChange: a version that resolves outside the repository is
// refused once, not again at every rescan (nor logged again) while it stays so.
func TestPollModeDoesNotRetryWhatCannotChange(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}})
	outside := t.TempDir()
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(outside, "art"))
	must(t, os.MkdirAll(filepath.Join(root, "escape"), 0o755))
	must(t, os.Symlink(filepath.Join(outside, "art"), filepath.Join(root, "escape", "1")))
	r, log := newRepo(t, root, repository.Options{Mode: "poll", PollEvery: time.Hour})
	r.Start(ctx)
	r.Rescan(ctx)
	r.Rescan(ctx)
	if n := len(log.records("path outside the repository")); n != 1 {
		t.Fatalf("refused %d times", n)
	}
	if st, _ := r.Status("escape", 1); st.Reason != "'escape/1' resolves outside the repository; refused" {
		t.Fatalf("%+v", st)
	}
}
