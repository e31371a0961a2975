package repository_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"google.golang.org/grpc/codes"
)

func TestRepositoryOverHTTPIsListedByItsIndex(t *testing.T) {
	root := makeRepository(t, filepath.Join(t.TempDir(), "repo"), map[string][]int{"mlp": {1, 2}, "mixed": {1}, "tampered": {1}})
	chunk := flipFirstChunk(t, filepath.Join(root, "tampered", "1"))
	writeIndex(t, root)
	makeRepository(t, root, map[string][]int{"late": {1}}) // on disk, not in the index yet
	srv, reqs := artifacttest.ServeDir(t, root)
	r, _ := newRepo(t, srv.URL, repository.Options{Mode: "explicit", LoadModels: []string{"*"}})
	r.Start(ctx)
	idx := index(r, false)
	if strings.Join(keys(idx), " ") != "mixed/1 mlp/1 mlp/2 tampered/1" || idx["mlp/2"].state != "READY" || idx["mlp/1"].reason != "not loaded" {
		t.Fatalf("index %v", idx)
	}
	// The same tampering on disk: the same reason, relative to the repository either way.
	local, _ := newRepo(t, root, repository.Options{Mode: "explicit"})
	onDisk := local.Load(ctx, "tampered")
	byURL := r.Load(ctx, "tampered")
	wantStatus(t, byURL, codes.FailedPrecondition, "model 'tampered' failed to load: version 1: checksum verification failed: "+
		"tampered/1/"+chunk+": sha256 mismatch: expected ", false)
	if onDisk == nil || onDisk.Error() != byURL.Error() {
		t.Fatalf("on disk %v\nby URL %v", onDisk, byURL)
	}
	if reason := index(r, false)["tampered/1"].reason; strings.Contains(reason, "127.0.0.1") || !strings.HasPrefix(reason, "checksum verification failed: tampered/1/") {
		t.Fatalf("reason %s", reason)
	}
	s, err := r.Get("mlp", "")
	must(t, err)
	s.Done()
	if s.location != srv.URL+"/mlp/2" {
		t.Fatalf("location %s", s.location)
	}
	for _, p := range []string{"/index.json", "/mlp/2/manifest.json", "/mlp/2/model.mlirbc"} {
		if !reqs.Has(p) {
			t.Errorf("%s not requested", p)
		}
	}
	for _, p := range reqs.Paths() {
		if strings.HasPrefix(p, "/mlp/1/") {
			t.Errorf("%s requested (policy latest)", p)
		}
	}
	// What the index does not list is not served; republishing the index adds it.
	wantStatus(t, r.Load(ctx, "late"), codes.NotFound, "unknown model 'late': no directory late/ in the repository", false)
	writeIndex(t, root)
	must(t, r.Load(ctx, "late"))
}

func TestFileURLRepository(t *testing.T) {
	root := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1}})
	r, _ := newRepo(t, "file://"+root, repository.Options{})
	r.Start(ctx)
	if r.Root() != root {
		t.Fatalf("root %s", r.Root())
	}
	if ready, err := r.Ready("mlp", "1"); !ready || err != nil {
		t.Fatal(ready, err)
	}
}

func TestSingleModelRoots(t *testing.T) {
	// /mnt/models holding one artifact: served as NAME, version 1.
	mnt := filepath.Join(t.TempDir(), "mnt", "models")
	artifacttest.CopyTree(t, artifacttest.Backcompat(), mnt)
	must(t, repository.CheckRoot(ctx, mnt, "classifier"))
	r, _ := newRepo(t, mnt, repository.Options{SingleModel: "classifier"})
	r.Start(ctx)
	if got := keys(index(r, false)); strings.Join(got, " ") != "classifier/1" {
		t.Fatalf("index %v", got)
	}
	s, err := r.Get("classifier", "1")
	must(t, err)
	s.Done()
	if s.location != mnt {
		t.Fatalf("location %s", s.location)
	}
	_, err = r.Get("mlp", "")
	wantStatus(t, err, codes.NotFound, "unknown model 'mlp' (known models: classifier)", true)

	// /mnt/models holding version directories: the policy picks among them.
	models := filepath.Join(makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1, 2}}), "mlp")
	m, _ := newRepo(t, models, repository.Options{SingleModel: "classifier"})
	if idx := index(m, false); idx["classifier/1"].reason != "not loaded" || idx["classifier/2"].reason != "not loaded" {
		t.Fatalf("before start %v", idx)
	}
	m.Start(ctx)
	if idx := index(m, true); strings.Join(keys(idx), " ") != "classifier/2" {
		t.Fatalf("ready %v", keys(idx))
	}
	wantStatus(t, m.Load(ctx, "x"), codes.Unavailable, repository.ControlRefused, true)

	// By URL: a version directory (its manifest.json) and a model directory (its index.json).
	repo := makeRepository(t, t.TempDir(), map[string][]int{"mlp": {1, 3}})
	writeIndex(t, filepath.Join(repo, "mlp"))
	srv, reqs := artifacttest.ServeDir(t, repo)
	v, _ := newRepo(t, srv.URL+"/mlp/1", repository.Options{SingleModel: "m"})
	v.Start(ctx)
	if got := keys(index(v, true)); strings.Join(got, " ") != "m/1" {
		t.Fatalf("version by URL: %v", got)
	}
	must(t, repository.CheckRoot(ctx, srv.URL+"/mlp", "m"))
	d, _ := newRepo(t, srv.URL+"/mlp", repository.Options{SingleModel: "m"})
	d.Start(ctx)
	if idx := index(d, false); idx["m/3"].state != "READY" || idx["m/1"].reason != "not loaded" {
		t.Fatalf("model by URL: %v", idx)
	}
	if !reqs.Has("/mlp/3/model.mlirbc") {
		t.Fatal("mlp/3 not read over HTTP")
	}

	// A tampered single-model root names the file relative to the root.
	tampered := filepath.Join(t.TempDir(), "models")
	artifacttest.CopyTree(t, artifacttest.Backcompat(), tampered)
	chunk := flipFirstChunk(t, tampered)
	tr, _ := newRepo(t, tampered, repository.Options{SingleModel: "m"})
	tr.Start(ctx)
	if st, _ := tr.Status("m", 1); st.State != "UNAVAILABLE" || !strings.HasPrefix(st.Reason, "checksum verification failed: "+chunk+": sha256 mismatch") {
		t.Fatalf("tampered root: %+v", st)
	}
}

func TestCheckRootSaysWhatIsWrongInOneLine(t *testing.T) {
	tmp := t.TempDir()
	repo := makeRepository(t, filepath.Join(tmp, "repo"), map[string][]int{"mlp": {1}})
	must(t, repository.CheckRoot(ctx, repo, ""))
	must(t, repository.CheckRoot(ctx, "file://"+repo, ""))
	check := func(root, single, want string) {
		t.Helper()
		err := repository.CheckRoot(ctx, root, single)
		if err == nil || err.Error() != want {
			t.Fatalf("CheckRoot(%s, %q) = %v\nwant %s", root, single, err, want)
		}
	}
	check(filepath.Join(tmp, "nowhere"), "", "--repository "+filepath.Join(tmp, "nowhere")+" is not a directory")
	check(repo, "m", "--repository "+repo+" is neither an artifact (no manifest.json) nor a model directory (no version "+
		"directories 1/, 2/ ...) to serve as model 'm'")
	check(filepath.Join(repo, "mlp"), "../x", "--repository "+filepath.Join(repo, "mlp")+": unknown model '../x': not a valid "+
		"model name ("+repository.NameRule+")")
	check("gs://bucket/repo", "", "--repository gs://bucket/repo: 'gs://bucket/repo': gs:// is not supported (supported: a "+
		"local path, file://, http://, https://, s3://); copy the artifacts to a local directory, serve them over HTTP or put "+
		"them in S3")
	srv, _ := artifacttest.ServeDir(t, repo)
	check(srv.URL, "", "--repository "+srv.URL+": no index.json (a repository by URL is listed by it: run python -m "+
		"jaxport.artifact.index on the repository directory and publish it again)")
	writeIndex(t, filepath.Join(repo, "mlp"))
	check(srv.URL+"/mlp", "", "--repository "+srv.URL+"/mlp: its index.json lists versions, so it is one model: serve it with "+
		"--model-name NAME")
	must(t, repository.CheckRoot(ctx, srv.URL+"/mlp", "m"))
	check(srv.URL+"/nothing", "m", "--repository "+srv.URL+"/nothing is neither an artifact (no manifest.json) nor a model "+
		"directory (no version directories 1/, 2/ ... listed in its index.json) to serve as model 'm'")
	must(t, os.WriteFile(filepath.Join(repo, artifact.IndexFile), []byte("{"), 0o644))
	err := repository.CheckRoot(ctx, srv.URL, "")
	if err == nil || !strings.HasPrefix(err.Error(), "--repository "+srv.URL+": "+srv.URL+"/index.json is not JSON: ") {
		t.Fatal(err)
	}
}

// TestRepositoryInS3: `--repository s3://BUCKET/PREFIX` with the standard AWS environment,
// against a real S3-compatible server: listed by its index.json, every file read from the
// bucket, a tampered chunk refused with the local reason; a missing bucket and missing
// credentials are one line each.
func TestRepositoryInS3(t *testing.T) {
	m := artifacttest.SharedMoto(t)
	root := makeRepository(t, filepath.Join(t.TempDir(), "repo"), map[string][]int{"mlp": {1}, "mixed": {1}, "tampered": {1}})
	flipFirstChunk(t, filepath.Join(root, "tampered", "1"))
	writeIndex(t, root)
	local, _ := newRepo(t, root, repository.Options{})
	local.Start(ctx)
	want := index(local, false)["tampered/1"]
	m.CreateBucket(t, "models")
	m.Upload(t, "models", "repo", root)
	must(t, os.RemoveAll(root)) // every file now comes from the bucket
	opts := []artifact.Option{artifact.WithEnv(artifacttest.Getenv(m.Env()))}
	must(t, repository.CheckRoot(ctx, "s3://models/repo", "", opts...))
	r, _ := newRepo(t, "s3://models/repo", repository.Options{Store: opts})
	r.Start(ctx)
	idx := index(r, false)
	if idx["mlp/1"].state != "READY" || idx["mixed/1"].state != "READY" || idx["tampered/1"] != want ||
		!strings.HasPrefix(want.reason, "checksum verification failed: tampered/1/weights/") {
		t.Fatalf("index %v (local tampered %v)", idx, want)
	}
	if strings.Contains(want.reason, "s3://") || strings.Contains(want.reason, m.Endpoint) {
		t.Fatal(want.reason)
	}

	err := repository.CheckRoot(ctx, "s3://no-such-bucket/repo", "", opts...)
	if err == nil || err.Error() != "--repository s3://no-such-bucket/repo: s3://no-such-bucket/repo/index.json: no such bucket "+
		"'no-such-bucket' at "+m.Endpoint {
		t.Fatal(err)
	}
	noKeys := []artifact.Option{artifact.WithEnv(artifacttest.Getenv(map[string]string{"AWS_ENDPOINT_URL_S3": m.Endpoint,
		"AWS_REGION": artifacttest.Region}))}
	err = repository.CheckRoot(ctx, "s3://models/repo", "", noKeys...)
	if err == nil || err.Error() != "--repository s3://models/repo: s3://models/repo/index.json: cannot read: access denied "+
		"(HTTP 403) to bucket 'models' with no credentials (unsigned: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)" {
		t.Fatal(err)
	}
	err = repository.CheckRoot(ctx, "s3://models/repo/nothing-here", "", opts...)
	if err == nil || !strings.Contains(err.Error(), "no index.json") {
		t.Fatal(err)
	}
}
