package main

// Tests of Triton's nv_inference_* families (metrics_triton.go): values from ModelStatistics
// fields, the pending gauge's version resolution, and the request head reader.

import (
	"strings"
	"testing"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestTritonMetricsFromStatistics(t *testing.T) {
	d := func(count, ns uint64) *inferencepb.StatisticDuration {
		return &inferencepb.StatisticDuration{Count: count, Ns: ns}
	}
	stats := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{
		{Name: "m", Version: "1", InferenceCount: 12, ExecutionCount: 5, InferenceStats: &inferencepb.InferStatistics{
			Success: d(5, 9_999_999), Fail: d(2, 70_000), Queue: d(5, 1_500),
			ComputeInput: d(5, 2_000), ComputeInfer: d(5, 3_000_999), ComputeOutput: d(5, 999)}},
		{Name: "m", Version: "2"},
	}}
	text := tritonMetrics(stats, map[modelKey]int64{{"m", "1"}: 2, {"m", ""}: 3, {"other", "1"}: 4})
	lines := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		lines[l] = true
	}
	for _, want := range []string{
		"# TYPE nv_inference_request_success counter",
		`nv_inference_request_success{model="m",version="1"} 5`,
		`nv_inference_request_failure{model="m",version="1"} 2`,
		`nv_inference_count{model="m",version="1"} 12`,
		`nv_inference_exec_count{model="m",version="1"} 5`,
		`nv_inference_request_duration_us{model="m",version="1"} 9999`,
		`nv_inference_queue_duration_us{model="m",version="1"} 1`,
		`nv_inference_compute_input_duration_us{model="m",version="1"} 2`,
		`nv_inference_compute_infer_duration_us{model="m",version="1"} 3000`,
		`nv_inference_compute_output_duration_us{model="m",version="1"} 0`,
		"# TYPE nv_inference_pending_request_count gauge",
		`nv_inference_pending_request_count{model="m",version="1"} 2`,
		`nv_inference_pending_request_count{model="m",version="2"} 3`, // "" is the highest version
		`nv_inference_request_success{model="m",version="2"} 0`,
	} {
		if !lines[want] {
			t.Errorf("missing %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "other") || strings.Contains(text, "worker=") {
		t.Errorf("a model without statistics or a worker label shows:\n%s", text)
	}
}

func TestPendingRequestsEnterAndLeave(t *testing.T) {
	p := &pendingRequests{n: map[modelKey]int64{}}
	body, _ := proto.Marshal(&inferencepb.ModelInferRequest{ModelName: "m", ModelVersion: "3", Id: "x",
		RawInputContents: [][]byte{make([]byte, 4096)}})
	leave := p.enter(mem.BufferSlice{mem.SliceBuffer(body[:7]), mem.SliceBuffer(body[7:])})
	leave2 := p.enter(mem.BufferSlice{mem.SliceBuffer(body)})
	if got := p.snapshot()[modelKey{"m", "3"}]; got != 2 {
		t.Fatalf("pending m/3 = %d, want 2", got)
	}
	leave()
	leave2()
	if got := p.snapshot(); len(got) != 0 {
		t.Fatalf("pending after both left = %v, want none", got)
	}
	p.enter(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})})() // unreadable: not counted
	if got := p.snapshot(); len(got) != 0 {
		t.Fatalf("an unreadable request was counted: %v", got)
	}
}
