package main

// Triton's per-model metric families on /metrics (issue 27, docs/bridge.md "Metrics"): the
// `nv_inference_*` names Triton's dashboards, alerts and autoscalers read, written by the front
// from the ModelStatistics answer it gives clients (every worker's answer merged with the
// native engine's, stats.go + native.go statisticsBody). So each value equals the matching
// ModelStatistics field at the time of the scrape by construction, summed over the workers
// and the front (no `worker` label); durations are the statistics' nanoseconds / 1000, as
// Triton's microsecond counters. nv_inference_pending_request_count is the front's own count
// of ModelInfer calls (gRPC and REST) in flight per model version (pendingRequests).

import (
	"context"
	"fmt"
	"strings"
	"sync"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// tritonFamilies: Triton's name, help and type of each family, and its value from one model
// version's merged statistics (nil value: the pending gauge, from pendingRequests).
var tritonFamilies = []struct {
	name, help, kind string
	value            func(*inferencepb.ModelStatistics) uint64
}{
	{"nv_inference_request_success", "Number of successful inference requests, all batch sizes", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetInferenceStats().GetSuccess().GetCount() }},
	{"nv_inference_request_failure", "Number of failed inference requests, all batch sizes", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetInferenceStats().GetFail().GetCount() }},
	{"nv_inference_count", "Number of inferences performed (a batch of n counts n)", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetInferenceCount() }},
	{"nv_inference_exec_count", "Number of model executions performed", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetExecutionCount() }},
	{"nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (successful requests)", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetInferenceStats().GetSuccess().GetNs() / 1000 }},
	{"nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds", "counter",
		func(s *inferencepb.ModelStatistics) uint64 { return s.GetInferenceStats().GetQueue().GetNs() / 1000 }},
	{"nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds", "counter",
		func(s *inferencepb.ModelStatistics) uint64 {
			return s.GetInferenceStats().GetComputeInput().GetNs() / 1000
		}},
	{"nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds", "counter",
		func(s *inferencepb.ModelStatistics) uint64 {
			return s.GetInferenceStats().GetComputeInfer().GetNs() / 1000
		}},
	{"nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds", "counter",
		func(s *inferencepb.ModelStatistics) uint64 {
			return s.GetInferenceStats().GetComputeOutput().GetNs() / 1000
		}},
	{"nv_inference_pending_request_count", "Instantaneous number of pending requests (ModelInfer calls in flight in the front) per model", "gauge", nil},
}

// pendingRequests counts the ModelInfer calls in flight per (model, version as requested).
type pendingRequests struct {
	mu sync.Mutex
	n  map[modelKey]int64
}

// inferPending is the front's one count (f.unary enters every ModelInfer, gRPC and REST).
var inferPending = &pendingRequests{n: map[modelKey]int64{}}

// enter counts one ModelInfer request until the returned func is called. A request whose
// model name cannot be read is not counted (the workers or the engine refuse it).
func (p *pendingRequests) enter(payload mem.BufferSlice) func() {
	name, version, ok := inferTarget(payload)
	if !ok {
		return func() {}
	}
	key := modelKey{name, version}
	p.mu.Lock()
	p.n[key]++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		if p.n[key]--; p.n[key] == 0 {
			delete(p.n, key)
		}
		p.mu.Unlock()
	}
}

// snapshot: the counts now.
func (p *pendingRequests) snapshot() map[modelKey]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[modelKey]int64, len(p.n))
	for k, v := range p.n {
		out[k] = v
	}
	return out
}

// inferTarget reads model_name (field 1) and model_version (field 2) from the head of a
// serialized ModelInferRequest without decoding its tensors.
func inferTarget(payload mem.BufferSlice) (name, version string, ok bool) {
	var head []byte
	for _, b := range payload {
		d := b.ReadOnlyData()
		head = append(head, d[:min(len(d), modelNamePrefix-len(head))]...)
		if len(head) >= modelNamePrefix {
			break
		}
	}
	for len(head) > 0 {
		num, typ, n := protowire.ConsumeTag(head)
		if n < 0 {
			break
		}
		head = head[n:]
		m := protowire.ConsumeFieldValue(num, typ, head)
		if m < 0 {
			break
		}
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(head)
			if num == 1 {
				name, ok = string(v), true
			} else {
				version = string(v)
			}
		}
		head = head[m:]
	}
	return name, version, ok
}

// modelStatistics is the front's ModelStatistics answer for every model (what a client asking
// with an empty request gets).
func (f *front) modelStatistics(ctx context.Context) (*inferencepb.ModelStatisticsResponse, error) {
	res, err := f.unary(ctx, modelStatisticsMethod, mem.BufferSlice{}, forwardGather, mergeStatistics)
	if err != nil {
		return nil, err
	}
	out := &inferencepb.ModelStatisticsResponse{}
	if err := proto.Unmarshal(res.(*rawMsg).out.Materialize(), out); err != nil {
		return nil, fmt.Errorf("merged ModelStatistics does not parse: %v", err)
	}
	return out, nil
}

// tritonMetrics writes the nv_inference_* families for every model version of `stats`;
// `pending` is keyed by the version a request named ("" counts for the model's highest
// version listed, what "" resolves to).
func tritonMetrics(stats *inferencepb.ModelStatisticsResponse, pending map[modelKey]int64) string {
	latest := map[string]string{}
	for _, s := range stats.GetModelStats() {
		if v, ok := latest[s.GetName()]; !ok || versionAbove(s.GetVersion(), v) {
			latest[s.GetName()] = s.GetVersion()
		}
	}
	var b strings.Builder
	for _, fam := range tritonFamilies {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", fam.name, fam.help, fam.name, fam.kind)
		for _, s := range stats.GetModelStats() {
			var v uint64
			if fam.value != nil {
				v = fam.value(s)
			} else {
				n := pending[modelKey{s.GetName(), s.GetVersion()}]
				if latest[s.GetName()] == s.GetVersion() {
					n += pending[modelKey{s.GetName(), ""}]
				}
				v = uint64(max(n, 0))
			}
			fmt.Fprintf(&b, "%s{model=%q,version=%q} %d\n", fam.name, s.GetName(), s.GetVersion(), v)
		}
	}
	return b.String()
}
