// Command jaxport-native-goldens runs every golden case of jaxport artifacts through the native
// engine (bridge/front/engine: the PJRT C API, no Python) and prints, for each case, each
// result's max error against the golden and whether it is within verify's tolerance:
//
//	jaxport-native-goldens [--pjrt-plugin cpu|cuda|PATH] [--parallel N] [--time N] [--results OUT] DIR...
//
// Output: one JSON object per line, {"model", "case", "program", "result", "kind", "max_error",
// "mismatches", "tolerance", "ok"} per compared result ({"model", "case", "dims", "not_native"}
// for a case of a polymorphic program at a size no bucket program has); for a checked model
// also {"model", "case", "program", "check_fired", "check_kind", "check_code", "check_message"}
// per case (engine.Checks: the gRPC code number and message the front answers a tripped check
// with; kind, code and message only when fired); then with --parallel N
// {"model", "parallel", "executes", "mismatches", "failures"} (every case run from N goroutines
// at once, results compared byte for byte with a sequential run), then with --time N {"model",
// "program", "calls", "execute_us", "cpu_us"} (wall and process CPU time per call over N
// executes of the first program on its first case). A model the engine refuses prints its
// one-line reason on stderr.
//
// --results OUT is `jaxport verify`'s pjrt-c-api check (exporter/verify/pjrt_c_api.py): every
// result of every case run is also written, raw little-endian C-order bytes, to
// OUT/<model>/<case>/<i>.bin (i: the result's position in the program's results), for verify to
// compare with its own tolerance rule; and a model the engine does not run (engine.Eligible's
// reason: served by the Python workers) is a {"model", "not_native"} line on stdout instead of a
// refusal, leaving the exit status alone. Other refusals (checksums, the StableHLO window, a
// compile error) still exit 2.
//
// Exit status: 0 every result passed, 1 a result failed or differed in parallel, 2 a model was
// refused or an artifact is unreadable, 3 no plugin to load (none found, or a CGO_ENABLED=0
// build): nothing ran.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/engine"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

func main() {
	plugin := flag.String("pjrt-plugin", "", "PJRT plugin: cpu, cuda or a path (default $"+engine.PluginEnv+", else cpu)")
	timed := flag.Int("time", 0, "also time N executes of each model's first program")
	par := flag.Int("parallel", 0, "also run every case from N goroutines at once")
	results := flag.String("results", "", "also write every result under OUT/<model>/<case>/<i>.bin (jaxport verify)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: jaxport-native-goldens [--pjrt-plugin P] [--parallel N] [--time N] [--results OUT] DIR...")
		os.Exit(2)
	}
	if _, err := engine.ResolvePlugin(*plugin); err != nil || !engine.Available {
		if err == nil {
			_, err = engine.LoadPlugin(*plugin) // the CGO_ENABLED=0 build's one line
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	p, err := engine.LoadPlugin(*plugin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	status := 0
	out := json.NewEncoder(os.Stdout)
	for _, dir := range flag.Args() {
		st, err := runDir(p, dir, *timed, *par, *results, out)
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

func runDir(p *engine.Plugin, dir string, timed, par int, results string, out *json.Encoder) (int, error) {
	name := filepath.Base(filepath.Clean(dir))
	ctx := context.Background()
	store, err := artifact.Locate(dir)
	if err != nil {
		return 2, err
	}
	a, err := artifact.Open(ctx, store)
	if err != nil {
		return 2, err
	}
	if results != "" {
		if why := engine.Eligible(a.Manifest, p.Platform); why != "" {
			_ = out.Encode(map[string]any{"model": name, "not_native": why})
			return 0, nil
		}
	}
	model, err := engine.OpenArtifact(ctx, p, a, name)
	if err != nil {
		return 2, err
	}
	fmt.Fprintf(os.Stderr, "%s: opened in %.2f s, %d weight bytes at %.2f GiB/s (%d chunks; checksum %.2f s, weights %.2f s, compile %.2f s)\n",
		name, model.Load.Seconds, model.Load.Bytes, model.Load.GiBPerSecond, model.Load.Chunks,
		model.Load.Phases["checksum"], model.Load.Phases["weights"], model.Load.Phases["compile"])
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
		rows, values, err := runCase(dir, model.Name, prog, c, results)
		if err != nil {
			return 2, fmt.Errorf("%s: case %s: %v", model.Name, c.GetName(), err)
		}
		if line, err := checkLine(model, prog, c, values); err != nil {
			return 2, fmt.Errorf("%s: case %s: %v", model.Name, c.GetName(), err)
		} else if line != nil {
			_ = out.Encode(line)
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

// checkLine is the check line of a case of a checked model: what the engine's check reader
// (engine.NewChecks, Failure) makes of the case's check results, as the front answers it.
func checkLine(model *engine.Model, prog *engine.Program, c *jaxportv1.GoldenCase, results [][]byte) (map[string]any, error) {
	checks, err := engine.NewChecks(model.Manifest.GetChecks(), prog.Results)
	if err != nil || checks == nil {
		return nil, err
	}
	f, err := checks.Failure(results)
	if err != nil {
		return nil, err
	}
	line := map[string]any{"model": model.Name, "case": c.GetName(), "program": prog.Spec.GetMlirbcFile(),
		"check_fired": f != nil}
	if f != nil {
		line["check_kind"], line["check_code"], line["check_message"] = f.Kind, int(f.Code), f.Message
	}
	return line, nil
}

// runCase executes one case and compares its results with the goldens; it also returns the
// raw results.
func runCase(dir, model string, prog *engine.Program, c *jaxportv1.GoldenCase, resultsDir string) ([]row, [][]byte, error) {
	inputs, err := caseInputs(dir, prog, c)
	if err != nil {
		return nil, nil, err
	}
	results, err := prog.Execute(inputs)
	if err != nil {
		return nil, nil, err
	}
	if resultsDir != "" {
		if err := writeResults(filepath.Join(resultsDir, model, c.GetName()), results); err != nil {
			return nil, nil, err
		}
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
			return nil, nil, err
		}
		tol := toleranceOf(r.GetDtype().GetNumpy())
		if kind == "check" {
			tol = tolerance{name: "exact"} // verify's rule: check outputs bit for bit
		}
		maxErr, bad, err := compare(results[i], want, r.GetDtype().GetNumpy(), tol)
		if err != nil {
			return nil, nil, fmt.Errorf("result %s: %v", r.GetName(), err)
		}
		ok = bad == 0
		rows = append(rows, row{Model: model, Case: c.GetName(), Program: prog.Spec.GetMlirbcFile(),
			Result: r.GetName(), Kind: kind, MaxError: maxErr, Mismatches: bad, Tolerance: tol.name, OK: ok})
	}
	return rows, results, nil
}

// writeResults writes results[i] to dir/<i>.bin (--results).
func writeResults(dir string, results [][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, r := range results {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.bin", i)), r, 0o644); err != nil {
			return err
		}
	}
	return nil
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
