package main

// Tracing (issue 27 item 5): OpenTelemetry spans for every request the front answers, sent
// over OTLP/gRPC to the receiver `jaxport serve --trace-otlp-endpoint HOST:PORT` names (env
// JAXPORT_TRACE_OTLP_ENDPOINT; off by default: no span is made and nothing is exported).
//
//	server span    one per gRPC call (unary or stream) or REST request; a W3C `traceparent`
//	               (gRPC metadata or HTTP header) makes it the caller's child, same trace id
//	  native.infer the native engine's handling of one ModelInfer (a stream: one per message)
//	    admission  waiting for a slot of the model's max_inflight_per_model (admission.go)
//	    execute    the PJRT execution (padding and copies included)
//	    batcher    a batching model's stay in its batcher (package batch), with children
//	               batch.queue (queued until its execution began) and execute (the batch's
//	               execution), timed from the batcher's Timing
//	  worker.call  a call forwarded to a Python worker (frame.go), until its reply; the frame
//	               carries no trace context: the worker makes no spans of its own
//
// Triton's trace extension answers what is configured (traceSetting): the gRPC TraceSetting
// RPC and REST GET/POST /v2[/models/NAME]/trace/setting, one server-wide setting.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
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
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// tracerName is the instrumentation scope of every span the front makes.
const tracerName = "jaxport.front"

// tracer makes the front's spans: a no-op until startTracing installs the SDK's.
var tracer trace.Tracer = noop.NewTracerProvider().Tracer(tracerName)

// tracing is the front's span pipeline; nil when --trace-otlp-endpoint is not set.
type tracing struct {
	endpoint string
	provider *sdktrace.TracerProvider
}

// w3c reads and writes `traceparent`/`tracestate` (W3C Trace Context).
var w3c = propagation.TraceContext{}

// startTracing installs the OTLP/gRPC exporter (plaintext) for endpoint; "" = tracing off
// (nil). Spans are exported in batches in the background; shutdown flushes them.
func startTracing(endpoint string, spanProcessor ...sdktrace.SpanProcessor) (*tracing, error) {
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
	t := &tracing{endpoint: endpoint, provider: sdktrace.NewTracerProvider(opts...)}
	tracer = t.provider.Tracer(tracerName)
	return t, nil
}

// flush exports the spans still buffered (for at most 5 s) and stops the pipeline.
func (t *tracing) flush() {
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

// traceSettingMethod is TraceSetting's wire id: the front answers it (service.go f.unary).
var traceSettingMethod = methodIndex("TraceSetting")

// startWorkerSpan begins the client span of one call forwarded to a worker.
func startWorkerSpan(ctx context.Context, method uint8) (context.Context, trace.Span) {
	name := methodNameOf(method)
	return tracer.Start(ctx, "worker.call "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rpc.method", name)))
}

// methodNameOf is the RPC whose wire id is method (its declaration order).
func methodNameOf(method uint8) string {
	sd := inferencepb.File_inference_grpc_service_proto.Services().ByName("GRPCInferenceService")
	return string(sd.Methods().Get(int(method)).Name())
}

// startSpan begins an internal child span of ctx's span (a no-op when tracing is off).
func startSpan(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends span with err's gRPC status (codes.OK: no error).
func endSpan(span trace.Span, err error) {
	if err != nil {
		st := status.Convert(err)
		span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(st.Code())))
		span.SetStatus(otelcodes.Error, codeName(st.Code())+": "+st.Message())
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
	endSpan(span, err)
}

// serverOptions are the gRPC interceptors making each call's server span (none when off).
func (t *tracing) serverOptions() []grpc.ServerOption {
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

// httpHandler wraps the REST API: one server span per request, named "METHOD RPC" (the RPC the
// path maps to, e.g. "POST ModelInfer"; "METHOD unknown" for a path with no endpoint), the
// caller's child when its headers carry a traceparent.
func (t *tracing) httpHandler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := w3c.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		rpc := "unknown"
		if rt, err := parseRoute(req.Method, req.URL.EscapedPath()); err == nil {
			rpc = rt.rpc
		}
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

// traceSettings is what the trace extension reports (Triton's names, opentelemetry mode):
// level TIMESTAMPS when spans are exported, else OFF; every request sampled (rate 1, no
// count limit) unless its traceparent says it is not.
func (t *tracing) traceSettings() map[string][]string {
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

// updateTraceSettings answers a request to change settings: the settings are fixed at start
// (jaxport serve flags), so a value other than the current one, or an unknown name, is
// INVALID_ARGUMENT naming it; restating a value or clearing it (no values) changes nothing.
func (t *tracing) updateTraceSettings(update map[string][]string) (map[string][]string, error) {
	current := t.traceSettings()
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
				"the front traces as jaxport serve --trace-otlp-endpoint configured it (%s = %q)",
				name, values, name, have)
		}
	}
	return current, nil
}

// traceSettingUnary is traceSettingRPC as the unary path's answer (service.go f.unary).
func (f *front) traceSettingUnary(body []byte) (any, error) {
	out, err := f.traceSettingRPC(body)
	if err != nil {
		return nil, err
	}
	return &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(out)}}, nil
}

// traceSettingRPC answers gRPC TraceSetting (model_name is accepted: one server-wide setting).
func (f *front) traceSettingRPC(body []byte) ([]byte, error) {
	req := &inferencepb.TraceSettingRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		return nil, status.Error(codes.Internal, "Exception deserializing request!")
	}
	update := map[string][]string{}
	for name, v := range req.GetSettings() {
		update[name] = v.GetValue()
	}
	settings, err := f.trace.updateTraceSettings(update)
	if err != nil {
		return nil, err
	}
	resp := &inferencepb.TraceSettingResponse{Settings: map[string]*inferencepb.TraceSettingResponse_SettingValue{}}
	for name, values := range settings {
		resp.Settings[name] = &inferencepb.TraceSettingResponse_SettingValue{Value: values}
	}
	return proto.Marshal(resp)
}

// traceSettingREST answers GET/POST /v2[/models/NAME]/trace/setting: a JSON object of the
// settings, single values as strings and trace_level as an array (Triton's shapes); POST's
// body is such an object of the settings to change (a value: string, array of strings, or
// null to clear).
func (r *restServer) traceSettingREST(w http.ResponseWriter, req *http.Request) {
	update := map[string][]string{}
	if req.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(req.Body, int64(r.f.maxMessageBytes)+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cannot read the request body: %v", err))
			return
		}
		var raw map[string]any
		if err := json.Unmarshal(body, &raw); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("trace setting body: expected a JSON object, %v", err))
			return
		}
		for name, v := range raw {
			values, ok := settingValues(v)
			if !ok {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("trace setting '%s': expected a string, an array "+
					"of strings or null, got %s", name, mustJSON(v)))
				return
			}
			update[name] = values
		}
	}
	settings, err := r.f.trace.updateTraceSettings(update)
	if err != nil {
		writeFailure(w, err)
		return
	}
	out := map[string]any{}
	for name, values := range settings {
		if name == "trace_level" {
			out[name] = values
		} else {
			out[name] = values[0]
		}
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// settingValues reads one REST setting value: "x" -> [x], ["x", ...] -> [x ...], null -> [].
func settingValues(v any) ([]string, bool) {
	switch v := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{v}, true
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// traceSettingRoute: the path is /v2/trace/setting or /v2/models/NAME/trace/setting (GET
// reads, POST updates).
func traceSettingRoute(method, p string) (route, bool) {
	rest, ok := strings.CutSuffix(p, "/trace/setting")
	if !ok {
		return route{}, false
	}
	if rest != "/v2" {
		name, isModel := strings.CutPrefix(rest, "/v2/models/")
		if !isModel || name == "" || strings.Contains(name, "/") {
			return route{}, false
		}
	}
	allowed := http.MethodGet
	if method == http.MethodPost {
		allowed = http.MethodPost
	}
	return route{rpc: "TraceSetting", method: allowed}, true
}

// modelAttrs name the model version a span is about.
func modelAttrs(model *nativeModel) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("jaxport.model", model.name),
		attribute.String("jaxport.model_version", model.version)}
}

// batchSpans records a batched request's stay in its batcher from the batcher's Timing, as
// children of ctx's span: batch.queue (submitted until its execution began) and execute (the
// batch's execution, with the batch's size and real rows). A request that never ran (shed,
// deadline) has neither.
func batchSpans(ctx context.Context, submitted time.Time, bt batch.Timing, err error) {
	if err != nil || bt.BatchSize == 0 {
		return
	}
	began := submitted.Add(bt.Queue)
	_, queue := tracer.Start(ctx, "batch.queue", trace.WithTimestamp(submitted))
	queue.End(trace.WithTimestamp(began))
	_, exec := tracer.Start(ctx, "execute", trace.WithTimestamp(began), trace.WithAttributes(
		attribute.Int("jaxport.batch_size", bt.BatchSize), attribute.Int("jaxport.batch_rows", bt.BatchRows),
		attribute.Bool("jaxport.first_of_batch", bt.First)))
	exec.End(trace.WithTimestamp(began.Add(bt.Execute)))
}
