// Command jaxport-front is the native serving front of jaxport (issue 12): a grpc-go server
// that terminates the Open Inference Protocol and forwards every call of
// inference.GRPCInferenceService, as (method, serialized request), to one of N Python
// execution workers (python -m jaxport.bridge.worker) over a Unix socket. The workers run
// today's servicer, so protocol behaviour is written once, in Python; the front adds
// transport: health, reflection, message limits, deadlines, worker supervision.
//
//	jaxport-front --config JSON
//
// `jaxport serve` starts it (exec, same PID) with ONE resolved configuration (config.go):
// the Settings fields the front uses, the worker command and the `jaxport serve` flags every
// worker gets. Which models batch, the front learns from the workers (route.go).
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
	workerArgs      []string // the `jaxport serve` flags, handed to every worker
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	authTokenFile   string
	routes          *router // which models batch (asked of the workers)
	pjrtPlugin      string  // native engine's plugin choice; "" = none
	maxInflight     int     // per model version, for natively executed requests
	maxQueue        int
	batchQueueSize  int
	native          *natives // models the front executes itself (native.go)

	traceEndpoint string   // OTLP/gRPC receiver of spans; "" = tracing off
	trace         *tracing // nil when off (tracing.go)

	workers []*worker
	health  *health.Server
	hmu     sync.Mutex
	stopped bool
}

// updateHealth: SERVING when every worker is up and has loaded its repository, and the native
// engine has opened the models it serves.
func (f *front) updateHealth() {
	f.hmu.Lock()
	defer f.hmu.Unlock()
	if f.stopped {
		return
	}
	all := f.native.ready() // the native engine has opened its models (native.go)
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
// 0.13-0.16 ms with 1. With the native engine the front executes models itself and takes
// every core (`native`): each execution is a cgo call of ~0.1 ms, after which Go hands the P
// to another thread; with one P that hand-off serialised the front (bench, c=16, MLP batch 8:
// 4,461 req/s with 1 P, 5,718 with 2). An explicit GOMAXPROCS in the environment wins
// (explicit = true).
func frontProcs(cpus, workers int, native, explicit bool) int {
	if explicit {
		return runtime.GOMAXPROCS(0)
	}
	if native {
		return cpus
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
	if f.trace, err = startTracing(f.traceEndpoint); err != nil {
		fmt.Fprintf(os.Stderr, "jaxport front: error: %v\n", err)
		return 1
	}
	defer f.trace.flush()
	serverOptions = append(serverOptions, f.trace.serverOptions()...) // before the token check: refusals traced
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
	// "", the service, and each model by name (health_model.go)
	healthpb.RegisterHealthServer(srv, &modelHealth{Server: f.health, f: f})
	reflection.Register(srv) // v1 and v1alpha

	f.native = newNatives(f, f.pjrtPlugin)
	_, explicit := os.LookupEnv("GOMAXPROCS")
	runtime.GOMAXPROCS(frontProcs(runtime.NumCPU(), f.nWorkers, f.native.plugin != nil, explicit))
	httpPort := -1 // listened on before any worker starts: a port in use exits 1 with none started
	var rest *restServer
	if f.httpPort >= 0 {
		if rest, httpPort, err = f.listenREST(token); err != nil {
			fmt.Fprintf(os.Stderr, "jaxport front: error: cannot serve REST on --http-port: %v\n", err)
			return 1
		}
	}
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
	if rest != nil {
		rest.serve()
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
