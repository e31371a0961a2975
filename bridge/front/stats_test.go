package main

import (
	"strings"
	"testing"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func dur(count, ns uint64) *inferencepb.StatisticDuration {
	return &inferencepb.StatisticDuration{Count: count, Ns: ns}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMergeStatisticsSumsPerModelVersion(t *testing.T) {
	w0 := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{
		{Name: "mlp", Version: "1", LastInference: 100, InferenceCount: 8, ExecutionCount: 2,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(8, 800), Queue: dur(8, 80),
				ComputeInfer: dur(2, 20)},
			BatchStats: []*inferencepb.InferBatchStatistics{
				{BatchSize: 1, ComputeInfer: dur(1, 5)}, {BatchSize: 7, ComputeInfer: dur(1, 15)}},
			MemoryUsage: []*inferencepb.MemoryUsage{{Type: "CPU", Id: 0, ByteSize: 10}}},
		{Name: "only0", Version: "1", InferenceCount: 1, ExecutionCount: 1,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(1, 1)}},
	}}
	w1 := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{
		{Name: "mlp", Version: "2", LastInference: 1, InferenceCount: 3, ExecutionCount: 3,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(3, 30)}},
		{Name: "mlp", Version: "1", LastInference: 250, InferenceCount: 4, ExecutionCount: 4,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(4, 40), Fail: dur(1, 9),
				Queue: dur(4, 4), ComputeInfer: dur(4, 44), CacheMiss: dur(2, 2)},
			BatchStats: []*inferencepb.InferBatchStatistics{
				{BatchSize: 4, ComputeInfer: dur(1, 40)}, {BatchSize: 1, ComputeInfer: dur(3, 4),
					ComputeInput: dur(3, 3)}},
			MemoryUsage: []*inferencepb.MemoryUsage{{Type: "CPU", Id: 0, ByteSize: 5},
				{Type: "GPU", Id: 1, ByteSize: 7}}},
	}}
	out, err := mergeStatistics([][]byte{marshal(t, w0), marshal(t, w1)})
	if err != nil {
		t.Fatal(err)
	}
	got := &inferencepb.ModelStatisticsResponse{}
	if err := proto.Unmarshal(out, got); err != nil {
		t.Fatal(err)
	}
	want := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{
		{Name: "mlp", Version: "1", LastInference: 250, InferenceCount: 12, ExecutionCount: 6,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(12, 840), Fail: dur(1, 9),
				Queue: dur(12, 84), ComputeInfer: dur(6, 64), CacheMiss: dur(2, 2)},
			BatchStats: []*inferencepb.InferBatchStatistics{
				{BatchSize: 1, ComputeInfer: dur(4, 9), ComputeInput: dur(3, 3)},
				{BatchSize: 4, ComputeInfer: dur(1, 40)},
				{BatchSize: 7, ComputeInfer: dur(1, 15)}},
			MemoryUsage: []*inferencepb.MemoryUsage{{Type: "CPU", Id: 0, ByteSize: 15},
				{Type: "GPU", Id: 1, ByteSize: 7}}},
		{Name: "only0", Version: "1", InferenceCount: 1, ExecutionCount: 1,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(1, 1)}},
		{Name: "mlp", Version: "2", LastInference: 1, InferenceCount: 3, ExecutionCount: 3,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(3, 30)}},
	}}
	if !proto.Equal(got, want) {
		t.Fatalf("merged\n%v\nwant\n%v", got, want)
	}
}

func TestMergeStatisticsOfOneWorkerIsUnchanged(t *testing.T) {
	one := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{
		{Name: "m", Version: "3", LastInference: 9, InferenceCount: 2, ExecutionCount: 1,
			InferenceStats: &inferencepb.InferStatistics{Success: dur(2, 7), Fail: dur(0, 0)},
			BatchStats:     []*inferencepb.InferBatchStatistics{{BatchSize: 2, ComputeInfer: dur(1, 3)}}},
	}}
	out, err := mergeStatistics([][]byte{marshal(t, one)})
	if err != nil {
		t.Fatal(err)
	}
	got := &inferencepb.ModelStatisticsResponse{}
	if err := proto.Unmarshal(out, got); err != nil || !proto.Equal(got, one) {
		t.Fatalf("got %v (%v), want %v", got, err, one)
	}
}

func TestMergeRejectsAnAnswerThatDoesNotParse(t *testing.T) {
	if _, err := mergeStatistics([][]byte{{0xff}}); err == nil ||
		!strings.HasPrefix(err.Error(), "worker answer 0 to ModelStatistics does not parse: ") {
		t.Fatalf("got %v", err)
	}
	if _, err := mergeReady([][]byte{marshal(t, &inferencepb.ModelReadyResponse{Ready: true}), {0x0a}}); err == nil {
		t.Fatal("a truncated ModelReady answer was accepted")
	}
}

func TestModelReadyOnlyWhenEveryWorkerIs(t *testing.T) {
	yes := marshal(t, &inferencepb.ModelReadyResponse{Ready: true})
	no := marshal(t, &inferencepb.ModelReadyResponse{Ready: false})
	for _, c := range []struct {
		bodies [][]byte
		want   bool
	}{
		{[][]byte{yes, yes}, true}, {[][]byte{yes, no}, false}, {[][]byte{no, yes}, false},
		{[][]byte{yes}, true}, {nil, false},
	} {
		out, err := mergeReady(c.bodies)
		if err != nil {
			t.Fatal(err)
		}
		var got inferencepb.ModelReadyResponse
		if err := proto.Unmarshal(out, &got); err != nil || got.GetReady() != c.want {
			t.Fatalf("%d answers: ready %v, want %v", len(c.bodies), got.GetReady(), c.want)
		}
	}
}

func TestModelNameIsReadFromTheLeadingField(t *testing.T) {
	req := marshal(t, &inferencepb.ModelInferRequest{ModelName: "mlp", ModelVersion: "2", Id: "x",
		RawInputContents: [][]byte{make([]byte, 4096)}})
	// Split across buffers, as gRPC may hand it over.
	split := mem.BufferSlice{mem.SliceBuffer(req[:2]), mem.SliceBuffer(req[2:])}
	if name, ok := modelName(split); !ok || name != "mlp" {
		t.Fatalf("got %q %v", name, ok)
	}
	// A leading field other than model_name is skipped.
	lead := append([]byte{0x1a, 0x01, 'x'}, marshal(t, &inferencepb.ModelInferRequest{ModelName: "m2"})...)
	if name, ok := modelName(mem.BufferSlice{mem.SliceBuffer(lead)}); !ok || name != "m2" {
		t.Fatalf("got %q %v", name, ok)
	}
	for _, bad := range [][]byte{nil, {0x0a, 0x05, 'a'}, {0xff}, marshal(t, &inferencepb.ModelInferRequest{Id: "no name"})} {
		if name, ok := modelName(mem.BufferSlice{mem.SliceBuffer(bad)}); ok {
			t.Fatalf("%x: got %q", bad, name)
		}
	}
}

func TestRouterAsksOncePerModelUntilForgotten(t *testing.T) {
	r := newRouter()
	asked := 0
	// A model batches when its ModelConfig carries dynamic_batching (the worker's word), not
	// because it has batch sizes.
	config := func(batching bool) func() (*inferencepb.ModelConfigResponse, error) {
		return func() (*inferencepb.ModelConfigResponse, error) {
			asked++
			cfg := &inferencepb.ModelConfig{MaxBatchSize: 8}
			if batching {
				cfg.SchedulingChoice = &inferencepb.ModelConfig_DynamicBatching{DynamicBatching: &inferencepb.ModelDynamicBatching{
					PreferredBatchSize: []int32{8}, MaxQueueDelayMicroseconds: 1000}}
			}
			return &inferencepb.ModelConfigResponse{Config: cfg}, nil
		}
	}
	if !r.batches("b8", config(true)) || !r.batches("b8", config(false)) || asked != 1 {
		t.Fatalf("b8: asked %d", asked)
	}
	if r.batches("plain", config(false)) || r.batches("plain", config(true)) || asked != 2 {
		t.Fatalf("plain: asked %d", asked)
	}
	r.forget()
	if !r.batches("plain", config(true)) || asked != 3 {
		t.Fatalf("after forget: asked %d", asked)
	}
	failing := func() (*inferencepb.ModelConfigResponse, error) { asked++; return nil, noWorker() }
	if r.batches("unknown", failing) || r.batches("unknown", failing) || asked != 5 {
		t.Fatalf("a failed lookup must not be remembered: asked %d", asked)
	}
}
