package artifact_test

import (
	"encoding/pem"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
)

// remoteMessage is msg with the store's root replaced by ROOT.
func remoteMessage(err error, root string) string {
	return strings.ReplaceAll(err.Error(), root, "ROOT")
}

func TestHTTPStoreReadsAndVerifiesLikeTheLocalOne(t *testing.T) {
	repo := filepath.Dir(filepath.Dir(copied(t)))
	dir := filepath.Join(repo, "m", "1")
	srv, reqs := artifacttest.ServeDir(t, repo)
	s, err := artifact.Locate(srv.URL + "/m/1/")
	must(t, err)
	if s.Local() != "" || s.Display("") != srv.URL+"/m/1" || s.Display("model.mlirbc") != srv.URL+"/m/1/model.mlirbc" {
		t.Fatalf("display %q", s.Display(""))
	}
	a, err := artifact.Open(ctx, s)
	must(t, err)
	must(t, a.VerifyFiles(ctx, nil))
	for _, rel := range []string{"manifest.json", "model.mlirbc", artifacttest.FirstChunk(t, dir)} {
		if !reqs.Has("/m/1/" + rel) {
			t.Errorf("%s was not read over HTTP: %v", rel, reqs.Paths())
		}
	}
	_, _, err = s.Open(ctx, "no/such/file")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file over HTTP: %v", err)
	}
	_, _, err = s.Open(ctx, "../m/1/manifest.json")
	wantError(t, err, "'../m/1/manifest.json': path '../m/1/manifest.json' contains '..'; refused")

	// The same tampering on disk and behind the URL: the same message but for the root.
	chunk := artifacttest.FirstChunk(t, dir)
	artifacttest.FlipByte(t, filepath.Join(dir, chunk))
	local, err := openDir(t, dir)
	must(t, err)
	onDisk := local.VerifyFiles(ctx, nil)
	byURL := a.VerifyFiles(ctx, nil)
	if onDisk == nil || byURL == nil || remoteMessage(onDisk, dir) != remoteMessage(byURL, srv.URL+"/m/1") {
		t.Fatalf("on disk %v, by URL %v", onDisk, byURL)
	}
	if artifact.LoadReason(byURL) != "checksum verification failed: "+byURL.Error() {
		t.Fatal(artifact.LoadReason(byURL))
	}
}

func TestHTTPStoreRetriesThenNamesTheFailure(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if r.URL.Path == "/flaky" && n == 1 {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/flaky" {
			_, _ = w.Write([]byte("ok"))
			return
		}
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer srv.Close()
	s, err := artifact.Locate(srv.URL)
	must(t, err)
	data, err := artifact.ReadFile(ctx, s, "flaky")
	if err != nil || string(data) != "ok" || calls.Load() != 2 {
		t.Fatalf("flaky: %q %v after %d calls", data, err, calls.Load())
	}
	calls.Store(0)
	_, err = artifact.ReadFile(ctx, s, "broken")
	wantError(t, err, srv.URL+"/broken: cannot read: HTTP 500 Internal Server Error")
	if calls.Load() != 1+artifact.Retries {
		t.Fatalf("%d attempts, want %d", calls.Load(), 1+artifact.Retries)
	}
	srv.Close()
	_, err = artifact.ReadFile(ctx, s, "gone")
	wantPrefix(t, err, srv.URL+"/gone: cannot read: ")
}

func TestIndex(t *testing.T) {
	dir := t.TempDir()
	s, _ := artifact.Locate(dir)
	idx, err := artifact.ReadIndex(ctx, s)
	if idx != nil || err != nil {
		t.Fatalf("no index.json: %v %v", idx, err)
	}
	write := func(text string) {
		must(t, os.WriteFile(filepath.Join(dir, "index.json"), []byte(text), 0o644))
	}
	write(`{"jaxport_index": 1, "models": {"mlp": [2, 1, 2], "ranker": [3]}}`)
	idx, err = artifact.ReadIndex(ctx, s)
	must(t, err)
	if len(idx.Models) != 2 || len(idx.Models["mlp"]) != 2 || idx.Models["mlp"][0] != 1 || idx.Models["ranker"][0] != 3 {
		t.Fatalf("index %+v", idx)
	}
	write(`{"jaxport_index": 1, "versions": [3, 1]}`)
	idx, err = artifact.ReadIndex(ctx, s)
	must(t, err)
	if idx.Models != nil || len(idx.Versions) != 2 || idx.Versions[1] != 3 {
		t.Fatalf("index %+v", idx)
	}
	src := filepath.Join(dir, "index.json")
	for text, want := range map[string]string{
		`{"jaxport_index": 1, "versions": [0]}`:           src + ": versions must be a list of positive integers, got [0]",
		`{"jaxport_index": 1, "models": {"m": [1, "2"]}}`: src + `: models['m'] must be a list of positive integers, got [1, "2"]`,
		`{"jaxport_index": 2, "models": {}}`: src + `: expected an object with "jaxport_index": 1 (write it with python -m ` +
			`jaxport.artifact.index)`,
		`{"jaxport_index": 1}`:                               src + `: needs either "models" (a repository) or "versions" (a model directory)`,
		`{"jaxport_index": 1, "models": {}, "versions": []}`: src + `: needs either "models" (a repository) or "versions" (a model directory)`,
	} {
		write(text)
		_, err := artifact.ReadIndex(ctx, s)
		wantError(t, err, want)
	}
	write(`{nope`)
	_, err = artifact.ReadIndex(ctx, s)
	wantPrefix(t, err, src+" is not JSON: ")
}

// TestHTTPSWithAPrivateCA: TENSORSTORE_CA_BUNDLE (what the Python reader's TensorStore takes)
// names the CA an https:// repository's certificate is signed by; without it, one line.
func TestHTTPSWithAPrivateCA(t *testing.T) {
	dir := copied(t)
	srv := httptest.NewTLSServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	must(t, os.WriteFile(bundle, pemOf(srv.Certificate().Raw), 0o644))
	s, err := artifact.Locate(srv.URL, artifact.WithEnv(artifacttest.Getenv(map[string]string{artifact.CABundleEnv: bundle})))
	must(t, err)
	a, err := artifact.Open(ctx, s)
	must(t, err)
	must(t, a.VerifyFiles(ctx, nil))
	plain, err := artifact.Locate(srv.URL, artifact.WithEnv(artifacttest.Getenv(nil)))
	must(t, err)
	_, err = artifact.Open(ctx, plain)
	wantPrefix(t, err, srv.URL+"/manifest.json: cannot read: tls: failed to verify certificate: x509: certificate signed by unknown authority")
	_, err = artifact.Locate(srv.URL, artifact.WithEnv(artifacttest.Getenv(map[string]string{artifact.CABundleEnv: "/nonexistent/ca.pem"})))
	wantError(t, err, "/nonexistent/ca.pem: cannot read: no such file or directory")
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
