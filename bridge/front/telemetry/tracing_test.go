package telemetry

// Unit tests of tracing.go: server spans honour a W3C traceparent (gRPC metadata and HTTP
// header), and the trace settings (Triton's extension) with their refusals. The live test, a
// real front exporting to a real OTLP receiver (Jaeger), is tests/front/test_tracing.py.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// recording starts tracing with an in-memory recorder; stopped at the test's end.
func recording(t *testing.T) (*Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tr, err := Start("127.0.0.1:4317", rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Flush)
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
	var off *Tracing
	if off.ServerOptions() != nil {
		t.Fatal("interceptors installed with tracing off")
	}
	h := http.NotFoundHandler()
	if got := off.HTTPHandler(h, func(*http.Request) string { return "unknown" }); got == nil {
		t.Fatal("no handler")
	}
	if tr, err := Start(""); tr != nil || err != nil {
		t.Fatalf("Start(\"\") = %v, %v", tr, err)
	}
}

func TestGRPCServerSpanHonoursTraceparent(t *testing.T) {
	tr, rec := recording(t)
	if opts := tr.ServerOptions(); len(opts) != 2 {
		t.Fatalf("%d options", len(opts))
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", traceparent))
	_, err := unaryServerSpan(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"},
		func(ctx context.Context, _ any) (any, error) {
			_, child := StartSpan(ctx, "infer")
			EndSpan(child, status.New(codes.InvalidArgument, "bad input 'x'"))
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
	inner := spanNamed(t, rec, "infer")
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
		_, child := StartSpan(s.Context(), "worker.call ModelInfer")
		child.End()
		return status.New(codes.Unavailable, "no execution worker")
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
	rpcOf := func(req *http.Request) string {
		if req.URL.Path == "/v2/models/m/infer" {
			return "ModelInfer"
		}
		return "unknown"
	}
	h := tr.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, child := StartSpan(req.Context(), "infer")
		child.End()
		w.WriteHeader(http.StatusBadRequest)
	}), rpcOf)
	req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", strings.NewReader("{}"))
	req.Header.Set("traceparent", traceparent)
	h.ServeHTTP(httptest.NewRecorder(), req)
	server := spanNamed(t, rec, "POST ModelInfer")
	if server.SpanContext().TraceID().String() != callerTrace || server.Parent().SpanID().String() != callerSpan {
		t.Fatalf("trace %s parent %s", server.SpanContext().TraceID(), server.Parent().SpanID())
	}
	if spanNamed(t, rec, "infer").Parent().SpanID() != server.SpanContext().SpanID() {
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

func TestTraceSettings(t *testing.T) {
	var off *Tracing
	if got := off.Settings()["trace_level"]; len(got) != 1 || got[0] != "OFF" {
		t.Fatalf("off: %q", got)
	}
	on, _ := recording(t)
	got, err := on.Update(map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": nil})
	if err != nil || got["trace_level"][0] != "TIMESTAMPS" || got["url"][0] != "127.0.0.1:4317" ||
		got["trace_mode"][0] != "opentelemetry" {
		t.Fatalf("restating: %v %v", got, err)
	}
	for update, msg := range map[string]string{
		"trace_level": `trace setting 'trace_level' cannot be changed to ["OFF"]: the front traces as --trace-otlp-endpoint configured it (trace_level = ["TIMESTAMPS"])`,
		"verbosity":   "unknown trace setting 'verbosity' (known: log_frequency, trace_count, trace_file, trace_level, trace_mode, trace_rate, url)",
	} {
		_, err := on.Update(map[string][]string{update: {"OFF"}})
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != msg {
			t.Errorf("%s: %v", update, err)
		}
	}
}
