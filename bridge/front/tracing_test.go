package main

// Unit tests of tracing.go: server spans honour a W3C traceparent (gRPC metadata and HTTP
// header), the batcher's timing becomes batch.queue/execute spans, and Triton's trace
// extension answers (gRPC and REST) with its refusals. The live test, a real front exporting
// to a real OTLP receiver (Jaeger), is tests/front/test_tracing.py.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// recording starts tracing with an in-memory recorder; stopped at the test's end.
func recording(t *testing.T) (*tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tr, err := startTracing("127.0.0.1:4317", rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.flush)
	return tr, rec
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var names []string
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s
		}
		names = append(names, s.Name())
	}
	t.Fatalf("no span %q among %q", name, names)
	return nil
}

func TestTracingOffMakesNothing(t *testing.T) {
	var off *tracing
	if off.serverOptions() != nil {
		t.Fatal("interceptors installed with tracing off")
	}
	h := http.NotFoundHandler()
	if got := off.httpHandler(h); got == nil {
		t.Fatal("no handler")
	}
	if tr, err := startTracing(""); tr != nil || err != nil {
		t.Fatalf("startTracing(\"\") = %v, %v", tr, err)
	}
}

func TestGRPCServerSpanHonoursTraceparent(t *testing.T) {
	tr, rec := recording(t)
	if opts := tr.serverOptions(); len(opts) != 2 {
		t.Fatalf("%d options", len(opts))
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", traceparent))
	_, err := unaryServerSpan(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"},
		func(ctx context.Context, _ any) (any, error) {
			_, child := startSpan(ctx, "native.infer")
			endSpan(child, status.Error(codes.InvalidArgument, "bad input 'x'"))
			return nil, nil
		})
	if err != nil {
		t.Fatal(err)
	}

	server := spanNamed(t, rec, "inference.GRPCInferenceService/ModelInfer")
	if got := server.SpanContext().TraceID().String(); got != callerTrace {
		t.Fatalf("trace id %s, want the caller's %s", got, callerTrace)
	}
	if got := server.Parent().SpanID().String(); got != callerSpan || !server.Parent().IsRemote() {
		t.Fatalf("parent %s (remote %v), want the caller's span %s", got, server.Parent().IsRemote(), callerSpan)
	}
	inner := spanNamed(t, rec, "native.infer")
	if inner.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatal("native.infer is not the server span's child")
	}
	if inner.Status().Description != "INVALID_ARGUMENT: bad input 'x'" {
		t.Fatalf("status %+v", inner.Status())
	}
}

func TestGRPCServerSpanWithoutTraceparentStartsATrace(t *testing.T) {
	_, rec := recording(t)
	_, span := grpcServerSpan(context.Background(), "/inference.GRPCInferenceService/ServerLive")
	endServerSpan(span, nil)
	s := spanNamed(t, rec, "inference.GRPCInferenceService/ServerLive")
	if s.Parent().IsValid() || !s.SpanContext().TraceID().IsValid() {
		t.Fatalf("parent %v trace %v", s.Parent(), s.SpanContext().TraceID())
	}
}

func TestStreamInterceptorGivesTheHandlerTheSpan(t *testing.T) {
	_, rec := recording(t)
	ss := &fakeStream{ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", traceparent))}
	handler := func(_ any, s grpc.ServerStream) error {
		_, child := startSpan(s.Context(), "worker.call ModelInfer")
		child.End()
		return status.Error(codes.Unavailable, "no execution worker")
	}
	err := streamServerSpan(nil, ss, &grpc.StreamServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelStreamInfer"}, handler)
	if status.Code(err) != codes.Unavailable {
		t.Fatal(err)
	}
	server := spanNamed(t, rec, "inference.GRPCInferenceService/ModelStreamInfer")
	child := spanNamed(t, rec, "worker.call ModelInfer")
	if child.Parent().SpanID() != server.SpanContext().SpanID() || server.SpanContext().TraceID().String() != callerTrace {
		t.Fatal("the stream's child span is not in the caller's trace under the server span")
	}
	if server.Status().Description != "UNAVAILABLE: no execution worker" {
		t.Fatalf("status %+v", server.Status())
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func TestHTTPServerSpanHonoursTraceparent(t *testing.T) {
	tr, rec := recording(t)
	h := tr.httpHandler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, child := startSpan(req.Context(), "native.infer")
		child.End()
		w.WriteHeader(http.StatusBadRequest)
	}))
	req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", strings.NewReader("{}"))
	req.Header.Set("traceparent", traceparent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	server := spanNamed(t, rec, "POST ModelInfer")
	if server.SpanContext().TraceID().String() != callerTrace || server.Parent().SpanID().String() != callerSpan {
		t.Fatalf("trace %s parent %s", server.SpanContext().TraceID(), server.Parent().SpanID())
	}
	if spanNamed(t, rec, "native.infer").Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatal("child not under the REST server span")
	}
	found := false
	for _, a := range server.Attributes() {
		if string(a.Key) == "http.response.status_code" && a.Value.AsInt64() == 400 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no status code 400 in %v", server.Attributes())
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/nowhere", nil))
	spanNamed(t, rec, "GET unknown")
}

func TestBatchSpansFollowTheBatchersTiming(t *testing.T) {
	_, rec := recording(t)
	ctx, parent := startSpan(context.Background(), "batcher")
	submitted := time.Unix(1000, 0)
	batchSpans(ctx, submitted, batch.Timing{Queue: 3 * time.Millisecond, Execute: 5 * time.Millisecond,
		BatchSize: 4, Rows: 1, First: true, BatchRows: 3}, nil)
	parent.End()
	q, e := spanNamed(t, rec, "batch.queue"), spanNamed(t, rec, "execute")
	if !q.StartTime().Equal(submitted) || !q.EndTime().Equal(submitted.Add(3*time.Millisecond)) {
		t.Fatalf("queue %v..%v", q.StartTime(), q.EndTime())
	}
	if !e.StartTime().Equal(q.EndTime()) || e.EndTime().Sub(e.StartTime()) != 5*time.Millisecond {
		t.Fatalf("execute %v..%v", e.StartTime(), e.EndTime())
	}
	for _, s := range []sdktrace.ReadOnlySpan{q, e} {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Fatalf("%s not under batcher", s.Name())
		}
	}
	before := len(rec.Ended())
	batchSpans(ctx, submitted, batch.Timing{}, status.Error(codes.Unavailable, "queue full"))
	if len(rec.Ended()) != before {
		t.Fatal("a request that never ran got execution spans")
	}
}

func TestTraceSettings(t *testing.T) {
	var off *tracing
	if got := off.traceSettings()["trace_level"]; len(got) != 1 || got[0] != "OFF" {
		t.Fatalf("off: %q", got)
	}
	on, _ := recording(t)
	got, err := on.updateTraceSettings(map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": nil})
	if err != nil || got["trace_level"][0] != "TIMESTAMPS" || got["url"][0] != "127.0.0.1:4317" ||
		got["trace_mode"][0] != "opentelemetry" {
		t.Fatalf("restating: %v %v", got, err)
	}
	for update, msg := range map[string]string{
		"trace_level": `trace setting 'trace_level' cannot be changed to ["OFF"]: the front traces as jaxport serve --trace-otlp-endpoint configured it (trace_level = ["TIMESTAMPS"])`,
		"verbosity":   "unknown trace setting 'verbosity' (known: log_frequency, trace_count, trace_file, trace_level, trace_mode, trace_rate, url)",
	} {
		_, err := on.updateTraceSettings(map[string][]string{update: {"OFF"}})
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != msg {
			t.Errorf("%s: %v", update, err)
		}
	}
}

func TestTraceSettingRPC(t *testing.T) {
	f := &front{}
	body, err := proto.Marshal(&inferencepb.TraceSettingRequest{ModelName: "m"})
	if err != nil {
		t.Fatal(err)
	}
	// through the unary path, as grpc-go calls it: the raw codec's message comes back
	answer, err := f.unary(context.Background(), traceSettingMethod, mem.BufferSlice{mem.SliceBuffer(body)}, forwardOne, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := newRawCodec().Marshal(answer)
	if err != nil {
		t.Fatal(err)
	}
	resp := &inferencepb.TraceSettingResponse{}
	if err := proto.Unmarshal(out.Materialize(), resp); err != nil {
		t.Fatal(err)
	}
	if v := resp.GetSettings()["trace_level"].GetValue(); len(v) != 1 || v[0] != "OFF" {
		t.Fatalf("trace_level %q", v)
	}
	body, _ = proto.Marshal(&inferencepb.TraceSettingRequest{Settings: map[string]*inferencepb.TraceSettingRequest_SettingValue{
		"trace_rate": {Value: []string{"100"}}}})
	if _, err := f.traceSettingRPC(body); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "'trace_rate' cannot be changed to [\"100\"]") {
		t.Fatalf("update: %v", err)
	}
	if _, err := f.traceSettingRPC([]byte{0xff}); status.Code(err) != codes.Internal {
		t.Fatalf("garbage: %v", err)
	}
	if methodNameOf(traceSettingMethod) != "TraceSetting" || methodNameOf(modelInferMethod) != "ModelInfer" {
		t.Fatal("method names")
	}
}

func TestTraceSettingRoute(t *testing.T) {
	for path, method := range map[string]string{"/v2/trace/setting": "GET", "/v2/trace/setting/": "POST",
		"/v2/models/m/trace/setting": "POST"} {
		got, err := parseRoute(method, path)
		if err != nil || got != (route{rpc: "TraceSetting", method: method}) {
			t.Errorf("%s %s: %+v %v", method, path, got, err)
		}
	}
	if got, _ := parseRoute("PUT", "/v2/trace/setting"); got.method != "GET" {
		t.Errorf("PUT allowed: %+v", got)
	}
	for _, path := range []string{"/v2/models//trace/setting", "/v2/models/a/b/trace/setting", "/v3/trace/setting",
		"/v2/trace/settings"} {
		if got, err := parseRoute("GET", path); err == nil && got.rpc == "TraceSetting" {
			t.Errorf("%s routed to %+v", path, got)
		}
	}
}

func TestTraceSettingREST(t *testing.T) {
	on, _ := recording(t)
	r := &restServer{f: &front{trace: on, maxMessageBytes: 1 << 20}}
	call := func(method, body string) (int, map[string]any) {
		var req *http.Request
		if body == "" {
			req = httptest.NewRequest(method, "/v2/trace/setting", nil)
		} else {
			req = httptest.NewRequest(method, "/v2/trace/setting", strings.NewReader(body))
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %q: %v: %s", method, body, err, w.Body.String())
		}
		return w.Code, out
	}
	code, got := call("GET", "")
	if code != 200 || got["trace_rate"] != "1" || got["trace_count"] != "-1" || got["url"] != "127.0.0.1:4317" {
		t.Fatalf("GET: %d %v", code, got)
	}
	if lv, ok := got["trace_level"].([]any); !ok || len(lv) != 1 || lv[0] != "TIMESTAMPS" {
		t.Fatalf("trace_level %v", got["trace_level"])
	}
	if code, got := call("POST", `{"trace_level": ["TIMESTAMPS"], "trace_rate": null}`); code != 200 || got["trace_rate"] != "1" {
		t.Fatalf("restating: %d %v", code, got)
	}
	for body, msg := range map[string]string{
		`{"trace_rate": "5"}`: `trace setting 'trace_rate' cannot be changed to ["5"]`,
		`{"trace_rate": 5}`:   `trace setting 'trace_rate': expected a string, an array of strings or null, got 5`,
		`{"x": ["a"]}`:        `unknown trace setting 'x'`,
		`[1]`:                 `trace setting body: expected a JSON object`,
	} {
		code, got := call("POST", body)
		if code != 400 || !strings.Contains(got["error"].(string), msg) {
			t.Errorf("%s: %d %v", body, code, got)
		}
	}
}
