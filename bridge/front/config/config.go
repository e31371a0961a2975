// Package config is every flag of `jaxport serve` (= `jaxport-front`), defined once: its name,
// its environment variable (JAXPORT_<NAME>), its default, its help text, its validation and
// its one-line errors. Precedence: flag > environment > default. Parse reads a command line
// once, at the edge, into a Config the rest of the front is handed; nothing else reads a flag
// or a JAXPORT_* variable of these.
//
// A mistake is one line: Parse returns a *UsageError (exit status 2: a flag or variable the
// front cannot take) or a *StartError (exit status 1: a file a flag names that cannot be
// used); ExitCode maps them. TLS files, the token file, the port file and the ports are
// opened where they are used (packages security and cmd/jaxport-front) and fail with status 1
// there.
//
// Flags are `--name VALUE` or `--name=VALUE`, names spelled out in full (no abbreviations, no
// single dash); a flag given twice keeps its last value, except --load-model, which adds.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Defaults that other packages and the docs name.
const (
	// EnvPrefix starts every variable: --metrics-port is JAXPORT_METRICS_PORT.
	EnvPrefix = "JAXPORT_"
	// DefaultHTTPPort is the REST port when --http-port is not given (Triton's: 8000 HTTP,
	// 8001 gRPC, 8002 metrics); with --port 0 REST takes a free port too, so that two such
	// servers do not collide on it.
	DefaultHTTPPort = 8000
	// DefaultMaxMessageBytes lets a 64 MiB tensor and the message around it through (gRPC's own
	// default is 4 MiB).
	DefaultMaxMessageBytes = 96 << 20
	// DefaultCompiledShapes: executables a shape-polymorphic model keeps on the workers (a
	// sequence model served at 8..2048 step 8 has 256 lengths times every batch size).
	DefaultCompiledShapes = 32
	// DefaultMaxInflightPerModel: two cores run one XLA call each well; a few more overlap the
	// copies with compute.
	DefaultMaxInflightPerModel = 4
	// DefaultMaxQueuePerModel absorbs a 64-client burst per model without shedding.
	DefaultMaxQueuePerModel = 64
	// DefaultRepositoryPoll is Triton's --repository-poll-secs default.
	DefaultRepositoryPoll = 15 * time.Second
	// AllModels as the one --load-model loads every model of the repository (Triton's "*").
	AllModels = "*"
)

// Model control modes (Triton's names): how the model table changes after the start.
const (
	// ModeNone: every model is loaded at the start; RepositoryModelLoad/Unload are refused.
	ModeNone = "none"
	// ModeExplicit: the --load-model models are loaded at the start; load/unload by RPC.
	ModeExplicit = "explicit"
	// ModePoll: every model is loaded at the start and the repository is rescanned every
	// --repository-poll-secs (new and changed versions loaded, removed ones unloaded);
	// load/unload by RPC refused.
	ModePoll = "poll"
)

// Config is one server's configuration, parsed and checked. Paths are as given ("" = not
// set); ports: 0 = any free port, -1 = off where the flag allows it.
type Config struct {
	// The repository: a local directory, or a file://, http(s):// or s3:// URL, as given.
	Repository string
	// ModelName: serve Repository as this one model ("" = a repository of models).
	ModelName string
	// ModelVersionPolicy: "latest" or "all".
	ModelVersionPolicy string
	// ModelControlMode: ModeNone, ModeExplicit or ModePoll.
	ModelControlMode string
	// LoadModels: explicit mode's models loaded at the start, in order, each once;
	// []string{AllModels} = every model. Empty in the other modes.
	LoadModels []string
	// RepositoryPoll: poll mode's interval between scans.
	RepositoryPoll time.Duration

	Host        string
	Port        int    // gRPC; 0 = any free port
	HTTPPort    int    // REST, resolved (DefaultHTTPPort, or 0 with Port 0, unless given); -1 = off
	MetricsPort int    // Prometheus /metrics; -1 = off
	PortFile    string // where the bound ports go as JSON once listening

	MaxMessageBytes int
	GracePeriod     time.Duration // SIGTERM waits this long for in-flight requests
	LogLevel        string        // DEBUG, INFO, WARNING or ERROR (see SlogLevel)

	TLSCert, TLSKey, TLSClientCA string
	AuthTokenFile                string

	// Engine: "" = the native engine for every model it admits, the workers' exported for the
	// others; "exported" or "pjrt" = every model on the workers with that engine.
	Engine string
	// PJRTPlugin: "cpu", "cuda" or a plugin .so path; "" = none (every model on the workers).
	PJRTPlugin string
	// Workers: execution worker processes, started when the first model that needs them loads.
	Workers int
	// WorkerPython: the interpreter workers run (`PATH -m jaxport.bridge.worker`); "" = none
	// (a model that needs workers is UNAVAILABLE naming --worker-python).
	WorkerPython   string
	CompiledShapes int // the workers' executables per polymorphic model (LRU)
	CPUDevices     int // CPU devices of each executing process; 0 = jax's default

	MaxInflightPerModel int
	MaxQueuePerModel    int

	// Dynamic batching: Batching = every model exported with --batch-sizes batches;
	// BatchingModels = per-model entries (alone: only they batch). See BatchingFor.
	Batching            bool
	MaxQueueDelayUs     int
	PreferredBatchSizes []int // empty: the largest exported size
	BatchQueueSize      int
	BatchingModels      []ModelBatching

	TraceOTLPEndpoint  string // HOST:PORT; "" = tracing off
	SystemSharedMemory bool

	// FrontBinary is read by `jaxport serve` (which binary to exec); the front ignores it.
	FrontBinary string
}

// ModelBatching is one --batching-models entry; nil/empty fields fall back to the global flags.
type ModelBatching struct {
	Name            string
	MaxQueueDelayUs *int
	Preferred       []int
}

// BatchingFor says whether `model` batches and with which queue delay (microseconds) and
// preferred batch sizes: a --batching-models entry for it (its own values, the global ones for
// what it leaves out); else, with --batching, the global values; else it does not batch.
func (c *Config) BatchingFor(model string) (delayUs int, preferred []int, ok bool) {
	for _, m := range c.BatchingModels {
		if m.Name != model {
			continue
		}
		delayUs, preferred = c.MaxQueueDelayUs, c.PreferredBatchSizes
		if m.MaxQueueDelayUs != nil {
			delayUs = *m.MaxQueueDelayUs
		}
		if m.Preferred != nil {
			preferred = m.Preferred
		}
		return delayUs, preferred, true
	}
	if !c.Batching {
		return 0, nil, false
	}
	return c.MaxQueueDelayUs, c.PreferredBatchSizes, true
}

// SlogLevel is LogLevel as a slog level (WARNING = slog.LevelWarn).
func (c *Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "DEBUG":
		return slog.LevelDebug
	case "WARNING":
		return slog.LevelWarn
	case "ERROR":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// UsageError is a flag or variable the front cannot take: one line, exit status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// StartError is a file a flag names that cannot be used: one line, exit status 1.
type StartError struct{ Msg string }

func (e *StartError) Error() string { return e.Msg }

// ErrHelp is returned by Parse for -h/--help: print Usage, exit 0.
var ErrHelp = errors.New("help requested")

// Exit statuses of a mistake.
const (
	ExitStart = 1 // a port or file that cannot be used
	ExitUsage = 2 // a flag or variable the front cannot take
)

// ExitCode is the exit status for Parse's error: 0 for ErrHelp (and nil), ExitUsage for a
// *UsageError, ExitStart otherwise.
func ExitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &usage):
		return ExitUsage
	}
	return ExitStart
}

// Prog is the name mistakes are reported under, from argv[0]: `jaxport serve` when that
// command exec'ed the front (it passes argv[0] "jaxport serve"), else the binary's base name.
func Prog(argv0 string) string {
	if argv0 == "jaxport serve" {
		return argv0
	}
	if i := strings.LastIndexByte(argv0, '/'); i >= 0 {
		argv0 = argv0[i+1:]
	}
	if argv0 == "" {
		return "jaxport-front"
	}
	return argv0
}

// Parse reads the flags `argv` (without the program name) over the variables `environ`
// ("KEY=VALUE" entries, as os.Environ gives them). `prog` names the command in the texts that
// point at --help. It returns ErrHelp for -h/--help, else a checked Config or a one-line
// *UsageError / *StartError.
func Parse(prog string, argv []string, environ []string) (*Config, error) {
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	for _, arg := range argv { // help wins over any mistake around it
		if arg == "-h" || arg == "--help" {
			return nil, ErrHelp
		}
	}
	for _, r := range retired {
		if r.given(argv, env) {
			return nil, &UsageError{r.text}
		}
	}
	given, err := scan(prog, argv)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	seen := map[string]bool{} // flags given or set in the environment
	for _, f := range flags {
		var values []string
		source := ""
		if v, ok := given[f.name]; ok {
			values, source = v, "argument --"+f.name
		} else if v, ok := env[f.env()]; ok {
			values, source = []string{v}, f.env()
			if f.repeat {
				values = splitList(v)
			}
		}
		if source == "" {
			if f.required {
				return nil, &UsageError{fmt.Sprintf("--%s (or %s) is required", f.name, f.env())}
			}
			values = []string{f.def}
			if f.repeat || f.def == "" { // the zero value is the default
				values = nil
			}
		} else {
			seen[f.name] = true
		}
		for _, v := range values {
			if err := f.set(c, v); err != nil {
				if source == f.env() {
					return nil, &UsageError{fmt.Sprintf("%s=%s: %v", f.env(), pyRepr(v), err)}
				}
				if source == "" { // a default that does not parse is a bug here, said as one
					return nil, fmt.Errorf("config: the default of --%s: %v", f.name, err)
				}
				return nil, &UsageError{fmt.Sprintf("%s: %v", source, err)}
			}
		}
	}
	if err := c.check(seen); err != nil {
		return nil, err
	}
	return c, nil
}

// scan splits argv into flag -> values (last one kept, --load-model's accumulated).
func scan(prog string, argv []string) (map[string][]string, error) {
	seeHelp := fmt.Sprintf(" (see `%s --help`)", prog)
	given := map[string][]string{}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		name, value, hasValue := strings.Cut(arg, "=")
		f := byName[strings.TrimPrefix(name, "--")]
		if !strings.HasPrefix(name, "--") || f == nil {
			return nil, &UsageError{fmt.Sprintf("unrecognized argument: %s%s", arg, seeHelp)}
		}
		switch {
		case hasValue:
		case f.optionalValue: // `--batching` alone is true; `--batching false` takes a word
			value = "true"
			if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				value = argv[i]
			}
		case i+1 >= len(argv) || strings.HasPrefix(argv[i+1], "--"):
			return nil, &UsageError{fmt.Sprintf("argument --%s: expected one argument%s", f.name, seeHelp)}
		default:
			i++
			value = argv[i]
		}
		if f.repeat {
			given[f.name] = append(given[f.name], value)
		} else {
			given[f.name] = []string{value}
		}
	}
	return given, nil
}

// check applies the rules between flags and the ranges whose texts name the flag whatever
// set it; `seen` holds the flags given or set in the environment.
func (c *Config) check(seen map[string]bool) error {
	bad := func(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }
	if !seen["http-port"] {
		c.HTTPPort = DefaultHTTPPort
		if c.Port == 0 {
			c.HTTPPort = 0
		}
	}
	switch {
	case c.Port < 0 || c.Port > 65535:
		return bad("--port must be in 0..65535, got %d", c.Port)
	case c.HTTPPort < -1 || c.HTTPPort > 65535:
		return bad("--http-port must be in -1..65535, got %d", c.HTTPPort)
	case c.MetricsPort < -1 || c.MetricsPort > 65535:
		return bad("--metrics-port must be in -1..65535, got %d", c.MetricsPort)
	}
	for _, v := range []struct {
		name  string
		value int
		min   int
	}{
		{"max-message-bytes", c.MaxMessageBytes, 1}, {"max-inflight-per-model", c.MaxInflightPerModel, 1},
		{"batch-queue-size", c.BatchQueueSize, 1}, {"workers", c.Workers, 1},
		{"compiled-shapes", c.CompiledShapes, 1}, {"cpu-devices", c.CPUDevices, 0},
		{"max-queue-per-model", c.MaxQueuePerModel, 0}, {"max-queue-delay-us", c.MaxQueueDelayUs, 0},
	} {
		if v.value < v.min {
			return bad("--%s must be >= %d, got %d", v.name, v.min, v.value)
		}
	}
	if c.GracePeriod < 0 {
		return bad("--grace-period-s must be >= 0, got %v", c.GracePeriod.Seconds())
	}
	for _, b := range c.PreferredBatchSizes {
		if b < 1 {
			return bad("--preferred-batch-sizes must be positive, got %s", pyList(c.PreferredBatchSizes))
		}
	}
	if seen["load-model"] && c.ModelControlMode != ModeExplicit {
		return bad("--load-model needs --model-control-mode explicit (mode %s loads every model at the start)",
			c.ModelControlMode)
	}
	if seen["repository-poll-secs"] && c.ModelControlMode != ModePoll {
		return bad("--repository-poll-secs needs --model-control-mode poll (mode %s does not rescan the repository)",
			c.ModelControlMode)
	}
	for _, name := range c.LoadModels {
		if name == AllModels && len(c.LoadModels) > 1 {
			return bad("--load-model '*' (every model) must be the only --load-model, got %s", pyStrList(c.LoadModels))
		}
	}
	c.LoadModels = dedupe(c.LoadModels)
	if c.WorkerPython != "" {
		if err := checkExecutable(c.WorkerPython); err != nil {
			return &StartError{fmt.Sprintf("--worker-python %s: %v", c.WorkerPython, err)}
		}
	}
	return nil
}

// checkExecutable: `path` (or, without a slash, a name found in PATH) is an executable file.
func checkExecutable(path string) error {
	if !strings.Contains(path, "/") {
		if _, err := exec.LookPath(path); err != nil {
			return fmt.Errorf("not found in PATH")
		}
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("no such file")
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	case st.IsDir():
		return fmt.Errorf("is a directory, not a Python interpreter")
	case st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("is not executable")
	}
	return nil
}

// dedupe drops later repeats of names (order kept).
func dedupe(names []string) []string {
	var out []string
	have := map[string]bool{}
	for _, n := range names {
		if !have[n] {
			have[n] = true
			out = append(out, n)
		}
	}
	return out
}

func splitList(text string) []string {
	var out []string
	for _, v := range strings.Split(text, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	if out == nil {
		return []string{""} // an empty variable is a value to refuse, not nothing
	}
	return out
}

// pyRepr quotes a value as the texts always have (Python's repr of a str: 'x').
func pyRepr(s string) string {
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
}

func pyList(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprint(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func pyStrList(v []string) string {
	parts := make([]string, len(v))
	for i, s := range v {
		parts[i] = pyRepr(s)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
