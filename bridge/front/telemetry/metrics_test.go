package telemetry

// Tests of metrics.go: every family from the model's own counters (jaxport_* and Triton's
// nv_inference_*, whose values equal the ModelStatistics fields by construction), the
// pending gauge, readiness and load phases, no worker label.

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestMetricsTextFromTheCounters(t *testing.T) {
	s := NewModelStats()
	s.Record(10*time.Millisecond, codes.OK, &Timings{Queue: 1500 * time.Nanosecond, Input: 2 * time.Microsecond,
		Infer: 3 * time.Millisecond, Output: 999, Inferences: 4, Executions: 1})
	s.Record(2*time.Millisecond, codes.OK, &Timings{Inferences: 4, Executions: 0})
	s.Record(70*time.Microsecond, codes.InvalidArgument, nil)
	leave := s.Enter()
	m := NewMetrics()
	m.CountRPC("/inference.GRPCInferenceService/ModelInfer", codes.OK)
	m.CountRPC("/inference.GRPCInferenceService/ModelInfer", codes.OK)
	m.CountRPC("/inference.GRPCInferenceService/ModelInfer", codes.InvalidArgument)
	var b strings.Builder
	m.Write(&b, []Model{
		{Name: "m", Version: "1", Ready: true, Stats: s, LoadSeconds: map[string]float64{"compile": 0.5, "warmup": 0.25}},
		{Name: "broken", Version: "1"},
	}, map[[2]string]uint64{{"m", "admitted"}: 2}, "# extra\n")
	leave()
	text := b.String()
	lines := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		lines[l] = true
	}
	for _, want := range []string{
		"# TYPE jaxport_inference_requests counter",
		`jaxport_inference_requests_total{model="m",version="1"} 3`,
		`jaxport_inference_success_total{model="m",version="1"} 2`,
		`jaxport_inference_failure_total{model="m",version="1",code="INVALID_ARGUMENT"} 1`,
		`jaxport_inference_request_duration_seconds_count{model="m",version="1"} 3`,
		`jaxport_inference_request_duration_seconds_bucket{model="m",version="1",le="0.0001"} 1`,
		`jaxport_inference_queue_duration_seconds_count{model="m",version="1"} 2`,
		`jaxport_admission_total{model="m",outcome="admitted"} 2`,
		`jaxport_grpc_requests_total{method="/inference.GRPCInferenceService/ModelInfer",code="OK"} 2`,
		`jaxport_grpc_requests_total{method="/inference.GRPCInferenceService/ModelInfer",code="INVALID_ARGUMENT"} 1`,
		`jaxport_model_ready{model="m",version="1"} 1`,
		`jaxport_model_ready{model="broken",version="1"} 0`,
		`jaxport_model_load_seconds{model="m",version="1",phase="compile"} 0.5`,
		"# TYPE nv_inference_request_success counter",
		`nv_inference_request_success{model="m",version="1"} 2`,
		`nv_inference_request_failure{model="m",version="1"} 1`,
		`nv_inference_count{model="m",version="1"} 8`,
		`nv_inference_exec_count{model="m",version="1"} 1`,
		`nv_inference_request_duration_us{model="m",version="1"} 12000`,
		`nv_inference_queue_duration_us{model="m",version="1"} 1`,
		`nv_inference_compute_infer_duration_us{model="m",version="1"} 3000`,
		"# TYPE nv_inference_pending_request_count gauge",
		`nv_inference_pending_request_count{model="m",version="1"} 1`,
		"# extra",
	} {
		if !lines[want] {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, `jaxport_inference_requests_total{model="broken"`) {
		t.Errorf("a version never served has request counters:\n%s", text)
	}
	if strings.Contains(text, "worker=") {
		t.Errorf("a worker label:\n%s", text)
	}
	st := s.Statistics("m", "1")
	if st.GetInferenceCount() != 8 || st.GetExecutionCount() != 1 || len(st.GetBatchStats()) != 1 ||
		st.GetBatchStats()[0].GetBatchSize() != 4 || st.GetInferenceStats().GetFail().GetCount() != 1 {
		t.Errorf("statistics %v", st)
	}
}

func TestFormatLe(t *testing.T) {
	for v, want := range map[float64]string{1e-4: "0.0001", 2.5e-4: "0.00025", 1: "1.0", 30: "30.0", 0.25: "0.25"} {
		if got := formatLe(v); got != want {
			t.Errorf("%v: %q, want %q", v, got, want)
		}
	}
}
