// Command jaxport-front is jaxport's server: the Open Inference Protocol over gRPC and REST
// for every model of a repository, the native engine executing what it can, Python workers
// started only for models that need them (docs/front.md). This file is wiring only.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jaxport/jaxport/bridge/front/compression"
	"github.com/jaxport/jaxport/bridge/front/config"
	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/native"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"github.com/jaxport/jaxport/bridge/front/rest"
	"github.com/jaxport/jaxport/bridge/front/security"
	"github.com/jaxport/jaxport/bridge/front/server"
	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	"github.com/jaxport/jaxport/bridge/front/workers"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var _ = compression.ResponseEncoding // registers gRPC's deflate

// Exit statuses after a signal: drained, calls cut at the end of the grace period, second
// signal (1: a port or file that cannot be used, 2: usage).
const (
	exitDrained = 0
	exitCut     = 3
	exitForced  = 4
)

func main() { os.Exit(run(os.Args[1:])) }

// newLogger writes JSON lines (ts, level, logger, msg, fields).
func newLogger(level slog.Level) *slog.Logger {
	h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level,
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

// prog names the program in error lines: "jaxport serve" when jaxport serve exec'ed the
// front, else "jaxport-front".
var prog = "jaxport-front"

func fail(status int, format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "%s: error: "+format+"\n", append([]any{prog}, args...)...)
	return status
}

func run(argv []string) int {
	prog = config.Prog(os.Args[0])
	o, err := config.Parse(prog, argv, os.Environ())
	if err == config.ErrHelp {
		fmt.Print(config.Usage(prog))
		return 0
	}
	if err != nil {
		return fail(config.ExitCode(err), "%v", err)
	}
	log := newLogger(o.SlogLevel())
	slog.SetDefault(log)
	// A repository that cannot be served is a usage mistake, before anything listens.
	if err := repository.CheckRoot(context.Background(), o.Repository, o.ModelName); err != nil {
		return fail(2, "%v", err)
	}

	// Transport security and tracing, before anything listens.
	creds, err := security.ServerCredentials(o.TLSCert, o.TLSKey, o.TLSClientCA)
	if err != nil {
		return fail(1, "%v", err)
	}
	tracing, err := telemetry.Start(o.TraceOTLPEndpoint)
	if err != nil {
		return fail(1, "%v", err)
	}
	defer tracing.Flush()
	serverOptions := []grpc.ServerOption{grpc.ForceServerCodecV2(server.Codec()),
		grpc.MaxRecvMsgSize(o.MaxMessageBytes), grpc.MaxSendMsgSize(o.MaxMessageBytes)}
	if creds != nil {
		serverOptions = append(serverOptions, grpc.Creds(creds))
	}
	serverOptions = append(serverOptions, tracing.ServerOptions()...) // before the token check: refusals traced
	var token []byte
	if o.AuthTokenFile != "" {
		if token, err = security.ReadTokenFile(o.AuthTokenFile); err != nil {
			return fail(1, "%v", err)
		}
		serverOptions = append(serverOptions, security.TokenInterceptors(token)...)
	}

	// Backends: the native engine, the workers (started when a model needs them).
	var eng *native.Engine
	nativeOff := ""
	switch {
	case o.PJRTPlugin == "":
		nativeOff = "the native engine is off (--pjrt-plugin none)"
		log.Info("native engine off (--pjrt-plugin none): every model is served by the workers")
	default:
		if eng, err = native.Load(o.PJRTPlugin); err != nil {
			nativeOff = "the native engine is off: " + err.Error()
			log.Warn("native engine off: every model is served by the workers", "reason", err.Error())
		} else {
			log.Info("native engine on", "plugin", eng.String())
		}
	}
	if _, explicit := os.LookupEnv("GOMAXPROCS"); !explicit {
		runtime.GOMAXPROCS(runtime.NumCPU()) // the front executes: every core
	}
	var pool *workers.Pool
	var backend dispatch.Workers
	if o.WorkerPython != "" { // started when the first model that needs them is loaded
		pool = workers.New(workers.WithPython(o.WorkerPython), workers.WithProcesses(o.Workers),
			workers.WithCPUDevices(o.CPUDevices), workers.WithCompiledShapes(o.CompiledShapes),
			workers.WithMaxFrameBytes(o.MaxMessageBytes+64<<10), workers.WithLogLevel(o.LogLevel), workers.WithLogger(log))
		defer pool.Close()
		backend = dispatch.WorkerPool(pool)
	}
	d := dispatch.New(dispatch.Options{Native: eng, NativeOff: nativeOff, Engine: o.Engine, Workers: backend,
		Batching: func(model string) *dispatch.Batching {
			delayUs, preferred, on := o.BatchingFor(model)
			if !on {
				return nil
			}
			listed := slices.ContainsFunc(o.BatchingModels, func(m config.ModelBatching) bool { return m.Name == model })
			return &dispatch.Batching{MaxQueueDelay: time.Duration(delayUs) * time.Microsecond, Preferred: preferred, Listed: listed}
		},
		BatchQueueSize: o.BatchQueueSize, Admission: dispatch.NewAdmission(o.MaxInflightPerModel, o.MaxQueuePerModel), Log: log})
	repo, err := repository.New[*dispatch.Model](o.Repository, loader(d), repository.Options{
		Policy: o.ModelVersionPolicy, Mode: o.ModelControlMode, LoadModels: o.LoadModels,
		PollEvery: o.RepositoryPoll, SingleModel: o.ModelName, Log: log})
	if err != nil {
		return fail(2, "%v", err)
	}
	defer repo.Close()
	var registry *shm.Registry
	if o.SystemSharedMemory {
		registry = shm.New(shm.Root, shm.MaxRegions)
		defer registry.Close()
	}
	svc := server.New(server.Options{Repository: served{repo}, SharedMemory: registry, Tracing: tracing,
		Metrics: telemetry.NewMetrics(), Dispatcher: d, Log: log, Extra: func() string { return workerMetrics(pool, o.Workers) }})

	// Listen: gRPC, REST, metrics.
	address := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return fail(1, "cannot listen on %s: %v", address, err)
	}
	httpPort := -1
	var restServer *rest.Server
	if o.HTTPPort >= 0 {
		tlsConfig, err := security.TLSConfig(o.TLSCert, o.TLSKey, o.TLSClientCA)
		if err != nil {
			return fail(1, "%v", err)
		}
		restServer, httpPort, err = rest.Listen(svc, net.JoinHostPort(o.Host, strconv.Itoa(o.HTTPPort)), tlsConfig, token, o.MaxMessageBytes)
		if err != nil {
			return fail(1, "cannot serve REST on --http-port: %v", err)
		}
	}
	srv := grpc.NewServer(serverOptions...)
	health := svc.Register(srv)
	port := lis.Addr().(*net.TCPAddr).Port
	metricsPort := -1
	if o.MetricsPort >= 0 {
		ml, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.MetricsPort)))
		if err != nil {
			return fail(1, "cannot serve metrics on %s:%d: %v", o.Host, o.MetricsPort, err)
		}
		metricsPort = ml.Addr().(*net.TCPAddr).Port
		ms := &http.Server{Handler: svc.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ms.Serve(ml) }()
	}
	if restServer != nil {
		restServer.Serve()
	}
	if o.PortFile != "" {
		if err := writePortFile(o.PortFile, map[string]int{"grpc_port": port, "metrics_port": metricsPort,
			"http_port": httpPort, "pid": os.Getpid()}); err != nil {
			return fail(1, "cannot write --port-file %s: %v", o.PortFile, err)
		}
	}
	fmt.Printf("jaxport front: listening on %s:%d\n", o.Host, port)
	if metricsPort >= 0 {
		fmt.Printf("jaxport front: metrics on http://%s:%d/metrics\n", o.Host, metricsPort)
	}
	if httpPort >= 0 {
		fmt.Printf("jaxport front: REST on %s:%d/v2\n", o.Host, httpPort)
	}
	log.Info("listening", "grpc_port", port, "http_port", httpPort, "gomaxprocs", runtime.GOMAXPROCS(0))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	// The initial load; then ready.
	loaded := make(chan struct{})
	go func() {
		began := time.Now()
		repo.Start(context.Background())
		svc.SetReady()
		for _, s := range []string{"", server.ServiceName} {
			health.SetServingStatus(s, healthpb.HealthCheckResponse_SERVING)
		}
		log.Info("server ready", "seconds", time.Since(began).Seconds())
		close(loaded)
	}()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-sigs:
		log.Info("signal received", "signal", sig.String())
	case err := <-served:
		log.Error("server stopped", "error", fmt.Sprint(err))
	}
	// Drain: not ready, no new RPCs, in-flight ones finish within the grace period.
	svc.Drain()
	health.Shutdown()
	log.Info("draining", "grace_period_s", o.GracePeriod.Seconds())
	drained := make(chan struct{})
	restCtx, restCut := context.WithCancel(context.Background())
	defer restCut()
	go func() {
		restDone := make(chan struct{})
		go func() { // REST: no new connections, in-flight requests finish
			if restServer != nil {
				_ = restServer.Shutdown(restCtx)
			}
			close(restDone)
		}()
		srv.GracefulStop()
		<-restDone
		close(drained)
	}()
	go func() {
		sig := <-sigs
		log.Warn("second signal: exiting now", "signal", sig.String(), "exit_status", exitForced)
		os.Exit(exitForced)
	}()
	status := exitDrained
	select {
	case <-drained:
	case <-time.After(o.GracePeriod):
		status = exitCut
		srv.Stop() // cancels the calls still running: their callers get CANCELLED/UNAVAILABLE
		restCut()
		if restServer != nil {
			restServer.Close()
		}
		<-drained
	}
	log.Info("stopped", "exit_status", status)
	return status
}

// workerMetrics: the worker processes running now and restarted so far.
func workerMetrics(pool *workers.Pool, configured int) string {
	running, restarts := 0, int64(0)
	if pool != nil {
		running, restarts = len(pool.PIDs()), pool.Restarts()
	}
	return fmt.Sprintf("# HELP jaxport_front_workers Worker processes by state\n"+
		"# TYPE jaxport_front_workers gauge\n"+
		"jaxport_front_workers{state=\"configured\"} %d\n"+
		"jaxport_front_workers{state=\"running\"} %d\n"+
		"# HELP jaxport_front_worker_restarts_total Worker processes restarted after exiting\n"+
		"# TYPE jaxport_front_worker_restarts_total counter\n"+
		"jaxport_front_worker_restarts_total %d\n", configured, running, restarts)
}
