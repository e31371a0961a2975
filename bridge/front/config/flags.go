package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// flag is one `jaxport serve` flag: the one definition of its name, variable, default, help
// and parsing. `set` parses one value into the Config (its error text follows "argument
// --NAME: " or "JAXPORT_NAME='value': ").
type flagDef struct {
	name    string
	metavar string
	help    string
	def     string // the default, parsed like any value; shown unless shown is set
	shown   string // the default as the help says it ("" = def; "-" = say nothing)
	// required: no default; repeat: each use adds a value (the variable: comma-separated);
	// optionalValue: `--flag` alone means true.
	required, repeat, optionalValue bool
	choices                         []string
	set                             func(c *Config, v string) error
}

func (f *flagDef) env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))
}

// retiredFlag is a flag that no longer exists, refused in one line naming what replaces it
// (flag or variable), where ignoring it would silently change what the server does.
type retiredFlag struct{ name, text string }

func (r retiredFlag) given(argv []string, env map[string]string) bool {
	if _, ok := env[(&flagDef{name: r.name}).env()]; ok {
		return true
	}
	for _, a := range argv {
		if a == "--"+r.name || strings.HasPrefix(a, "--"+r.name+"=") {
			return true
		}
	}
	return false
}

var retired = []retiredFlag{
	{"frontend", "--frontend (JAXPORT_FRONTEND) was removed: jaxport serve always runs the native " +
		"front (grpcio's Python server is retired, docs/front.md); drop it"},
	{"worker-threads", "--worker-threads (JAXPORT_WORKER_THREADS) was removed: the front admits " +
		"every call (--max-inflight-per-model running and --max-queue-per-model waiting per model " +
		"version, beyond: RESOURCE_EXHAUSTED) and the workers execute only what it admits; drop it"},
}

// Value parsers: the texts say what was expected.
func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("invalid int value: %s", pyRepr(v))
	}
	return n, nil
}

func parseFloat(v string) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, fmt.Errorf("invalid float value: %s", pyRepr(v))
	}
	return x, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("expected true/false, got %s", pyRepr(v))
}

func intFlag(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := parseInt(v)
		*field(c) = n
		return err
	}
}

func stringFlag(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *field(c) = v; return nil }
}

func boolFlag(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := parseBool(v)
		*field(c) = b
		return err
	}
}

func secondsFlag(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parseFloat(v)
		*field(c) = time.Duration(x * float64(time.Second))
		return err
	}
}

// choice checks v against f's choices before `set`.
func (f *flagDef) choose(v string) error {
	for _, ch := range f.choices {
		if v == ch {
			return nil
		}
	}
	quoted := make([]string, len(f.choices))
	for i, ch := range f.choices {
		quoted[i] = pyRepr(ch)
	}
	return fmt.Errorf("invalid choice: %s (choose from %s)", pyRepr(v), strings.Join(quoted, ", "))
}

func parseSizes(v string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(v, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("expected comma-separated integers like 8,32, got %s", pyRepr(v))
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBatchingModels reads `mlp:2000:8+32,ranker`: one entry per comma-separated item.
func parseBatchingModels(text string) ([]ModelBatching, error) {
	var out []ModelBatching
	for _, entry := range strings.Split(text, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.Split(entry, ":")
		if len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("entry %s: expected NAME[:MAX_QUEUE_DELAY_US[:SIZE+SIZE...]], e.g. mlp:2000:8+32", pyRepr(entry))
		}
		m := ModelBatching{Name: parts[0]}
		if len(parts) > 1 && parts[1] != "" {
			delay, err := strconv.Atoi(parts[1])
			if err != nil {
				return nil, fmt.Errorf("entry %s: queue delay %s is not an integer number of microseconds", pyRepr(entry), pyRepr(parts[1]))
			}
			if delay < 0 {
				return nil, fmt.Errorf("entry %s: queue delay must be >= 0", pyRepr(entry))
			}
			m.MaxQueueDelayUs = &delay
		}
		if len(parts) > 2 && parts[2] != "" {
			for _, s := range strings.Split(parts[2], "+") {
				n, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("entry %s: preferred sizes %s must be integers joined by '+', e.g. 8+32", pyRepr(entry), pyRepr(parts[2]))
				}
				m.Preferred = append(m.Preferred, n)
			}
			for _, n := range m.Preferred {
				if n < 1 {
					return nil, fmt.Errorf("entry %s: preferred sizes must be positive", pyRepr(entry))
				}
			}
		}
		for _, earlier := range out {
			if earlier.Name == m.Name {
				return nil, fmt.Errorf("model %s is listed twice", pyRepr(m.Name))
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// otlpEndpoint checks HOST:PORT of an OTLP/gRPC trace receiver ("" = tracing off).
func otlpEndpoint(v string) error {
	if v == "" {
		return nil
	}
	i := strings.LastIndexByte(v, ':')
	port, err := strconv.Atoi(v[i+1:])
	if i <= 0 || err != nil || strings.ContainsAny(v[i+1:], "+- ") || port < 1 || port > 65535 {
		return fmt.Errorf("expected HOST:PORT of an OTLP/gRPC receiver (e.g. 127.0.0.1:4317), got %s", pyRepr(v))
	}
	return nil
}

// flags is the one definition of every flag, in the order --help lists them.
var flags = []*flagDef{
	{name: "repository", metavar: "DIR|URL", required: true,
		help: "model repository: DIR/<model>/<version>/ holds exporter artifacts, or a file://, " +
			"http(s):// or s3:// URL of one (listed by its index.json)",
		set: stringFlag(func(c *Config) *string { return &c.Repository })},
	{name: "model-name", metavar: "NAME", shown: "-",
		help: "serve --repository as this ONE model (e.g. KServe's /mnt/models): the root is a " +
			"version directory (manifest.json) or a model directory (1/, 2/ ...)",
		set: stringFlag(func(c *Config) *string { return &c.ModelName })},
	{name: "model-version-policy", metavar: "POLICY", def: "latest", choices: []string{"latest", "all"},
		help: "versions loaded of each model: 'latest' or 'all'",
		set:  stringFlag(func(c *Config) *string { return &c.ModelVersionPolicy })},
	{name: "model-control-mode", metavar: "MODE", def: ModeNone, choices: []string{ModeNone, ModeExplicit, ModePoll},
		help: "how the loaded models change (Triton's modes): 'none' = every model loaded at the " +
			"start, RepositoryModelLoad/Unload refused; 'explicit' = the --load-model models loaded " +
			"at the start, load/unload by RPC; 'poll' = every model loaded at the start and the " +
			"repository rescanned every --repository-poll-secs (new and changed versions loaded, " +
			"removed ones unloaded), load/unload refused",
		set: stringFlag(func(c *Config) *string { return &c.ModelControlMode })},
	{name: "load-model", metavar: "NAME", repeat: true, shown: "-",
		help: "explicit mode: a model loaded at the start, repeatable ('*' alone: every model); " +
			"the variable takes a comma-separated list",
		set: func(c *Config, v string) error {
			if strings.TrimSpace(v) == "" {
				return fmt.Errorf("expected a model name, got ''")
			}
			c.LoadModels = append(c.LoadModels, strings.TrimSpace(v))
			return nil
		}},
	{name: "repository-poll-secs", metavar: "SECONDS", def: "15",
		help: "poll mode: seconds between scans of the repository (> 0)",
		set: func(c *Config, v string) error {
			x, err := parseFloat(v)
			if err == nil && !(x > 0) {
				err = fmt.Errorf("must be > 0, got %s", v)
			}
			c.RepositoryPoll = time.Duration(x * float64(time.Second))
			return err
		}},
	{name: "host", metavar: "HOST", def: "127.0.0.1",
		help: "address to bind gRPC, REST and metrics",
		set:  stringFlag(func(c *Config) *string { return &c.Host })},
	{name: "port", metavar: "PORT", def: "8001",
		help: "gRPC port (0 = pick a free port)",
		set:  intFlag(func(c *Config) *int { return &c.Port })},
	{name: "http-port", metavar: "PORT", def: "8000",
		shown: fmt.Sprintf("%d, or with --port 0 a free port", DefaultHTTPPort),
		help:  "OIP REST/JSON port (0 = free port, -1 = off)",
		set:   intFlag(func(c *Config) *int { return &c.HTTPPort })},
	{name: "metrics-port", metavar: "PORT", def: "8002",
		help: "Prometheus /metrics port (0 = free port, -1 = disabled)",
		set:  intFlag(func(c *Config) *int { return &c.MetricsPort })},
	{name: "port-file", metavar: "PATH", shown: "-",
		help: "write the bound ports as JSON {\"grpc_port\":..,\"metrics_port\":..,\"http_port\":..," +
			"\"pid\":..} to this file once listening (-1: a port that is off)",
		set: stringFlag(func(c *Config) *string { return &c.PortFile })},
	{name: "engine", metavar: "ENGINE", shown: "the native engine where it admits a model, else exported on the workers",
		choices: []string{"exported", "pjrt"},
		help: "serve EVERY model on the Python workers with this engine: 'exported' " +
			"(Exported.call under jax.jit) or 'pjrt' (compile model.mlirbc, bind arguments from " +
			"the manifest)",
		set: stringFlag(func(c *Config) *string { return &c.Engine })},
	{name: "pjrt-plugin", metavar: "PLUGIN", def: "cpu",
		help: "native engine: the PJRT plugin the front executes eligible models with, no Python " +
			"on their request path (docs/native-engine.md): cpu (the pinned XLA CPU plugin, `make " +
			"setup`), cuda, or a plugin .so path; none = every model on the Python workers",
		set: func(c *Config, v string) error {
			c.PJRTPlugin = strings.TrimSpace(v)
			if c.PJRTPlugin == "none" {
				c.PJRTPlugin = ""
			}
			return nil
		}},
	{name: "workers", metavar: "N", def: "1",
		help: "Python execution worker processes, each loading every model the native engine " +
			"does not serve; started when the first such model loads",
		set: intFlag(func(c *Config) *int { return &c.Workers })},
	{name: "worker-python", metavar: "PATH", shown: "none: a model that needs the workers is UNAVAILABLE",
		help: "the Python interpreter the workers run (PATH -m jaxport.bridge.worker), with jaxport " +
			"installed; jaxport serve passes its own",
		set: stringFlag(func(c *Config) *string { return &c.WorkerPython })},
	{name: "compiled-shapes", metavar: "N", def: strconv.Itoa(DefaultCompiledShapes),
		help: "shape-polymorphic models on the workers (exported with --dim, no bucket for the " +
			"size): executables kept per model, one per request input shape, least recently used evicted",
		set: intFlag(func(c *Config) *int { return &c.CompiledShapes })},
	{name: "cpu-devices", metavar: "N", def: "0",
		help: "CPU devices of each process that executes models, for sharded artifacts (exported " +
			"with --mesh, nrDevices > 1): at least the largest nrDevices served; 0 = jax's default " +
			"(1, or XLA_FLAGS' --xla_force_host_platform_device_count)",
		set: intFlag(func(c *Config) *int { return &c.CPUDevices })},
	{name: "max-message-bytes", metavar: "BYTES", def: strconv.Itoa(DefaultMaxMessageBytes),
		shown: strconv.Itoa(DefaultMaxMessageBytes) + " (96 MiB)",
		help:  "largest gRPC message received or sent, bytes (beyond: RESOURCE_EXHAUSTED)",
		set:   intFlag(func(c *Config) *int { return &c.MaxMessageBytes })},
	{name: "max-inflight-per-model", metavar: "N", def: strconv.Itoa(DefaultMaxInflightPerModel),
		help: "concurrent executions per model version",
		set:  intFlag(func(c *Config) *int { return &c.MaxInflightPerModel })},
	{name: "max-queue-per-model", metavar: "N", def: strconv.Itoa(DefaultMaxQueuePerModel),
		help: "requests waiting per model version beyond which new ones are shed with RESOURCE_EXHAUSTED",
		set:  intFlag(func(c *Config) *int { return &c.MaxQueuePerModel })},
	{name: "tls-cert", metavar: "PEM", shown: "-", help: "PEM server certificate (TLS)",
		set: stringFlag(func(c *Config) *string { return &c.TLSCert })},
	{name: "tls-key", metavar: "PEM", shown: "-", help: "PEM server private key (TLS)",
		set: stringFlag(func(c *Config) *string { return &c.TLSKey })},
	{name: "tls-client-ca", metavar: "PEM", shown: "-",
		help: "PEM CA bundle; clients must present a certificate it signed (mTLS)",
		set:  stringFlag(func(c *Config) *string { return &c.TLSClientCA })},
	{name: "auth-token-file", metavar: "PATH", shown: "-",
		help: "file holding a bearer token every call except health must send as " +
			"'authorization: Bearer <token>'",
		set: stringFlag(func(c *Config) *string { return &c.AuthTokenFile })},
	{name: "grace-period-s", metavar: "SECONDS", def: "10.0",
		help: "seconds SIGTERM waits for in-flight requests to finish",
		set:  secondsFlag(func(c *Config) *time.Duration { return &c.GracePeriod })},
	{name: "log-level", metavar: "LEVEL", def: "INFO", choices: []string{"DEBUG", "INFO", "WARNING", "ERROR"},
		help: "log level",
		set:  stringFlag(func(c *Config) *string { return &c.LogLevel })},
	{name: "batching", metavar: "[BOOL]", def: "false", optionalValue: true,
		help: "dynamic batching for every model exported with --batch-sizes: gather concurrent " +
			"requests, pad to the smallest exported program, split back",
		set: boolFlag(func(c *Config) *bool { return &c.Batching })},
	{name: "max-queue-delay-us", metavar: "US", def: "1000",
		help: "batching: longest wait of the oldest queued request (us)",
		set:  intFlag(func(c *Config) *int { return &c.MaxQueueDelayUs })},
	{name: "preferred-batch-sizes", metavar: "SIZES", shown: "the largest exported size",
		help: "batching: row counts dispatched without waiting, e.g. 8,32",
		set: func(c *Config, v string) error {
			sizes, err := parseSizes(v)
			c.PreferredBatchSizes = sizes
			return err
		}},
	{name: "batch-queue-size", metavar: "N", def: "1024",
		help: "batching: queued requests per model beyond which new ones get UNAVAILABLE",
		set:  intFlag(func(c *Config) *int { return &c.BatchQueueSize })},
	{name: "batching-models", metavar: "LIST", shown: "-",
		help: "dynamic batching per model: comma list of NAME[:MAX_QUEUE_DELAY_US[:SIZE+SIZE...]], " +
			"e.g. mlp:2000:8+32,ranker; alone, only these models batch; with --batching, these are " +
			"overrides for them; a listed model exported without --batch-sizes fails to load",
		set: func(c *Config, v string) error {
			models, err := parseBatchingModels(v)
			c.BatchingModels = models
			return err
		}},
	{name: "trace-otlp-endpoint", metavar: "HOST:PORT", shown: "off",
		help: "tracing: HOST:PORT of an OTLP/gRPC receiver (plaintext) the front sends " +
			"OpenTelemetry spans to, one trace per request, W3C traceparent honoured " +
			"(docs/bridge.md#tracing)",
		set: func(c *Config, v string) error { c.TraceOTLPEndpoint = v; return otlpEndpoint(v) }},
	{name: "system-shared-memory", metavar: "[BOOL]", def: "false", optionalValue: true,
		help: "Triton's system shared memory extension: same-host clients register /dev/shm " +
			"regions and pass tensors through them instead of the message. Lets any caller " +
			"read/write any /dev/shm object this server's user can (see docs/security.md)",
		set: boolFlag(func(c *Config) *bool { return &c.SystemSharedMemory })},
	{name: "front-binary", metavar: "PATH", shown: "the one in the installed jaxport package, else jaxport-front next to its Python",
		help: "read by jaxport serve: the jaxport-front binary it runs (the platform wheel " +
			"installs one in the package; make front puts one next to the checkout's Python)",
		set: stringFlag(func(c *Config) *string { return &c.FrontBinary })},
}

var byName = func() map[string]*flagDef {
	m := make(map[string]*flagDef, len(flags))
	for _, f := range flags {
		if f.choices != nil {
			f, set := f, f.set
			f.set = func(c *Config, v string) error {
				if err := f.choose(v); err != nil {
					return err
				}
				return set(c, v)
			}
		}
		m[f.name] = f
	}
	return m
}()
