package repository_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/bridge/front/repository"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
)

// brokenRepository is mlp (versions 1, 2) and mixed next to what cannot be served: tampered
// weights, a missing file, a version directory that is a symlink out of the repository, a
// file that is one (same bytes: only the path rule can refuse it), a model without versions.
func brokenRepository(t *testing.T) string {
	root := makeRepository(t, filepath.Join(t.TempDir(), "repo"), map[string][]int{"mlp": {1, 2}, "mixed": {1},
		"tampered": {1}, "missing": {1}, "sneaky": {1}})
	flipFirstChunk(t, filepath.Join(root, "tampered", "1"))
	must(t, os.Remove(filepath.Join(root, "missing", "1", "model.mlirbc")))
	outside := t.TempDir()
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(outside, "art"))
	must(t, os.MkdirAll(filepath.Join(root, "escape"), 0o755))
	must(t, os.Symlink(filepath.Join(outside, "art"), filepath.Join(root, "escape", "1")))
	jx := filepath.Join(root, "sneaky", "1", "model.jaxexport")
	must(t, os.Remove(jx))
	must(t, os.Symlink(filepath.Join(outside, "art", "model.jaxexport"), jx))
	must(t, os.MkdirAll(filepath.Join(root, "empty", "not-a-version"), 0o755))
	return root
}

func TestStartupRefusesBrokenArtifactsAndServesTheRest(t *testing.T) {
	root := brokenRepository(t)
	r, log := newRepo(t, root, repository.Options{})
	r.Start(ctx)
	idx := index(r, false)
	want := map[string]row{
		"mlp/2": {"READY", ""}, "mlp/1": {"UNAVAILABLE", "not loaded"}, "mixed/1": {"READY", ""},
		"escape/1":  {"UNAVAILABLE", "'escape/1' resolves outside the repository; refused"},
		"sneaky/1":  {"UNAVAILABLE", "manifest.json: files['model.jaxexport']: path 'model.jaxexport' resolves outside 1/; refused"},
		"missing/1": {"UNAVAILABLE", "checksum verification failed: missing/1/model.mlirbc: file listed in the manifest is missing"},
		"empty/":    {"UNAVAILABLE", "no version directories (expected empty/1/ ...)"},
	}
	for k, w := range want {
		if idx[k] != w {
			t.Errorf("%s: %+v, want %+v", k, idx[k], w)
		}
	}
	chunk := artifacttest.FirstChunk(t, filepath.Join(root, "tampered", "1"))
	if got := idx["tampered/1"]; got.state != "UNAVAILABLE" ||
		!strings.HasPrefix(got.reason, "checksum verification failed: tampered/1/"+chunk+": sha256 mismatch: expected ") {
		t.Errorf("tampered: %+v", got)
	}
	if len(idx) != 8 {
		t.Errorf("index %v", keys(idx))
	}
	if got := keys(index(r, true)); strings.Join(got, " ") != "mixed/1 mlp/2" {
		t.Errorf("ready only: %v", got)
	}
	for _, row := range idx {
		if strings.Contains(row.reason, root) {
			t.Errorf("a reason names the server's path: %s", row.reason)
		}
	}
	// The log has the reasons too, with full paths for the operator.
	failed := map[string]bool{}
	for _, rec := range log.records("model failed to load") {
		failed[rec["model"].(string)] = true
		if rec["model"] == "tampered" && !strings.Contains(rec["reason"].(string), root) {
			t.Errorf("log reason without the full path: %v", rec["reason"])
		}
	}
	if len(failed) != 4 || !failed["tampered"] || !failed["missing"] || !failed["escape"] || !failed["sneaky"] {
		t.Errorf("failed to load: %v", failed)
	}
	notLoaded := log.records("model not loaded")
	if len(notLoaded) != 5 || !strings.Contains(strings.Join(fieldOf(notLoaded, "model"), " "), "empty") {
		t.Errorf("not loaded: %v", notLoaded)
	}
	if len(log.records("path outside the repository")) != 1 {
		t.Errorf("the escaping version is not logged with where it leads")
	}
}

func fieldOf(recs []map[string]any, field string) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r[field].(string))
	}
	return out
}

func TestGetAnswersWhatServesAndSaysWhyNot(t *testing.T) {
	root := brokenRepository(t)
	r, _ := newRepo(t, root, repository.Options{})
	r.Start(ctx)
	s, err := r.Get("mlp", "")
	must(t, err)
	if s.version != 2 || s.inflight.Load() != 1 || s.location != filepath.Join(root, "mlp", "2") {
		t.Fatalf("got %+v", s)
	}
	s.Done()
	if ready, err := r.Ready("tampered", ""); ready || err != nil {
		t.Fatalf("tampered ready %v %v", ready, err)
	}
	_, err = r.Get("tampered", "")
	wantStatus(t, err, codes.Unavailable, "model 'tampered' has no ready version (version 1 is UNAVAILABLE: checksum "+
		"verification failed: tampered/1/weights/", false)
	_, err = r.Get("tampered", "1")
	wantStatus(t, err, codes.Unavailable, "model 'tampered' version 1 is UNAVAILABLE: checksum verification failed: ", false)
	_, err = r.Get("mlp", "1")
	wantStatus(t, err, codes.Unavailable, "model 'mlp' version 1 is not loaded (version policy 'latest'); loaded: 2", true)
	_, err = r.Get("mlp", "7")
	wantStatus(t, err, codes.NotFound, "model 'mlp' has no version '7' (known: 2)", true)
	_, err = r.Get("nope", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'nope' (known models: escape, missing, mixed, mlp, sneaky, tampered)", true)
	_, err = r.Get("empty", "")
	wantStatus(t, err, codes.Unavailable, "model 'empty' is not loaded; load it first", true)
	_, err = r.Get("../mlp", "")
	wantStatus(t, err, codes.NotFound, "unknown model '../mlp': not a valid model name ("+repository.NameRule+")", true)
	_, err = r.Get("mlp", "01")
	wantStatus(t, err, codes.NotFound, "model 'mlp' has no version '01': not a valid model version ("+repository.VersionRule+")", true)
	if ready, err := r.Ready("ghost", ""); ready || err == nil {
		t.Fatalf("ghost ready %v %v", ready, err)
	}
	all, err := r.Serving("")
	must(t, err)
	if len(all) != 2 || all[0].model != "mixed" || all[1].model != "mlp" {
		t.Fatalf("serving %v", all)
	}
	_, err = r.Serving("tampered")
	wantStatus(t, err, codes.Unavailable, "model 'tampered' has no ready version", false)
}

func TestControlModeNoneRefusesLoadAndUnloadAsTritonDoes(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}})
	r, _ := newRepo(t, root, repository.Options{})
	r.Start(ctx)
	for _, err := range []error{r.Load(ctx, "mlp"), r.Unload(ctx, "mlp"), r.Load(ctx, "ghost")} {
		wantStatus(t, err, codes.Unavailable, "explicit model load / unload is not allowed if polling is enabled", true)
	}
	if ready, _ := r.Ready("mlp", ""); !ready {
		t.Fatal("mlp is not ready")
	}
}

func TestExplicitModeLoadsTheNamedModelsAndTakesLoadAndUnload(t *testing.T) {
	root := brokenRepository(t)
	r, _ := newRepo(t, root, repository.Options{Mode: "explicit", LoadModels: []string{"mixed", "ghost"}})
	r.Start(ctx)
	if got := keys(index(r, true)); strings.Join(got, " ") != "mixed/1" {
		t.Fatalf("ready after start: %v", got)
	}
	_, err := r.Get("mlp", "")
	wantStatus(t, err, codes.Unavailable, "model 'mlp' is not loaded; load it first", true)

	must(t, r.Load(ctx, "mlp"))
	first, err := r.Get("mlp", "")
	must(t, err)
	must(t, r.Unload(ctx, "mlp")) // with a request of its own in flight on first
	if !first.closed.Load() || first.inflight.Load() != 1 {
		t.Fatal("unload did not close the served version (its request in flight finishes on it)")
	}
	first.Done()
	if ready, _ := r.Ready("mlp", ""); ready {
		t.Fatal("mlp still ready")
	}
	_, err = r.Get("mlp", "")
	wantStatus(t, err, codes.Unavailable, "model 'mlp' has no ready version (version 2 is UNAVAILABLE: unloaded)", true)
	if idx := index(r, false); idx["mlp/2"] != (row{"UNAVAILABLE", "unloaded"}) || idx["mixed/1"].state != "READY" {
		t.Fatalf("index after unload: %v", idx)
	}
	must(t, r.Load(ctx, "mlp"))
	again, err := r.Get("mlp", "2")
	must(t, err)
	again.Done()
	if again == first {
		t.Fatal("load did not open the version again")
	}

	// A broken model: FAILED_PRECONDITION naming it, the version and why; the rest serve.
	err = r.Load(ctx, "tampered")
	wantStatus(t, err, codes.FailedPrecondition, "model 'tampered' failed to load: version 1: checksum verification failed: "+
		"tampered/1/weights/", false)
	// Repaired on disk, it loads.
	must(t, os.RemoveAll(filepath.Join(root, "tampered", "1")))
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, "tampered", "1"))
	must(t, r.Load(ctx, "tampered"))
	// A model added at run time.
	_, err = r.Ready("newcomer", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'newcomer'", false)
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, "newcomer", "3"))
	must(t, r.Load(ctx, "newcomer"))
	if ready, err := r.Ready("newcomer", "3"); !ready || err != nil {
		t.Fatalf("newcomer %v %v", ready, err)
	}
	err = r.Load(ctx, "empty")
	wantStatus(t, err, codes.FailedPrecondition, "model 'empty' has no version directories (e.g. empty/1/)", true)
	for name, want := range map[string]string{
		"ghost":   "unknown model 'ghost': no directory ghost/ in the repository (known models: empty, escape, missing, mixed, mlp, newcomer, sneaky, tampered)",
		"../mlp":  "unknown model '../mlp': not a valid model name",
		"":        "unknown model '': not a valid model name",
		".hidden": "unknown model '.hidden': not a valid model name",
	} {
		wantStatus(t, r.Load(ctx, name), codes.NotFound, want, false)
	}
	wantStatus(t, r.Unload(ctx, "x"), codes.NotFound, "unknown model 'x': nothing to unload (known models: ", false)
	must(t, r.Unload(ctx, "empty")) // a model with nothing loaded: nothing to do
}

func TestExplicitModeStar(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"a": {1}, "b": {1}})
	r, _ := newRepo(t, root, repository.Options{Mode: "explicit", LoadModels: []string{"*"}})
	r.Start(ctx)
	if got := keys(index(r, true)); strings.Join(got, " ") != "a/1 b/1" {
		t.Fatalf("ready: %v", got)
	}
	none, _ := newRepo(t, root, repository.Options{Mode: "explicit"})
	none.Start(ctx)
	if got := keys(index(none, true)); len(got) != 0 {
		t.Fatalf("explicit without --load-model loaded %v", got)
	}
}

func TestVersionPolicyAllAndAReloadThatFailsKeepsServing(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1, 2}})
	r, _ := newRepo(t, root, repository.Options{Policy: "all", Mode: "explicit", LoadModels: []string{"mlp"}})
	r.Start(ctx)
	for _, v := range []string{"1", "2"} {
		if ready, err := r.Ready("mlp", v); !ready || err != nil {
			t.Fatalf("version %s: %v %v", v, ready, err)
		}
	}
	old, err := r.Get("mlp", "2")
	must(t, err)
	old.Done()
	flipFirstChunk(t, filepath.Join(root, "mlp", "2"))
	err = r.Load(ctx, "mlp")
	wantStatus(t, err, codes.FailedPrecondition, "model 'mlp' failed to load: version 2: reload failed, previous load "+
		"still serving: checksum verification failed: mlp/2/weights/", false)
	still, err := r.Get("mlp", "2")
	must(t, err)
	still.Done()
	if still != old || old.closed.Load() {
		t.Fatal("the serving version was replaced or closed by a failed reload")
	}
	if st, _ := r.Status("mlp", 2); st.State != "READY" || !strings.HasPrefix(st.Reason, "reload failed, previous load still serving: ") {
		t.Fatalf("status %+v", st)
	}
	// Dropping to latest: version 1 is no longer selected.
	latest, _ := newRepo(t, root, repository.Options{Mode: "explicit", LoadModels: []string{"*"}})
	latest.Start(ctx)
	if idx := index(latest, false); idx["mlp/1"] != (row{"UNAVAILABLE", "not loaded"}) || idx["mlp/2"].state != "UNAVAILABLE" {
		t.Fatalf("index %v", idx)
	}
}

func TestSuccessfulReloadReplacesAndClosesThePreviousVersion(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}})
	r, _ := newRepo(t, root, repository.Options{Mode: "explicit", LoadModels: []string{"*"}})
	r.Start(ctx)
	old, err := r.Get("mlp", "")
	must(t, err)
	must(t, r.Load(ctx, "mlp"))
	if !old.closed.Load() || old.inflight.Load() != 1 {
		t.Fatal("the replaced version is not closed (its request still in flight is its own business)")
	}
	old.Done()
	cur, err := r.Get("mlp", "")
	must(t, err)
	cur.Done()
	if cur == old {
		t.Fatal("not replaced")
	}
	// Versions no longer selected by the policy are unloaded and closed.
	artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, "mlp", "2"))
	must(t, r.Load(ctx, "mlp"))
	if !cur.closed.Load() {
		t.Fatal("version 1 still open")
	}
	if st, _ := r.Status("mlp", 1); st.Reason != "unloaded: not selected by the 'latest' version policy" {
		t.Fatalf("version 1: %+v", st)
	}
}

func TestNamesAndVersionsFollowTheRule(t *testing.T) {
	for _, ok := range []string{"mlp", "a", "A-b_c.1", strings.Repeat("x", 255), "_", "-x"} {
		must(t, repository.CheckName(ok))
	}
	for _, bad := range []string{strings.Repeat("m", 256), "../mlp", "mlp/1", ".hidden", "a\x00b", "ml p", "\u00e9", "", ".", "..", "a\n", `a\b`} {
		err := repository.CheckName(bad)
		wantStatus(t, err, codes.NotFound, "unknown model ", false)
		if !strings.Contains(err.Error(), "not a valid model name ("+repository.NameRule+")") || len(err.Error()) > 400 {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if n, latest, err := repository.VersionNumber("m", ""); n != 0 || !latest || err != nil {
		t.Fatal("latest")
	}
	if n, _, err := repository.VersionNumber("m", strings.Repeat("9", 19)); n != 9999999999999999999 || err != nil {
		t.Fatalf("19 nines: %d %v", n, err)
	}
	for _, bad := range []string{strings.Repeat("9", 4301), strings.Repeat("9", 20), "\u00b2", "\u0661", "01", "0", "-1", "+1", " 1", "1.0", "1\n", "\uff11", "1_0"} {
		_, _, err := repository.VersionNumber("m", bad)
		wantStatus(t, err, codes.NotFound, "model 'm' has no version ", false)
		if !strings.Contains(err.Error(), "not a valid model version") || len(err.Error()) > 400 {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestNotFoundNamesAtMostTenKnownModels(t *testing.T) {
	root := t.TempDir()
	var names []string
	for i := range 12 {
		name := "model" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		names = append(names, name)
		must(t, os.MkdirAll(filepath.Join(root, name, "1"), 0o755))
	}
	r, _ := newRepo(t, root, repository.Options{})
	r.Start(ctx)
	_, err := r.Get("nope", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'nope' (known models: "+strings.Join(names[:10], ", ")+" and 2 more)", true)
	_, err = r.Get(strings.Repeat("x", 10000), "")
	wantStatus(t, err, codes.NotFound, "unknown model 'xxx", false)
	if len(err.Error()) > 400 {
		t.Fatal("a hostile name makes a long message")
	}
	empty, _ := newRepo(t, t.TempDir(), repository.Options{})
	empty.Start(ctx)
	_, err = empty.Get("nope", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'nope' (no models in the repository)", true)
}

func TestOptionsAreChecked(t *testing.T) {
	for o, want := range map[*repository.Options]string{
		{Policy: "newest"}:    "version policy must be one of latest, all, got 'newest'",
		{Mode: "auto"}:        "model control mode must be one of none, explicit, poll, got 'auto'",
		{SingleModel: "../x"}: "model name '../x' is not valid (" + repository.NameRule + ")",
	} {
		_, err := repository.New[*served](t.TempDir(), verifyingLoader(nil), *o)
		if err == nil || err.Error() != want {
			t.Errorf("%+v: %v", *o, err)
		}
	}
}

// A manifest edited after export (an input's shape, consistently, so only its program can
// tell) is the version's failure, the same for every engine: no loader sees it.
func TestAManifestThatIsNotItsProgramIsRefusedBeforeAnyEngine(t *testing.T) {
	root := makeRepository(t, filepath.Join(t.TempDir(), "repo"), map[string][]int{"mlp": {1}, "edited": {1}})
	path := filepath.Join(root, "edited", "1", artifact.ManifestFile)
	raw, err := os.ReadFile(path)
	must(t, err)
	m := &jaxportv1.Manifest{}
	must(t, protojson.Unmarshal(raw, m))
	x := m.GetPrograms()[0].GetArguments()[6]
	x.Shape, x.ByteSize = []int64{4, 4}, 64
	m.GetInputs()[0].Shape = x.Shape
	raw, err = protojson.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(path, raw, 0o644))
	counts := &loads{}
	r, err := repository.New[*served](root, verifyingLoader(counts), repository.Options{Log: quiet,
		Mode: "explicit", LoadModels: []string{"*"}})
	must(t, err)
	t.Cleanup(r.Close)
	r.Start(ctx)
	reason := "manifest.json: edited/1/manifest.json: programs[0].arguments[6] ('x'): shape differs from the " +
		"program's: the manifest says tensor<4x4xf32>, @main of model.mlirbc takes tensor<3x4xf32> (was the manifest edited?)"
	if got := index(r, false); got["edited/1"] != (row{"UNAVAILABLE", reason}) || got["mlp/1"] != (row{"READY", ""}) {
		t.Fatalf("index %v", got)
	}
	if n := counts.count("edited/1"); n != 0 {
		t.Fatalf("the loader was given the edited version %d times", n)
	}
	_, err = r.Get("edited", "1")
	wantStatus(t, err, codes.Unavailable, "model 'edited' version 1 is UNAVAILABLE: "+reason, true)
	wantStatus(t, r.Load(ctx, "edited"), codes.FailedPrecondition, "model 'edited' failed to load: version 1: "+reason, true)
}
