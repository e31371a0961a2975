package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	"github.com/jaxport/jaxport/bridge/front/status"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
)

func recording(t *testing.T) (*telemetry.Tracing, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tr, err := telemetry.Start("127.0.0.1:4317", rec)
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

func TestBatchSpansFollowTheBatchersTiming(t *testing.T) {
	_, rec := recording(t)
	ctx, parent := telemetry.StartSpan(context.Background(), "batcher")
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
	batchSpans(ctx, submitted, batch.Timing{}, status.New(codes.Unavailable, "queue full"))
	if len(rec.Ended()) != before {
		t.Fatal("a request that never ran got execution spans")
	}
}
