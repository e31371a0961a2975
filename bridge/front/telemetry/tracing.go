package telemetry

// Tracing: OpenTelemetry spans for every request the front answers, sent over OTLP/gRPC to the
// receiver `--trace-otlp-endpoint HOST:PORT` names (env JAXPORT_TRACE_OTLP_ENDPOINT; off by
// default: no span is made and nothing is exported).
//
//	server span    one per gRPC call (unary or stream) or REST request; a W3C `traceparent`
//	               (gRPC metadata or HTTP header) makes it the caller's child, same trace id
//	  infer        one ModelInfer of a model version (a stream: one per message), with the
//	               attribute jaxport.engine naming the engine that executes it
//	    admission  waiting for a slot of the model's max_inflight_per_model
//	    execute    the execution (native: PJRT; workers: the call to a Python worker, whose
//	               frame carries no trace context), padding and copies included
//	    batcher    a batching model's stay in its batcher (package batch), with children
//	               batch.queue (queued until its execution began) and execute (the batch's
//	               execution), timed from the batcher's Timing
//
// Triton's trace extension answers what is configured (traceSetting): the gRPC TraceSetting
// RPC and REST GET/POST /v2[/models/NAME]/trace/setting, one server-wide setting.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// tracerName is the instrumentation scope of every span the front makes.
const tracerName = "jaxport.front"

// tracer makes the front's spans: a no-op until startTracing installs the SDK's.
var tracer trace.Tracer = noop.NewTracerProvider().Tracer(tracerName)

// Tracing is the front's span pipeline; nil when --trace-otlp-endpoint is not set.
type Tracing struct {
	endpoint string
	provider *sdktrace.TracerProvider
}

// w3c reads and writes `traceparent`/`tracestate` (W3C Trace Context).
var w3c = propagation.TraceContext{}

// Start installs the OTLP/gRPC exporter (plaintext) for endpoint; "" = tracing off
// (nil). Spans are exported in batches in the background; shutdown flushes them.
func Start(endpoint string, spanProcessor ...sdktrace.SpanProcessor) (*Tracing, error) {
	if endpoint == "" {
		return nil, nil
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "jaxport"))),
	}
	if len(spanProcessor) > 0 { // tests: an in-memory recorder instead of a receiver
		for _, p := range spanProcessor {
			opts = append(opts, sdktrace.WithSpanProcessor(p))
		}
	} else {
		exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(endpoint),
			otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, fmt.Errorf("--trace-otlp-endpoint %s: %v", endpoint, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)))
	}
	t := &Tracing{endpoint: endpoint, provider: sdktrace.NewTracerProvider(opts...)}
	tracer = t.provider.Tracer(tracerName)
	return t, nil
}

// Flush exports the spans still buffered (for at most 5 s) and stops the pipeline.
func (t *Tracing) Flush() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		slog.Warn("trace export at shutdown failed", "endpoint", t.endpoint, "error", err.Error())
	}
	tracer = noop.NewTracerProvider().Tracer(tracerName)
}

// StartSpan begins an internal child span of ctx's span (a no-op when tracing is off).
func StartSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// EndSpan ends span with err's gRPC status (codes.OK: no error).
func EndSpan(span trace.Span, err error) {
	if err != nil {
		st := status.Convert(err)
		span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(st.Code())))
		span.SetStatus(otelcodes.Error, status.CodeName(st.Code())+": "+st.Message())
	}
	span.End()
}

// mdCarrier is incoming gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// grpcServerSpan starts the server span of a gRPC call, the caller's child when its metadata
// carries a traceparent.
func grpcServerSpan(ctx context.Context, fullMethod string) (context.Context, trace.Span) {
	md, _ := metadata.FromIncomingContext(ctx)
	ctx = w3c.Extract(ctx, mdCarrier(md))
	service, method, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	return tracer.Start(ctx, service+"/"+method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
}

// endServerSpan records the call's gRPC status on its server span and ends it.
func endServerSpan(span trace.Span, err error) {
	span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(status.Code(err))))
	EndSpan(span, err)
}

// ServerOptions are the gRPC interceptors making each call's server span (none when off).
func (t *Tracing) ServerOptions() []grpc.ServerOption {
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unaryServerSpan), grpc.ChainStreamInterceptor(streamServerSpan)}
}

// unaryServerSpan runs a unary call under its server span.
func unaryServerSpan(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, span := grpcServerSpan(ctx, info.FullMethod)
	out, err := h(ctx, req)
	endServerSpan(span, err)
	return out, err
}

// streamServerSpan runs a streaming call under its server span (the whole stream).
func streamServerSpan(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, span := grpcServerSpan(ss.Context(), info.FullMethod)
	err := h(srv, &tracedStream{ServerStream: ss, ctx: ctx})
	endServerSpan(span, err)
	return err
}

// tracedStream is a server stream whose context holds its server span.
type tracedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tracedStream) Context() context.Context { return s.ctx }

// statusRecorder remembers the HTTP status a REST handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// HTTPHandler wraps the REST API: one server span per request, named "METHOD RPC" (the RPC the
// path maps to, e.g. "POST ModelInfer"; "METHOD unknown" for a path with no endpoint), the
// caller's child when its headers carry a traceparent.
func (t *Tracing) HTTPHandler(next http.Handler, rpcOf func(*http.Request) string) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := w3c.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		rpc := rpcOf(req)
		ctx, span := tracer.Start(ctx, req.Method+" "+rpc, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", req.Method),
				attribute.String("url.path", req.URL.Path), attribute.String("rpc.method", rpc)))
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, req.WithContext(ctx))
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", rec.code))
		if rec.code >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(rec.code))
		}
		span.End()
	})
}

// Settings is what the trace extension reports (Triton's names, opentelemetry mode):
// level TIMESTAMPS when spans are exported, else OFF; every request sampled (rate 1, no
// count limit) unless its traceparent says it is not.
func (t *Tracing) Settings() map[string][]string {
	level, endpoint := "OFF", ""
	if t != nil {
		level, endpoint = "TIMESTAMPS", t.endpoint
	}
	return map[string][]string{
		"trace_mode":    {"opentelemetry"},
		"trace_level":   {level},
		"trace_rate":    {"1"},
		"trace_count":   {"-1"},
		"log_frequency": {"0"},
		"trace_file":    {""},
		"url":           {endpoint},
	}
}

// Update answers a request to change settings: the settings are fixed at start
// (jaxport serve flags), so a value other than the current one, or an unknown name, is
// INVALID_ARGUMENT naming it; restating a value or clearing it (no values) changes nothing.
func (t *Tracing) Update(update map[string][]string) (map[string][]string, error) {
	current := t.Settings()
	names := make([]string, 0, len(update))
	for name := range update {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		values := update[name]
		have, known := current[name]
		switch {
		case !known:
			return nil, status.Errorf(codes.InvalidArgument, "unknown trace setting '%s' (known: log_frequency, "+
				"trace_count, trace_file, trace_level, trace_mode, trace_rate, url)", name)
		case len(values) == 0 || strings.Join(values, ",") == strings.Join(have, ","):
		default:
			return nil, status.Errorf(codes.InvalidArgument, "trace setting '%s' cannot be changed to %q: "+
				"the front traces as --trace-otlp-endpoint configured it (%s = %q)",
				name, values, name, have)
		}
	}
	return current, nil
}

// SpanAt records a finished child span of ctx's span with the given start and end (times
// measured elsewhere, e.g. a batcher's queue and execution).
func SpanAt(ctx context.Context, name string, start, end time.Time, attrs ...attribute.KeyValue) {
	_, span := tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(end))
}
