// Command jaxport-front is the native serving front of jaxport (issue 12): a grpc-go server
// that terminates the Open Inference Protocol and forwards every call of
// inference.GRPCInferenceService, as (method, serialized request), to one of N Python
// execution workers (python -m jaxport.bridge.worker) over a Unix socket. The workers run
// today's servicer, so protocol behaviour is written once, in Python; the front adds
// transport: health, reflection, message limits, deadlines, worker supervision.
//
//	jaxport-front --repository REPO [--port 8001] [--workers 2] [--worker-cmd "python -m jaxport.bridge.worker"] [jaxport serve flags...]
//
// Flags the front does not know are handed to every worker verbatim (they are `jaxport serve`
// flags: --engine, --batching, ...). --repository, --max-message-bytes, --worker-threads and
// --grace-period-s are read by both. Each front flag can be set as JAXPORT_<FLAG> too.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

type front struct {
	host            string
	port            int
	portFile        string
	metricsPort     int
	httpPort        int // REST/JSON API; -1 = off
	nWorkers        int
	workerCmd       []string
	maxMessageBytes int
	gracePeriod     time.Duration
	workerArgs      []string // forwarded to every worker
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	authTokenFile   string

	workers []*worker
	health  *health.Server
	hmu     sync.Mutex
	stopped bool
}

const defaultMaxMessageBytes = 96 * 1024 * 1024

// option is one flag of the front; shared ones are forwarded to the workers as well.
type option struct {
	name   string
	shared bool
	set    func(f *front, v string) error
}

func intOpt(dst func(*front) *int) func(*front, string) error {
	return func(f *front, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("expected an integer, got %q", v)
		}
		*dst(f) = n
		return nil
	}
}

var options = []option{
	{"host", false, func(f *front, v string) error { f.host = v; return nil }},
	{"port", false, intOpt(func(f *front) *int { return &f.port })},
	{"port-file", false, func(f *front, v string) error { f.portFile = v; return nil }},
	{"metrics-port", false, intOpt(func(f *front) *int { return &f.metricsPort })},
	{"http-port", false, intOpt(func(f *front) *int { return &f.httpPort })},
	{"workers", false, intOpt(func(f *front) *int { return &f.nWorkers })},
	{"worker-cmd", false, func(f *front, v string) error { f.workerCmd = strings.Fields(v); return nil }},
	{"tls-cert", false, func(f *front, v string) error { f.tlsCert = v; return nil }},
	{"tls-key", false, func(f *front, v string) error { f.tlsKey = v; return nil }},
	{"tls-client-ca", false, func(f *front, v string) error { f.tlsClientCA = v; return nil }},
	{"auth-token-file", false, func(f *front, v string) error { f.authTokenFile = v; return nil }},
	{"max-message-bytes", true, intOpt(func(f *front) *int { return &f.maxMessageBytes })},
	{"grace-period-s", true, func(f *front, v string) error {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 {
			return fmt.Errorf("expected seconds >= 0, got %q", v)
		}
		f.gracePeriod = time.Duration(s * float64(time.Second))
		return nil
	}},
}

func defaultWorkerCmd() []string {
	// Built into .venv/bin by `make front`: the venv's python sits next to the binary.
	if exe, err := os.Executable(); err == nil {
		py := filepath.Join(filepath.Dir(exe), "python")
		if _, err := os.Stat(py); err == nil {
			return []string{py, "-m", "jaxport.bridge.worker"}
		}
	}
	return []string{"python3", "-m", "jaxport.bridge.worker"}
}

// parseArgs splits argv into the front's flags (environment JAXPORT_<FLAG> as fallback) and
// the rest, which goes to the workers in order.
func parseArgs(argv []string) (*front, error) {
	f := &front{host: "127.0.0.1", port: 8001, metricsPort: 8002, httpPort: defaultHTTPPort, nWorkers: 1,
		maxMessageBytes: defaultMaxMessageBytes, gracePeriod: 10 * time.Second}
	given := map[string]bool{}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		if arg == "-h" || arg == "--help" {
			return nil, errHelp
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		var opt *option
		if strings.HasPrefix(arg, "--") {
			for j := range options {
				if options[j].name == name {
					opt = &options[j]
				}
			}
		}
		if opt == nil {
			f.workerArgs = append(f.workerArgs, arg)
			continue
		}
		if !hasValue {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			value = argv[i]
		}
		if err := opt.set(f, value); err != nil {
			return nil, fmt.Errorf("--%s: %v", name, err)
		}
		given[name] = true
		if opt.shared {
			f.workerArgs = append(f.workerArgs, "--"+name, value)
		}
	}
	for _, opt := range options {
		env := "JAXPORT_" + strings.ToUpper(strings.ReplaceAll(opt.name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !given[opt.name] {
			if err := opt.set(f, v); err != nil {
				return nil, fmt.Errorf("%s: %v", env, err)
			}
		}
	}
	if f.workerCmd == nil {
		f.workerCmd = defaultWorkerCmd()
	}
	// --port 0 means "any free port, read them from --port-file": a fixed default HTTP port
	// would collide between such fronts, so HTTP takes a free port too unless given.
	_, httpFromEnv := os.LookupEnv("JAXPORT_HTTP_PORT")
	if f.port == 0 && !given["http-port"] && !httpFromEnv {
		f.httpPort = 0
	}
	switch {
	case f.port < 0 || f.port > 65535:
		return nil, fmt.Errorf("--port must be in 0..65535, got %d", f.port)
	case f.metricsPort < -1 || f.metricsPort > 65535:
		return nil, fmt.Errorf("--metrics-port must be in -1..65535, got %d", f.metricsPort)
	case f.httpPort < -1 || f.httpPort > 65535:
		return nil, fmt.Errorf("--http-port must be in -1..65535, got %d", f.httpPort)
	case f.nWorkers < 1:
		return nil, fmt.Errorf("--workers must be >= 1, got %d", f.nWorkers)
	case f.maxMessageBytes < 1:
		return nil, fmt.Errorf("--max-message-bytes must be >= 1, got %d", f.maxMessageBytes)
	case len(f.workerCmd) == 0:
		return nil, fmt.Errorf("--worker-cmd is empty")
	}
	return f, nil
}

var errHelp = fmt.Errorf("help")

const usage = `usage: jaxport-front --repository REPO [--host 127.0.0.1] [--port 8001] [--port-file PATH]
                     [--metrics-port 8002 (-1 = off)] [--http-port 8000 (REST; -1 = off)] [--workers 1] [--worker-cmd "PYTHON -m jaxport.bridge.worker"]
                     [--max-message-bytes 100663296] [--grace-period-s 10]
                     [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]] [--auth-token-file PATH]
                     [jaxport serve flags...]
Unknown flags are passed to every worker (they are jaxport serve flags).`

// updateHealth: SERVING when every worker is up and has loaded its repository.
func (f *front) updateHealth() {
	f.hmu.Lock()
	defer f.hmu.Unlock()
	if f.stopped {
		return
	}
	all := true
	for _, w := range f.workers {
		if _, ready := w.current(); !ready {
			all = false
		}
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if all {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, svc := range []string{"", serviceName} {
		f.health.SetServingStatus(svc, st)
	}
}

// newLogger writes JSON lines shaped like the Python bridge's (ts, level, logger, msg, fields).
func newLogger() *slog.Logger {
	h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.String("ts", a.Value.Time().UTC().Format("2006-01-02T15:04:05.000+00:00"))
			}
			return a
		},
	})
	return slog.New(h).With("logger", "jaxport.front")
}

func writePortFile(path string, content map[string]int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(content)
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// frontProcs is the front's GOMAXPROCS: the cores its workers do not take, at least one. The
// workers execute; the front only moves bytes, and Go's scheduler with more Ps than it has
// work spins idle Ps looking for goroutines on every wake-up. Measured on the 2-core machine
// (docs/performance.md, 2 workers, ghz c=1): front CPU per request 0.20-0.25 ms with 2 Ps,
// 0.13-0.16 ms with 1. An explicit GOMAXPROCS in the environment wins (explicit = true).
func frontProcs(cpus, workers int, explicit bool) int {
	if explicit {
		return runtime.GOMAXPROCS(0)
	}
	return max(1, cpus-workers)
}

func run(argv []string) int {
	slog.SetDefault(newLogger())
	f, err := parseArgs(argv)
	if err == errHelp {
		fmt.Println(usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport front: error: %v\n", err)
		return 2
	}
	_, explicit := os.LookupEnv("GOMAXPROCS")
	procs := frontProcs(runtime.NumCPU(), f.nWorkers, explicit)
	runtime.GOMAXPROCS(procs)
	sockDir, err := os.MkdirTemp("", "jaxport-front-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport front: error: %v\n", err)
		return 1
	}
	defer os.RemoveAll(sockDir)

	creds, err := serverCredentials(f.tlsCert, f.tlsKey, f.tlsClientCA)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport front: error: %v\n", err)
		return 1
	}
	serverOptions := []grpc.ServerOption{
		grpc.ForceServerCodecV2(newRawCodec()),
		grpc.MaxRecvMsgSize(f.maxMessageBytes),
		grpc.MaxSendMsgSize(f.maxMessageBytes),
	}
	if creds != nil {
		serverOptions = append(serverOptions, grpc.Creds(creds))
	}
	var token []byte
	if f.authTokenFile != "" {
		token, err = readTokenFile(f.authTokenFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "jaxport front: error: %v\n", err)
			return 1
		}
		serverOptions = append(serverOptions, tokenInterceptors(token)...)
	}

	address := net.JoinHostPort(f.host, strconv.Itoa(f.port))
	lis, err := net.Listen("tcp", address)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport front: error: cannot listen on %s: %v\n", address, err)
		return 1
	}
	srv := grpc.NewServer(serverOptions...)
	srv.RegisterService(f.serviceDesc(), struct{}{})
	f.health = health.NewServer()
	for _, svc := range []string{"", serviceName} {
		f.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(srv, f.health)
	reflection.Register(srv) // v1 and v1alpha

	stop := make(chan struct{})
	var supervisors sync.WaitGroup
	for i := 0; i < f.nWorkers; i++ {
		f.workers = append(f.workers, &worker{index: i, cmd: f.workerCmd, sockDir: sockDir, front: f, stop: stop})
	}
	for _, w := range f.workers {
		supervisors.Add(1)
		go func() { defer supervisors.Done(); w.supervise() }()
	}

	port := lis.Addr().(*net.TCPAddr).Port
	metricsPort := -1
	if f.metricsPort >= 0 {
		if metricsPort, err = f.serveMetrics(); err != nil {
			fmt.Fprintf(os.Stderr, "jaxport front: error: cannot serve metrics on %s:%d: %v\n", f.host, f.metricsPort, err)
			close(stop)
			f.stopWorkers(&supervisors)
			return 1
		}
	}
	httpPort := -1
	var rest *restServer
	if f.httpPort >= 0 {
		if rest, httpPort, err = f.startREST(token); err != nil {
			fmt.Fprintf(os.Stderr, "jaxport front: error: cannot serve REST on --http-port: %v\n", err)
			close(stop)
			f.stopWorkers(&supervisors)
			return 1
		}
	}
	if f.portFile != "" {
		if err := writePortFile(f.portFile, map[string]int{"grpc_port": port, "metrics_port": metricsPort,
			"http_port": httpPort, "pid": os.Getpid()}); err != nil {
			fmt.Fprintf(os.Stderr, "jaxport front: error: cannot write --port-file %s: %v\n", f.portFile, err)
			close(stop)
			f.stopWorkers(&supervisors)
			return 1
		}
	}
	fmt.Printf("jaxport front: listening on %s:%d\n", f.host, port)
	if metricsPort >= 0 {
		fmt.Printf("jaxport front: metrics on http://%s:%d/metrics\n", f.host, metricsPort)
	}
	if httpPort >= 0 {
		fmt.Printf("jaxport front: REST on %s:%d/v2\n", f.host, httpPort)
	}
	slog.Info("listening", "grpc_port", port, "http_port", httpPort, "workers", f.nWorkers, "gomaxprocs", runtime.GOMAXPROCS(0), "worker_cmd", strings.Join(f.workerCmd, " "))

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigs:
		slog.Info("signal received", "signal", sig.String())
	case err := <-served:
		slog.Error("server stopped", "error", errString(err))
	}
	// Drain: health NOT_SERVING, no new RPCs, in-flight ones finish within the grace period.
	f.hmu.Lock()
	f.stopped = true
	f.hmu.Unlock()
	f.health.Shutdown()
	slog.Info("draining", "grace_period_s", f.gracePeriod.Seconds())
	drained := make(chan struct{})
	restCtx, restCut := context.WithCancel(context.Background())
	defer restCut()
	go func() {
		restDone := make(chan struct{})
		go func() { // REST: no new connections, in-flight requests finish
			if rest != nil {
				_ = rest.shutdown(restCtx)
			}
			close(restDone)
		}()
		srv.GracefulStop()
		<-restDone
		close(drained)
	}()
	go func() { // a second signal during the drain: exit at once (as jaxport serve)
		sig := <-sigs
		slog.Warn("second signal: exiting now", "signal", sig.String(), "exit_status", exitForced)
		os.Exit(exitForced)
	}()
	status := exitDrained
	select {
	case <-drained:
	case <-time.After(f.gracePeriod):
		status = exitCut
		srv.Stop() // cancels the calls still running: their callers get CANCELLED/UNAVAILABLE
		restCut()
		if rest != nil {
			rest.close() // closes the REST connections still open
		}
		<-drained
	}
	close(stop)
	f.stopWorkers(&supervisors)
	slog.Info("stopped", "exit_status", status)
	return status
}

// Exit statuses of jaxport serve: drained, calls cut at the end of the grace period, second
// signal.
const (
	exitDrained = 0
	exitCut     = 3
	exitForced  = 4
)

// stopWorkers: SIGTERM to every worker (they drain nothing by now), SIGKILL after 10 s.
func (f *front) stopWorkers(supervisors *sync.WaitGroup) {
	for _, w := range f.workers {
		w.signal(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() { supervisors.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for _, w := range f.workers {
			w.signal(syscall.SIGKILL)
		}
		<-done
	}
}
