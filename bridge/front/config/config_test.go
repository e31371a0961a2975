package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/bridge.md's flag table")

func parse(t *testing.T, env []string, argv ...string) *Config {
	t.Helper()
	c, err := Parse("jaxport serve", argv, env)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", argv, env, err)
	}
	return c
}

// refused parses and returns the one-line error, checking its kind.
func refused(t *testing.T, wantExit int, env []string, argv ...string) string {
	t.Helper()
	_, err := Parse("jaxport serve", argv, env)
	if err == nil {
		t.Fatalf("Parse(%q, %q) accepted", argv, env)
	}
	if got := ExitCode(err); got != wantExit {
		t.Fatalf("Parse(%q, %q): exit %d, want %d (%v)", argv, env, got, wantExit, err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("not one line: %q", err)
	}
	return err.Error()
}

func TestDefaults(t *testing.T) {
	c := parse(t, nil, "--repository", "repo")
	want := &Config{Repository: "repo", ModelVersionPolicy: "latest", ModelControlMode: ModeNone,
		RepositoryPoll: 15 * time.Second, Host: "127.0.0.1", Port: 8001, HTTPPort: 8000, MetricsPort: 8002,
		MaxMessageBytes: 96 << 20, GracePeriod: 10 * time.Second, LogLevel: "INFO", PJRTPlugin: "cpu",
		Workers: 1, CompiledShapes: 32, MaxInflightPerModel: 4, MaxQueuePerModel: 64,
		MaxQueueDelayUs: 1000, BatchQueueSize: 1024}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
	if c.MaxMessageBytes < 64<<20+1024 {
		t.Fatal("a 64 MiB tensor and its message must fit")
	}
	if _, _, ok := c.BatchingFor("mlp"); ok {
		t.Fatal("nothing batches by default")
	}
}

func TestPrecedenceFlagOverEnvOverDefault(t *testing.T) {
	env := []string{"JAXPORT_REPOSITORY=from-env", "JAXPORT_PORT=9000", "JAXPORT_ENGINE=pjrt",
		"JAXPORT_GRACE_PERIOD_S=2.5", "JAXPORT_PORT_FILE=/tmp/p.json", "HOME=/x", "JAXPORT_BATCHING=yes"}
	c := parse(t, env, "--port", "0", "--engine=exported")
	if c.Repository != "from-env" || c.Port != 0 || c.Engine != "exported" || c.GracePeriod != 2500*time.Millisecond ||
		c.PortFile != "/tmp/p.json" || !c.Batching {
		t.Fatalf("%+v", c)
	}
	if c.HTTPPort != 0 { // --port 0 and no --http-port: REST on a free port too
		t.Fatalf("http port %d", c.HTTPPort)
	}
}

func TestLastFlagWins(t *testing.T) {
	c := parse(t, nil, "--repository", "a", "--port", "1", "--repository=b", "--port", "2")
	if c.Repository != "b" || c.Port != 2 {
		t.Fatalf("%+v", c)
	}
}

func TestHTTPPortIsResolvedOnce(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		env  []string
		want int
	}{
		{nil, nil, 8000},
		{[]string{"--port", "0"}, nil, 0},
		{[]string{"--port", "0", "--http-port", "9"}, nil, 9},
		{[]string{"--http-port", "-1"}, nil, -1},
		{[]string{"--port", "0"}, []string{"JAXPORT_HTTP_PORT=8500"}, 8500},
	} {
		c := parse(t, tc.env, append([]string{"--repository", "r"}, tc.argv...)...)
		if c.HTTPPort != tc.want {
			t.Errorf("%q %q: http port %d, want %d", tc.argv, tc.env, c.HTTPPort, tc.want)
		}
	}
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	r := []string{"--repository", "r"}
	for _, tc := range []struct {
		argv []string
		env  []string
		want string
	}{
		{nil, nil, "--repository (or JAXPORT_REPOSITORY) is required"},
		{r, []string{"JAXPORT_METRICS_PORT=x"}, "JAXPORT_METRICS_PORT='x': invalid int value: 'x'"},
		{append(r, "--metrics-port", "x"), nil, "argument --metrics-port: invalid int value: 'x'"},
		{append(r, "--metrics-port", "-2"), nil, "--metrics-port must be in -1..65535, got -2"},
		{append(r, "--port", "65536"), nil, "--port must be in 0..65535, got 65536"},
		{append(r, "--port", "-1"), nil, "--port must be in 0..65535, got -1"},
		{append(r, "--http-port", "-2"), nil, "--http-port must be in -1..65535, got -2"},
		{r, []string{"JAXPORT_ENGINE=tpu"}, "JAXPORT_ENGINE='tpu': invalid choice: 'tpu' (choose from 'exported', 'pjrt')"},
		{append(r, "--model-version-policy", "oldest"), nil,
			"argument --model-version-policy: invalid choice: 'oldest' (choose from 'latest', 'all')"},
		{append(r, "--log-level", "info"), nil, "argument --log-level: invalid choice: 'info'"},
		{append(r, "--model-control-mode", "auto"), nil,
			"argument --model-control-mode: invalid choice: 'auto' (choose from 'none', 'explicit', 'poll')"},
		{append(r, "--grace-period-s", "soon"), nil, "argument --grace-period-s: invalid float value: 'soon'"},
		{append(r, "--grace-period-s", "-1"), nil, "--grace-period-s must be >= 0, got -1"},
		{append(r, "--batching", "maybe"), nil, "argument --batching: expected true/false, got 'maybe'"},
		{r, []string{"JAXPORT_SYSTEM_SHARED_MEMORY=2"}, "JAXPORT_SYSTEM_SHARED_MEMORY='2': expected true/false, got '2'"},
		{append(r, "--preferred-batch-sizes", "8,x"), nil,
			"argument --preferred-batch-sizes: expected comma-separated integers like 8,32, got '8,x'"},
		{append(r, "--preferred-batch-sizes", "8,0"), nil, "--preferred-batch-sizes must be positive, got [8, 0]"},
		{append(r, "--trace-otlp-endpoint", "collector"), nil,
			"argument --trace-otlp-endpoint: expected HOST:PORT of an OTLP/gRPC receiver (e.g. 127.0.0.1:4317), got 'collector'"},
		{append(r, "--trace-otlp-endpoint", "h:0"), nil, "got 'h:0'"},
		{append(r, "--trace-otlp-endpoint", ":4317"), nil, "got ':4317'"},
		{append(r, "--trace-otlp-endpoint", "h:+80"), nil, "got 'h:+80'"},
	} {
		got := refused(t, ExitUsage, tc.env, tc.argv...)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q %q:\n got %q\nwant %q", tc.argv, tc.env, got, tc.want)
		}
	}
}

func TestLimitsHaveTheirMinimum(t *testing.T) {
	for _, tc := range []struct {
		flag string
		bad  string
		min  string
	}{
		{"max-message-bytes", "0", "1"}, {"max-inflight-per-model", "0", "1"}, {"batch-queue-size", "0", "1"},
		{"workers", "0", "1"}, {"compiled-shapes", "0", "1"}, {"cpu-devices", "-1", "0"},
		{"max-queue-per-model", "-1", "0"}, {"max-queue-delay-us", "-1", "0"},
	} {
		want := "--" + tc.flag + " must be >= " + tc.min + ", got " + tc.bad
		if got := refused(t, ExitUsage, nil, "--repository", "r", "--"+tc.flag, tc.bad); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
		env := []string{(&flagDef{name: tc.flag}).env() + "=" + tc.bad}
		if got := refused(t, ExitUsage, env, "--repository", "r"); got != want {
			t.Errorf("env: got %q, want %q", got, want)
		}
	}
	c := parse(t, nil, "--repository", "r", "--max-queue-per-model", "0", "--cpu-devices", "0", "--max-queue-delay-us", "0")
	if c.MaxQueuePerModel != 0 || c.MaxQueueDelayUs != 0 {
		t.Fatalf("%+v", c)
	}
}

func TestCommandLineMistakes(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"--repository", "r", "--bogus", "1"}, "unrecognized argument: --bogus (see `jaxport serve --help`)"},
		// Abbreviations are not flags (argparse took unique prefixes; the front does not).
		{[]string{"--repo", "r"}, "unrecognized argument: --repo (see `jaxport serve --help`)"},
		{[]string{"--repository", "r", "--metrics", "1"}, "unrecognized argument: --metrics "},
		{[]string{"--repository", "r", "-port", "1"}, "unrecognized argument: -port "},
		{[]string{"--repository", "r", "stray"}, "unrecognized argument: stray "},
		{[]string{"--repository"}, "argument --repository: expected one argument (see `jaxport serve --help`)"},
		{[]string{"--repository", "--port", "0"}, "argument --repository: expected one argument"},
	} {
		if got := refused(t, ExitUsage, nil, tc.argv...); !strings.Contains(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.argv, got, tc.want)
		}
	}
	// A value may start with one dash (a negative port), and '=' takes anything.
	c := parse(t, nil, "--repository=--odd", "--metrics-port", "-1", "--model-name=")
	if c.Repository != "--odd" || c.MetricsPort != -1 || c.ModelName != "" {
		t.Fatalf("%+v", c)
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		_, err := Parse("jaxport serve", []string{"--bogus", arg}, nil)
		if !errors.Is(err, ErrHelp) || ExitCode(err) != 0 {
			t.Fatalf("%s: %v", arg, err)
		}
	}
	text := Usage("jaxport serve")
	flat := strings.Join(strings.Fields(text), "")
	if !strings.HasPrefix(text, "usage: jaxport serve --repository DIR|URL") {
		t.Fatal(text)
	}
	for _, f := range flags {
		if !strings.Contains(text, "  --"+f.name+" ") || !strings.Contains(flat, f.env()) {
			t.Errorf("--help lacks --%s or %s", f.name, f.env())
		}
	}
	for _, key := range []string{"grpc_port", "metrics_port", "http_port", "pid"} {
		if !strings.Contains(flat, `"`+key+`":`) {
			t.Errorf("--help does not name the port file's key %s", key)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if len(line) > helpWidth && strings.Contains(line, " ") {
			t.Errorf("line longer than %d: %q", helpWidth, line)
		}
	}
	for _, want := range []string{"(default: 8001)", "env JAXPORT_WORKERS (default: 1)", "env JAXPORT_REPOSITORY (required)",
		"(default: 8000, or with --port 0 a free port)"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestEveryFlagSetsItsField: a non-default value of each flag changes the Config, and no two
// flags set the same field (a flag that sets nothing would mean nothing).
func TestEveryFlagSetsItsField(t *testing.T) {
	values := map[string][]string{
		"repository": {"other"}, "model-name": {"m"}, "model-version-policy": {"all"},
		"model-control-mode": {"poll"}, "load-model": {"a"}, "repository-poll-secs": {"2"},
		"host": {"0.0.0.0"}, "port": {"7"}, "http-port": {"9"}, "metrics-port": {"-1"},
		"port-file": {"p.json"}, "engine": {"pjrt"}, "pjrt-plugin": {"none"}, "workers": {"3"},
		"worker-python": {os.Args[0]}, "compiled-shapes": {"2"}, "cpu-devices": {"4"},
		"max-message-bytes": {"5"}, "max-inflight-per-model": {"2"}, "max-queue-per-model": {"1"},
		"tls-cert": {"c"}, "tls-key": {"k"}, "tls-client-ca": {"ca"}, "auth-token-file": {"t"},
		"grace-period-s": {"1"}, "log-level": {"DEBUG"}, "batching": {"true"},
		"max-queue-delay-us": {"5"}, "preferred-batch-sizes": {"8"}, "batch-queue-size": {"3"},
		"batching-models": {"m"}, "trace-otlp-endpoint": {"h:1"}, "system-shared-memory": {"on"},
		"front-binary": {"/x"},
	}
	base := parse(t, nil, "--repository", "r")
	changedBy := map[string]string{}
	for _, f := range flags {
		v, ok := values[f.name]
		if !ok {
			t.Errorf("no test value for --%s", f.name)
			continue
		}
		argv := []string{"--repository", "r", "--" + f.name, v[0]}
		switch f.name {
		case "load-model":
			argv = append(argv, "--model-control-mode", "explicit")
		case "repository-poll-secs":
			argv = append(argv, "--model-control-mode", "poll")
		}
		c := parse(t, nil, argv...)
		got, want := reflect.ValueOf(*c), reflect.ValueOf(*base)
		var changed []string
		for i := 0; i < got.NumField(); i++ {
			if !reflect.DeepEqual(got.Field(i).Interface(), want.Field(i).Interface()) {
				changed = append(changed, got.Type().Field(i).Name)
			}
		}
		own := ""
		for _, name := range changed {
			if name != "ModelControlMode" || f.name == "model-control-mode" {
				own = name
			}
		}
		if own == "" {
			t.Errorf("--%s %s changes nothing", f.name, v[0])
		} else if other, dup := changedBy[own]; dup {
			t.Errorf("--%s and --%s both set %s", f.name, other, own)
		}
		changedBy[own] = f.name
	}
	// Every field of Config is some flag's (HTTPPort's resolution aside).
	for i, typ := 0, reflect.TypeOf(Config{}); i < typ.NumField(); i++ {
		if _, ok := changedBy[typ.Field(i).Name]; !ok {
			t.Errorf("Config.%s is set by no flag", typ.Field(i).Name)
		}
	}
}

func TestBooleanFlags(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		env  []string
		want bool
	}{
		{[]string{"--batching"}, nil, true},
		{[]string{"--batching", "--port", "0"}, nil, true},
		{[]string{"--batching", "false"}, nil, false},
		{[]string{"--batching=no"}, nil, false},
		{[]string{"--batching=ON"}, nil, true},
		{nil, []string{"JAXPORT_BATCHING=1"}, true},
		{[]string{"--batching", "0"}, []string{"JAXPORT_BATCHING=1"}, false},
	} {
		if c := parse(t, tc.env, append([]string{"--repository", "r"}, tc.argv...)...); c.Batching != tc.want {
			t.Errorf("%q %q: batching %v", tc.argv, tc.env, c.Batching)
		}
	}
	c := parse(t, nil, "--system-shared-memory", "--repository", "r")
	if !c.SystemSharedMemory || c.Repository != "r" {
		t.Fatalf("%+v", c)
	}
}

func TestBatchingModels(t *testing.T) {
	c := parse(t, nil, "--repository", "r", "--batching-models", "mlp:2000:8+32, ranker::4,plain",
		"--max-queue-delay-us", "500", "--preferred-batch-sizes", "16")
	check := func(model string, delay int, sizes []int, ok bool) {
		t.Helper()
		d, s, k := c.BatchingFor(model)
		if d != delay || !reflect.DeepEqual(s, sizes) || k != ok {
			t.Errorf("%s: (%d, %v, %v), want (%d, %v, %v)", model, d, s, k, delay, sizes, ok)
		}
	}
	check("mlp", 2000, []int{8, 32}, true)
	check("ranker", 500, []int{4}, true) // empty delay: the global one
	check("plain", 500, []int{16}, true)
	check("other", 0, nil, false) // not listed, no --batching
	c = parse(t, nil, "--repository", "r", "--batching", "--batching-models", "mlp:0")
	check("mlp", 0, nil, true)
	check("other", 1000, nil, true)
	c = parse(t, []string{"JAXPORT_BATCHING_MODELS=a:7"}, "--repository", "r")
	check("a", 7, nil, true)

	for _, tc := range []struct{ spec, want string }{
		{"mlp:x", "entry 'mlp:x': queue delay 'x' is not an integer number of microseconds"},
		{"mlp:-1", "entry 'mlp:-1': queue delay must be >= 0"},
		{"mlp:10:8+y", "preferred sizes '8+y' must be integers joined by '+'"},
		{"mlp:10:0", "preferred sizes must be positive"},
		{"mlp:1:2:3", "expected NAME[:MAX_QUEUE_DELAY_US[:SIZE+SIZE...]]"},
		{":10", "entry ':10': expected NAME"},
		{"mlp,mlp:5", "model 'mlp' is listed twice"},
	} {
		got := refused(t, ExitUsage, nil, "--repository", "r", "--batching-models", tc.spec)
		if !strings.HasPrefix(got, "argument --batching-models: ") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q", tc.spec, got)
		}
		got = refused(t, ExitUsage, []string{"JAXPORT_BATCHING_MODELS=" + tc.spec}, "--repository", "r")
		if !strings.HasPrefix(got, "JAXPORT_BATCHING_MODELS=") || !strings.Contains(got, tc.want) {
			t.Errorf("env %s: %q", tc.spec, got)
		}
	}
}

func TestModelControl(t *testing.T) {
	r := []string{"--repository", "r"}
	c := parse(t, nil, append(r, "--model-control-mode", "explicit", "--load-model", "a", "--load-model=b", "--load-model", "a")...)
	if c.ModelControlMode != ModeExplicit || !reflect.DeepEqual(c.LoadModels, []string{"a", "b"}) {
		t.Fatalf("%+v", c)
	}
	c = parse(t, []string{"JAXPORT_MODEL_CONTROL_MODE=explicit", "JAXPORT_LOAD_MODEL=x, y"}, r...)
	if !reflect.DeepEqual(c.LoadModels, []string{"x", "y"}) {
		t.Fatalf("%+v", c.LoadModels)
	}
	// The flags replace the variable's list (flag > env), they do not add to it.
	c = parse(t, []string{"JAXPORT_LOAD_MODEL=x"}, append(r, "--model-control-mode", "explicit", "--load-model", "z")...)
	if !reflect.DeepEqual(c.LoadModels, []string{"z"}) {
		t.Fatalf("%+v", c.LoadModels)
	}
	c = parse(t, nil, append(r, "--model-control-mode", "explicit", "--load-model", "*")...)
	if !reflect.DeepEqual(c.LoadModels, []string{AllModels}) {
		t.Fatalf("%+v", c.LoadModels)
	}
	c = parse(t, nil, append(r, "--model-control-mode", "explicit")...) // nothing at the start
	if len(c.LoadModels) != 0 {
		t.Fatalf("%+v", c.LoadModels)
	}
	c = parse(t, nil, append(r, "--model-control-mode", "poll", "--repository-poll-secs", "0.25")...)
	if c.RepositoryPoll != 250*time.Millisecond {
		t.Fatalf("%v", c.RepositoryPoll)
	}
	for _, tc := range []struct {
		argv []string
		env  []string
		want string
	}{
		{[]string{"--load-model", "a"}, nil,
			"--load-model needs --model-control-mode explicit (mode none loads every model at the start)"},
		{[]string{"--model-control-mode", "poll"}, []string{"JAXPORT_LOAD_MODEL=a"},
			"--load-model needs --model-control-mode explicit (mode poll loads every model at the start)"},
		{[]string{"--model-control-mode", "explicit", "--load-model", "*", "--load-model", "a"}, nil,
			"--load-model '*' (every model) must be the only --load-model, got ['*', 'a']"},
		{[]string{"--model-control-mode", "explicit", "--load-model", " "}, nil,
			"argument --load-model: expected a model name, got ''"},
		{[]string{"--model-control-mode", "explicit"}, []string{"JAXPORT_LOAD_MODEL="},
			"JAXPORT_LOAD_MODEL='': expected a model name"},
		{[]string{"--repository-poll-secs", "5"}, nil,
			"--repository-poll-secs needs --model-control-mode poll (mode none does not rescan the repository)"},
		{[]string{"--model-control-mode", "explicit"}, []string{"JAXPORT_REPOSITORY_POLL_SECS=5"},
			"--repository-poll-secs needs --model-control-mode poll (mode explicit does not rescan"},
		{[]string{"--model-control-mode", "poll", "--repository-poll-secs", "0"}, nil,
			"argument --repository-poll-secs: must be > 0, got 0"},
		{[]string{"--model-control-mode", "poll", "--repository-poll-secs", "NaN"}, nil, "must be > 0, got NaN"},
	} {
		if got := refused(t, ExitUsage, tc.env, append(r, tc.argv...)...); !strings.Contains(got, tc.want) {
			t.Errorf("%q %q:\n got %q\nwant %q", tc.argv, tc.env, got, tc.want)
		}
	}
}

func TestRetiredFlagsAreRefusedNamingTheReplacement(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		env  []string
		want string
	}{
		{[]string{"--frontend", "python"}, nil, retired[0].text},
		{[]string{"--frontend=native"}, nil, retired[0].text},
		{nil, []string{"JAXPORT_FRONTEND=python"}, retired[0].text},
		{[]string{"--worker-threads", "64"}, nil, retired[1].text},
		{nil, []string{"JAXPORT_WORKER_THREADS=64"}, retired[1].text},
	} {
		if got := refused(t, ExitUsage, tc.env, append([]string{"--repository", "r"}, tc.argv...)...); got != tc.want {
			t.Errorf("%q %q: %q", tc.argv, tc.env, got)
		}
	}
	if !strings.Contains(retired[1].text, "--max-inflight-per-model") || !strings.HasSuffix(retired[1].text, "drop it") {
		t.Fatal(retired[1].text)
	}
	// A retired flag is refused even before the required one is missed.
	if got := refused(t, ExitUsage, nil, "--worker-threads=1"); got != retired[1].text {
		t.Fatal(got)
	}
}

func TestEngineAndPlugin(t *testing.T) {
	c := parse(t, nil, "--repository", "r")
	if c.Engine != "" || c.PJRTPlugin != "cpu" {
		t.Fatalf("%+v", c)
	}
	for _, tc := range []struct{ value, want string }{{"none", ""}, {"", ""}, {" cuda ", "cuda"}, {"/p/x.so", "/p/x.so"}} {
		if c := parse(t, nil, "--repository", "r", "--pjrt-plugin", tc.value); c.PJRTPlugin != tc.want {
			t.Errorf("%q: %q", tc.value, c.PJRTPlugin)
		}
	}
}

func TestWorkerPython(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "python")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c := parse(t, nil, "--repository", "r", "--worker-python", script); c.WorkerPython != script {
		t.Fatal(c.WorkerPython)
	}
	if c := parse(t, []string{"JAXPORT_WORKER_PYTHON=sh"}, "--repository", "r"); c.WorkerPython != "sh" {
		t.Fatal(c.WorkerPython) // a name is looked up in PATH
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "--worker-python " + filepath.Join(dir, "missing") + ": no such file"},
		{plain, "--worker-python " + plain + ": is not executable"},
		{dir, "--worker-python " + dir + ": is a directory, not a Python interpreter"},
		{"no-such-python-here", "--worker-python no-such-python-here: not found in PATH"},
	} {
		if got := refused(t, ExitStart, nil, "--repository", "r", "--worker-python", tc.path); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestExitCodeAndProg(t *testing.T) {
	if ExitCode(nil) != 0 || ExitCode(ErrHelp) != 0 || ExitCode(&UsageError{"x"}) != 2 ||
		ExitCode(&StartError{"x"}) != 1 || ExitCode(errors.New("other")) != 1 {
		t.Fatal("exit codes")
	}
	for argv0, want := range map[string]string{"jaxport serve": "jaxport serve",
		"/opt/bin/jaxport-front": "jaxport-front", "jaxport-front": "jaxport-front", "": "jaxport-front"} {
		if got := Prog(argv0); got != want {
			t.Errorf("Prog(%q) = %q", argv0, got)
		}
	}
	// The --help pointer names the program.
	if _, err := Parse("jaxport-front", []string{"--x"}, nil); !strings.Contains(err.Error(), "(see `jaxport-front --help`)") {
		t.Fatal(err)
	}
}

func TestSlogLevel(t *testing.T) {
	for level, want := range map[string]string{"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "ERROR": "ERROR"} {
		if got := parse(t, nil, "--repository", "r", "--log-level", level).SlogLevel().String(); got != want {
			t.Errorf("%s: %s", level, got)
		}
	}
}

// TestDocsTable: docs/bridge.md's flag table is MarkdownTable (from the one definition).
func TestDocsTable(t *testing.T) {
	path := filepath.Join("..", "..", "..", "docs", "bridge.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- flags: generated by bridge/front/config (go test ./config -args -update-docs) -->\n", "<!-- /flags -->"
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", path, strings.TrimSpace(begin), end)
	}
	if got := doc[i+len(begin) : j]; got != MarkdownTable() {
		if *updateDocs {
			if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+MarkdownTable()+doc[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("%s's flag table is stale: go test ./config -args -update-docs", path)
	}
}
