// Command jaxport-native-goldens runs every golden case of jaxport artifacts through the native
// engine (bridge/front/engine: the PJRT C API, no Python) and prints, for each case, each
// result's max error against the golden and whether it is within verify's tolerance:
//
//	jaxport-native-goldens [--pjrt-plugin cpu|cuda|PATH] [--parallel N] [--time N] DIR...
//
// Output: one JSON object per line, {"model", "case", "program", "result", "kind", "max_error",
// "mismatches", "tolerance", "ok"} per compared result ({"model", "case", "dims", "not_native"}
// for a case of a polymorphic program at a size no bucket program has), then with --parallel N
// {"model", "parallel", "executes", "mismatches", "failures"} (every case run from N goroutines
// at once, results compared byte for byte with a sequential run), then with --time N {"model",
// "program", "calls", "execute_us", "cpu_us"} (wall and process CPU time per call over N
// executes of the first program on its first case). A model the engine refuses prints its
// one-line reason on stderr. Exit status: 0 every result passed, 1 a result failed or differed
// in parallel, 2 a model was refused or an artifact is unreadable.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/jaxport/jaxport/bridge/front/engine"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

func main() {
	plugin := flag.String("pjrt-plugin", "", "PJRT plugin: cpu, cuda or a path (default $"+engine.PluginEnv+", else cpu)")
	timed := flag.Int("time", 0, "also time N executes of each model's first program")
	par := flag.Int("parallel", 0, "also run every case from N goroutines at once")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: jaxport-native-goldens [--pjrt-plugin P] [--parallel N] [--time N] DIR...")
		os.Exit(2)
	}
	p, err := engine.LoadPlugin(*plugin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	status := 0
	out := json.NewEncoder(os.Stdout)
	for _, dir := range flag.Args() {
		st, err := runDir(p, dir, *timed, *par, out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		status = max(status, st)
	}
	os.Exit(status)
}

// row is one compared result of one case.
type row struct {
	Model      string  `json:"model"`
	Case       string  `json:"case"`
	Program    string  `json:"program"`
	Result     string  `json:"result"`
	Kind       string  `json:"kind"` // output or check
	MaxError   float64 `json:"max_error"`
	Mismatches int     `json:"mismatches"`
	Tolerance  string  `json:"tolerance"`
	OK         bool    `json:"ok"`
}

func runDir(p *engine.Plugin, dir string, timed, par int, out *json.Encoder) (int, error) {
	model, err := engine.Open(p, dir, filepath.Base(filepath.Clean(dir)))
	if err != nil {
		return 2, err
	}
	defer model.Close()
	status := 0
	for _, c := range model.Manifest.GetGoldens() {
		prog := programFor(model, c)
		if prog == nil && len(c.GetDims()) > 0 {
			// A case of the polymorphic program at a size no bucket has: jax's alone.
			_ = out.Encode(map[string]any{"model": model.Name, "case": c.GetName(), "dims": c.GetDims(),
				"not_native": "polymorphic program at a size no bucket program has: only model.jaxexport runs it"})
			continue
		}
		if prog == nil {
			return 2, fmt.Errorf("%s: golden case %s has no fixed-shape program (batch size %d, dims %v)",
				model.Name, c.GetName(), c.GetBatchSize(), c.GetDims())
		}
		rows, err := runCase(dir, model.Name, prog, c)
		if err != nil {
			return 2, fmt.Errorf("%s: case %s: %v", model.Name, c.GetName(), err)
		}
		for _, r := range rows {
			if !r.OK {
				status = 1
			}
			_ = out.Encode(r)
		}
	}
	if par > 0 {
		r, err := parallelRun(dir, model, par)
		if err != nil {
			return 2, err
		}
		if r["mismatches"].(int64) > 0 || r["failures"].(int64) > 0 {
			status = 1
		}
		_ = out.Encode(r)
	}
	if timed > 0 {
		if err := timeFirst(dir, model, timed, out); err != nil {
			return 2, err
		}
	}
	return status, nil
}

// nativeRun is a golden case a compiled program runs, with its inputs read.
type nativeRun struct {
	prog   *engine.Program
	inputs [][]byte
}

// nativeRuns are the golden cases a compiled program runs, in manifest order.
func nativeRuns(dir string, model *engine.Model) ([]nativeRun, error) {
	var runs []nativeRun
	for _, c := range model.Manifest.GetGoldens() {
		prog := programFor(model, c)
		if prog == nil {
			continue
		}
		inputs, err := caseInputs(dir, prog, c)
		if err != nil {
			return nil, err
		}
		runs = append(runs, nativeRun{prog, inputs})
	}
	return runs, nil
}

// timeFirst times n executes of the first golden case a compiled program runs.
func timeFirst(dir string, model *engine.Model, n int, out *json.Encoder) error {
	runs, err := nativeRuns(dir, model)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("%s: no golden case to time", model.Name)
	}
	prog, inputs := runs[0].prog, runs[0].inputs
	cpu0, start := cpuTime(), time.Now()
	for range n {
		if _, err := prog.Execute(inputs); err != nil {
			return err
		}
	}
	us := float64(time.Since(start).Microseconds()) / float64(n)
	cpu := float64((cpuTime() - cpu0).Microseconds()) / float64(n)
	return out.Encode(map[string]any{"model": model.Name, "program": prog.Spec.GetMlirbcFile(),
		"calls": n, "execute_us": us, "cpu_us": cpu})
}

// cpuTime is the process's user + system CPU time so far (every thread, the plugin's too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// programFor is the compiled program a golden case belongs to: same batch size and dims.
func programFor(model *engine.Model, c *jaxportv1.GoldenCase) *engine.Program {
	for _, prog := range model.Programs {
		if prog.Spec.GetBatchSize() == c.GetBatchSize() && maps.Equal(prog.Spec.GetDims(), c.GetDims()) {
			return prog
		}
	}
	return nil
}

func caseInputs(dir string, prog *engine.Program, c *jaxportv1.GoldenCase) ([][]byte, error) {
	inputs := make([][]byte, len(prog.Inputs))
	for i, a := range prog.Inputs {
		rel, ok := c.GetInputs()[a.GetName()]
		if !ok {
			return nil, fmt.Errorf("no golden input %s", a.GetName())
		}
		arr, err := readNpy(dir, rel, a.GetShape(), a.GetByteSize())
		if err != nil {
			return nil, err
		}
		inputs[i] = arr
	}
	return inputs, nil
}

func runCase(dir, model string, prog *engine.Program, c *jaxportv1.GoldenCase) ([]row, error) {
	inputs, err := caseInputs(dir, prog, c)
	if err != nil {
		return nil, err
	}
	results, err := prog.Execute(inputs)
	if err != nil {
		return nil, err
	}
	var rows []row
	for i, r := range prog.Results {
		kind, rel, ok := "output", c.GetOutputs()[r.GetName()], false
		if r.GetRole() == jaxportv1.ResultRole_RESULT_ROLE_CHECK {
			kind, rel = "check", c.GetCheckOutputs()[r.GetName()]
		}
		if rel == "" {
			continue // a case that trips a check has no outputs
		}
		want, err := readNpy(dir, rel, r.GetShape(), r.GetByteSize())
		if err != nil {
			return nil, err
		}
		tol := toleranceOf(r.GetDtype().GetNumpy())
		if kind == "check" {
			tol = tolerance{name: "exact"} // verify's rule: check outputs bit for bit
		}
		maxErr, bad, err := compare(results[i], want, r.GetDtype().GetNumpy(), tol)
		if err != nil {
			return nil, fmt.Errorf("result %s: %v", r.GetName(), err)
		}
		ok = bad == 0
		rows = append(rows, row{Model: model, Case: c.GetName(), Program: prog.Spec.GetMlirbcFile(),
			Result: r.GetName(), Kind: kind, MaxError: maxErr, Mismatches: bad, Tolerance: tol.name, OK: ok})
	}
	return rows, nil
}

// readNpy reads a golden .npy and checks it holds the shape the manifest gives.
func readNpy(dir, rel string, shape []int64, byteSize uint64) ([]byte, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	arr, err := npyRead(path)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(arr.Shape, shape) || uint64(len(arr.Data)) != byteSize {
		return nil, fmt.Errorf("%s: shape %v (%d bytes), the manifest says %v (%d bytes)",
			rel, arr.Shape, len(arr.Data), shape, byteSize)
	}
	return arr.Data, nil
}
