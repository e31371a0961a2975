// Package artifacttest holds the real servers the tests of package artifact and package
// repository read artifacts from: an HTTP server over a directory (ServeDir) and an
// S3-compatible server, moto's server mode (Moto). Only tests import it.
//
// Moto is the venv's moto_server (the `moto[server]` dev extra, as tests/artifact/moto_s3.py
// uses it): its path is $JAXPORT_MOTO_SERVER, else the checkout's .venv/bin/moto_server. A test
// that needs it FAILS when neither can be started (no skip): `make setup` installs it.
package artifacttest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
)

// MotoEnv names the moto_server executable the S3 tests start.
const MotoEnv = "JAXPORT_MOTO_SERVER"

// RepoRoot is the checkout this package lives in.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..", ".."))
}

// Backcompat is the committed back-compat artifact (tests/backcompat): a real exported
// artifact (nested params, two goldens, platform cpu) the reading tests copy and tamper with.
func Backcompat() string {
	return filepath.Join(RepoRoot(), "tests", "backcompat", "2026-11-29_jax-0.12.0.1_nested")
}

// CopyTree copies directory src to dst (created), files and directories only.
func CopyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FlipByte inverts the middle byte of a file (the tests' tampering).
func FlipByte(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xFF
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FirstChunk is the first weight chunk file of an artifact directory, relative to it.
func FirstChunk(t testing.TB, dir string) string {
	t.Helper()
	var chunks []string
	_ = filepath.Walk(filepath.Join(dir, "weights"), func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && info.Name() != "zarr.json" {
			rel, _ := filepath.Rel(dir, path)
			chunks = append(chunks, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(chunks)
	if len(chunks) == 0 {
		t.Fatalf("%s: no weight chunks", dir)
	}
	return chunks[0]
}

// Requests records the paths a test server was asked for.
type Requests struct {
	mu    sync.Mutex
	paths []string
}

// Paths is every path requested so far, in order.
func (r *Requests) Paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.paths)
}

// Has says whether path was requested.
func (r *Requests) Has(path string) bool { return slices.Contains(r.Paths(), path) }

// ServeDir serves dir read-only over HTTP on 127.0.0.1 (a free port; stopped at the test's
// end) and records the requested paths.
func ServeDir(t testing.TB, dir string) (*httptest.Server, *Requests) {
	t.Helper()
	reqs := &Requests{}
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs.mu.Lock()
		reqs.paths = append(reqs.paths, r.URL.Path)
		reqs.mu.Unlock()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(r.URL.Path))); err == nil && st.IsDir() {
			http.NotFound(w, r) // no directory listings: a repository by URL is listed by index.json
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

// Moto is a running moto_server on 127.0.0.1.
type Moto struct {
	Endpoint string // http://127.0.0.1:PORT
	cmd      *exec.Cmd
}

// Credentials moto takes (any pair) and the region the tests sign for.
const (
	AccessKey = "jaxport-test"
	SecretKey = "jaxport-test"
	Region    = "us-east-1"
)

var (
	motoOnce sync.Once
	moto     *Moto
	motoErr  error
)

// SharedMoto is the package's one moto_server, started by the first test that needs it (the
// test fails when it cannot start); StopMoto (from TestMain) stops it by PID.
func SharedMoto(t testing.TB) *Moto {
	t.Helper()
	motoOnce.Do(func() { moto, motoErr = startMoto() })
	if motoErr != nil {
		t.Fatal(motoErr)
	}
	return moto
}

// StopMoto stops the shared server if one was started.
func StopMoto() {
	if moto != nil && moto.cmd.Process != nil {
		_ = moto.cmd.Process.Kill()
		_ = moto.cmd.Wait()
	}
}

var running = regexp.MustCompile(`Running on (http://127\.0\.0\.1:[0-9]+)`)

func startMoto() (*Moto, error) {
	path := os.Getenv(MotoEnv)
	if path == "" {
		path = filepath.Join(RepoRoot(), ".venv", "bin", "moto_server")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no moto_server for the S3 tests: set %s or run `make setup` (%v)", MotoEnv, err)
	}
	cmd := exec.Command(path, "-H", "127.0.0.1", "-p", "0")
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	found := make(chan string, 1)
	var said bytes.Buffer
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent {
				said.WriteString(sc.Text() + "\n")
				if m := running.FindStringSubmatch(sc.Text()); m != nil {
					found <- m[1]
					sent = true
				}
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case endpoint, ok := <-found:
		if !ok {
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s exited without serving: %s", path, said.String())
		}
		return &Moto{Endpoint: endpoint, cmd: cmd}, nil
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s did not say where it serves within 2 minutes", path)
	}
}

// Env is what a reader of the server needs: the endpoint override, a region and credentials.
func (m *Moto) Env() map[string]string {
	return map[string]string{"AWS_ENDPOINT_URL_S3": m.Endpoint, "AWS_REGION": Region,
		"AWS_ACCESS_KEY_ID": AccessKey, "AWS_SECRET_ACCESS_KEY": SecretKey}
}

// Getenv is an environment made of vars only (nothing from the machine's AWS setup: no shared
// credentials or config file either).
func Getenv(vars map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		switch k {
		case "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE":
			return "/nonexistent/" + strings.ToLower(k)
		case "HOME":
			return "/nonexistent"
		}
		return ""
	}
}

func (m *Moto) do(t testing.TB, method, path string, body []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, m.Endpoint+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	artifact.SignV4(req, AccessKey, SecretKey, "", Region, "s3", artifact.UnsignedPayload)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, msg)
	}
}

// CreateBucket creates bucket.
func (m *Moto) CreateBucket(t testing.TB, bucket string) { m.do(t, http.MethodPut, "/"+bucket, nil) }

// Put stores data at bucket/key.
func (m *Moto) Put(t testing.TB, bucket, key string, data []byte) {
	m.do(t, http.MethodPut, "/"+bucket+"/"+key, data)
}

// Upload stores every file of dir under prefix (prefix/<path relative to dir>).
func (m *Moto) Upload(t testing.TB, bucket, prefix, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m.Put(t, bucket, strings.TrimPrefix(prefix+"/"+filepath.ToSlash(rel), "/"), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
