package workers

// The tests of this package start REAL Python workers (`python -m jaxport.bridge.worker`)
// on artifacts exported once per run (needSetup), with `jaxport export` of tests/models/*.py
// (and testdata/spin.py) run by tests/support/export_cli.py through the tests' shared export
// cache (read-only: a test that changes an artifact copies it first). The interpreter is
// $JAXPORT_WORKER_PYTHON (the Makefile and the Python suite set it), else the checkout's
// .venv/bin/python; when neither works the tests FAIL (never skip), saying which.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

var (
	python    string            // the workers' interpreter
	artifacts map[string]string // exported artifact directories by test name
	setupErr  error             // why they could not be prepared (every test needing them fails)
	setupOnce sync.Once
	testDir   string // removed by TestMain
)

// exports: name -> `jaxport export` arguments (PYTHONPATH holds tests/models and testdata).
var exports = map[string][]string{
	// The smallest realistic model, two golden cases.
	"mlp": {"mlp:predict", "--params", "mlp:init", "--input", "x:float32[4,16]", "--goldens", "2"},
	// One program per batch size.
	"batched": {"mlp:predict", "--params", "mlp:init", "--input", "x:float32[B,16]", "--batch-sizes", "1,4", "--goldens", "2"},
	// 2 MiB in, 1.25 MiB out: both payloads go in a memfd.
	"big": {"mlp:predict", "--params", "mlp:init", "--input", "x:float32[32768,16]", "--goldens", "1"},
	// Symbolic B and T: one shape-polymorphic program; goldens at five sizes.
	"seq": {"seq:predict", "--params", "seq:init", "--input", "tokens:int32[B,T]", "--input", "mask:bool[B,T]",
		"--dim", "B=1..64", "--dim", "T=8..2048:8", "--goldens", "1"},
	// The mlp over a 2x2 mesh (4 CPU devices).
	"sharded": {"mlp:predict", "--params", "mlp:init", "--input", "x:float32[4,16]", "--goldens", "1",
		"--mesh", "data=2,model=2", "--shard", "x=data", "--shard", "params.w1=None,model",
		"--shard", "params.b1=model", "--shard", "params.w2=model"},
	// checkify checks of every kind, with goldens tripping each.
	"checked": {"checked:predict", "--params", "checked:init", "--input", "x:float32[4]", "--input", "idx:int32[3]",
		"--input", "scale:float32[]", "--checks", "user,index,nan,div", "--check-goldens", "checked:check_goldens", "--goldens", "1"},
	// n rounds of a 256x256 matmul: held in flight with a large n.
	"spin": {"spin:predict", "--params", "spin:init", "--input", "x:float32[256,256]", "--input", "n:int32[]",
		"--golden-inputs", "spin:golden_inputs", "--goldens", "0"},
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeShared()
	if testDir != "" {
		os.RemoveAll(testDir)
	}
	os.Exit(code)
}

// repoRoot is the checkout this package lives in.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func prepare() (string, error) {
	dir, err := os.MkdirTemp("", "jaxport-workers-test-")
	if err != nil {
		return "", err
	}
	return dir, setUp(dir)
}

func setUp(dir string) error {
	root := repoRoot()
	python = os.Getenv("JAXPORT_WORKER_PYTHON")
	if python == "" {
		python = filepath.Join(root, ".venv", "bin", "python")
		if _, err := os.Stat(python); err != nil {
			return fmt.Errorf("no worker Python: set JAXPORT_WORKER_PYTHON or run `make setup` (%s: %v)", python, err)
		}
	}
	if out, err := exec.Command(python, "-c", "import jaxport.bridge.worker").CombinedOutput(); err != nil {
		return fmt.Errorf("worker Python %s cannot import jaxport.bridge.worker: %v\n%s", python, err, out)
	}
	// One Python process exports every artifact through the tests' shared export cache
	// (tests/support/export_cli.py): JAX starts once, and a later run reuses what it made.
	pythonPath := filepath.Join(root, "tests", "models") + string(os.PathListSeparator) + filepath.Join(root, "bridge", "front", "workers", "testdata")
	lines, err := json.Marshal(exports)
	if err != nil {
		return err
	}
	started := time.Now()
	cmd := exec.Command(python, filepath.Join(root, "tests", "support", "export_cli.py"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath, "JAX_PLATFORMS=cpu")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(lines)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("tests/support/export_cli.py: %v\n%s", err, stderr.String())
	}
	artifacts = map[string]string{}
	if err := json.Unmarshal(out, &artifacts); err != nil {
		return fmt.Errorf("tests/support/export_cli.py printed %q: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "workers tests: exported %d artifacts in %.1f s with %s\n", len(artifacts), time.Since(started).Seconds(), python)
	return nil
}

// needSetup finds the interpreter and exports the artifacts (once per run, by the first test
// that needs them) and fails the test when that did not work.
func needSetup(t *testing.T) {
	t.Helper()
	setupOnce.Do(func() { testDir, setupErr = prepare() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}
