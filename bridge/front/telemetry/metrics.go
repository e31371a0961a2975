package telemetry

// /metrics: the Prometheus text of every family, written by the front from its own counters
// (no process but the front serves requests, so nothing is merged):
//
//	jaxport_inference_requests_total{model,version}      inference requests of a resolved model
//	jaxport_inference_success_total{model,version}       ... that succeeded
//	jaxport_inference_failure_total{model,version,code}  ... that failed, by status name
//	jaxport_inference_{request,queue,compute}_duration_seconds{model,version}  histograms
//	jaxport_admission_total{model,outcome}               admitted / shed / expired / cancelled
//	jaxport_grpc_requests_total{method,code}             every RPC by final status (REST too,
//	                                                     under the RPC it maps to)
//	jaxport_model_ready{model,version}                   1 while the version serves
//	jaxport_model_load_seconds{model,version,phase}      the last load, by phase
//	jaxport_batch_{requests,immediate,padded_rows}_total{model,version}, and
//	jaxport_batch_executions_total{model,version,batch_size}: a batching model's batcher
//	nv_inference_*{model,version}                        Triton's names, from ModelStatistics
//
// plus whatever the backends add (the workers' process gauges).

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

// Model is what /metrics reports of one model version of the repository.
type Model struct {
	Name, Version string
	Ready         bool
	Stats         *ModelStats        // nil: never served (failed, unloaded before serving)
	LoadSeconds   map[string]float64 // the last load's phases
	Batch         *BatchCounters     // nil: it does not batch
}

// BatchCounters are a dynamic batcher's totals.
type BatchCounters struct {
	Requests   uint64      // requests it queued
	Immediate  uint64      // ... that found it idle and its queue empty: run at once
	PaddedRows uint64      // padding rows executed
	Executions map[int]int // executions by exported batch size
}

// Metrics holds the counters that are not a model's: RPCs by method and status.
type Metrics struct {
	mu   sync.Mutex
	rpcs map[[2]string]uint64
}

// NewMetrics: all zero.
func NewMetrics() *Metrics { return &Metrics{rpcs: map[[2]string]uint64{}} }

// CountRPC counts one finished RPC (jaxport_grpc_requests_total).
func (m *Metrics) CountRPC(method string, c codes.Code) {
	m.mu.Lock()
	m.rpcs[[2]string{method, status.CodeName(c)}]++
	m.mu.Unlock()
}

// Enter counts one ModelInfer call of the version in flight (nv_inference_pending_request_count)
// until the returned func is called.
func (s *ModelStats) Enter() func() {
	s.pending.Add(1)
	return func() { s.pending.Add(-1) }
}

type pendingCount struct{ atomic.Int64 }

var families = []struct{ name, help, kind string }{
	{"jaxport_inference_requests_total", "Inference requests received", "counter"},
	{"jaxport_inference_success_total", "Successful inference requests", "counter"},
	{"jaxport_inference_failure_total", "Failed inference requests", "counter"},
	{"jaxport_inference_request_duration_seconds", "Request time in the server", "histogram"},
	{"jaxport_inference_queue_duration_seconds", "Time waiting for an execution slot", "histogram"},
	{"jaxport_inference_compute_duration_seconds", "Transfer in + execution + transfer out", "histogram"},
}

// tritonFamilies: Triton's name, help and type of each family, and its value from one model
// version's statistics (nil: the pending gauge).
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

// Write writes every family: models (each version of the repository), the admission
// outcomes by (model name, outcome), then extra (a backend's own families, text format).
func (m *Metrics) Write(w io.Writer, models []Model, admission map[[2]string]uint64, extra string) {
	sort.Slice(models, func(i, j int) bool {
		return models[i].Name+"\x00"+models[i].Version < models[j].Name+"\x00"+models[j].Version
	})
	var b strings.Builder
	head := func(name, help, kind string) {
		family := strings.TrimSuffix(name, "_total") // prometheus_client names a counter's family without it
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", family, help, family, kind)
	}
	served := make([]Model, 0, len(models))
	snaps := make([]statsSnapshot, 0, len(models))
	for _, mod := range models {
		if mod.Stats != nil {
			served = append(served, mod)
			snaps = append(snaps, mod.Stats.snapshot())
		}
	}
	mv := func(mod Model) string { return fmt.Sprintf("model=%q,version=%q", mod.Name, mod.Version) }
	head(families[0].name, families[0].help, families[0].kind)
	for i, mod := range served {
		fmt.Fprintf(&b, "jaxport_inference_requests_total{%s} %d\n", mv(mod), snaps[i].requests)
	}
	head(families[1].name, families[1].help, families[1].kind)
	for i, mod := range served {
		fmt.Fprintf(&b, "jaxport_inference_success_total{%s} %d\n", mv(mod), snaps[i].successes)
	}
	head(families[2].name, families[2].help, families[2].kind)
	for i, mod := range served {
		codes := make([]string, 0, len(snaps[i].failures))
		for c := range snaps[i].failures {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			fmt.Fprintf(&b, "jaxport_inference_failure_total{%s,code=%q} %d\n", mv(mod), c, snaps[i].failures[c])
		}
	}
	for f, pick := range []func(*statsSnapshot) *histogram{
		func(s *statsSnapshot) *histogram { return &s.requestSeconds },
		func(s *statsSnapshot) *histogram { return &s.queueSeconds },
		func(s *statsSnapshot) *histogram { return &s.computeSeconds },
	} {
		fam := families[3+f]
		head(fam.name, fam.help, fam.kind)
		for i, mod := range served {
			h := pick(&snaps[i])
			var cum uint64
			for j, le := range histogramBuckets {
				if h.counts != nil {
					cum += h.counts[j]
				}
				fmt.Fprintf(&b, "%s_bucket{%s,le=%q} %d\n", fam.name, mv(mod), formatLe(le), cum)
			}
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", fam.name, mv(mod), h.n)
			fmt.Fprintf(&b, "%s_count{%s} %d\n", fam.name, mv(mod), h.n)
			fmt.Fprintf(&b, "%s_sum{%s} %g\n", fam.name, mv(mod), h.sum)
		}
	}
	head("jaxport_admission_total", "Admission control outcomes", "counter")
	for _, k := range sortedPairs(admission) {
		fmt.Fprintf(&b, "jaxport_admission_total{model=%q,outcome=%q} %d\n", k[0], k[1], admission[k])
	}
	m.mu.Lock()
	rpcs := make(map[[2]string]uint64, len(m.rpcs))
	for k, v := range m.rpcs {
		rpcs[k] = v
	}
	m.mu.Unlock()
	head("jaxport_grpc_requests_total", "RPCs by method and final status", "counter")
	for _, k := range sortedPairs(rpcs) {
		fmt.Fprintf(&b, "jaxport_grpc_requests_total{method=%q,code=%q} %d\n", k[0], k[1], rpcs[k])
	}
	head("jaxport_model_ready", "1 when the model version serves", "gauge")
	for _, mod := range models {
		ready := 0
		if mod.Ready {
			ready = 1
		}
		fmt.Fprintf(&b, "jaxport_model_ready{%s} %d\n", mv(mod), ready)
	}
	head("jaxport_model_load_seconds", "Last load time by phase", "gauge")
	for _, mod := range models {
		phases := make([]string, 0, len(mod.LoadSeconds))
		for p := range mod.LoadSeconds {
			phases = append(phases, p)
		}
		sort.Strings(phases)
		for _, p := range phases {
			fmt.Fprintf(&b, "jaxport_model_load_seconds{%s,phase=%q} %g\n", mv(mod), p, mod.LoadSeconds[p])
		}
	}
	head("jaxport_batch_requests_total", "Requests a model's dynamic batcher queued", "counter")
	for _, mod := range models {
		if mod.Batch != nil {
			fmt.Fprintf(&b, "jaxport_batch_requests_total{%s} %d\n", mv(mod), mod.Batch.Requests)
		}
	}
	head("jaxport_batch_immediate_total", "Batched requests run at once: the batcher was idle and its queue empty", "counter")
	for _, mod := range models {
		if mod.Batch != nil {
			fmt.Fprintf(&b, "jaxport_batch_immediate_total{%s} %d\n", mv(mod), mod.Batch.Immediate)
		}
	}
	head("jaxport_batch_padded_rows_total", "Padding rows executed by a model's batcher", "counter")
	for _, mod := range models {
		if mod.Batch != nil {
			fmt.Fprintf(&b, "jaxport_batch_padded_rows_total{%s} %d\n", mv(mod), mod.Batch.PaddedRows)
		}
	}
	head("jaxport_batch_executions_total", "Batch executions by exported batch size", "counter")
	for _, mod := range models {
		if mod.Batch == nil {
			continue
		}
		sizes := make([]int, 0, len(mod.Batch.Executions))
		for size := range mod.Batch.Executions {
			sizes = append(sizes, size)
		}
		sort.Ints(sizes)
		for _, size := range sizes {
			fmt.Fprintf(&b, "jaxport_batch_executions_total{%s,batch_size=\"%d\"} %d\n", mv(mod), size, mod.Batch.Executions[size])
		}
	}
	for _, fam := range tritonFamilies {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", fam.name, fam.help, fam.name, fam.kind)
		for _, mod := range served {
			var v uint64
			if fam.value != nil {
				v = fam.value(mod.Stats.Statistics(mod.Name, mod.Version))
			} else {
				v = uint64(max(mod.Stats.pending.Load(), 0))
			}
			fmt.Fprintf(&b, "%s{model=%q,version=%q} %d\n", fam.name, mod.Name, mod.Version, v)
		}
	}
	b.WriteString(extra)
	_, _ = io.WriteString(w, b.String())
}

// formatLe spells a bucket bound as prometheus_client does (0.0001, 0.001, 1.0, 30.0).
func formatLe(v float64) string {
	s := fmt.Sprintf("%g", v)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	if strings.Contains(s, "e") { // 1e-04 -> 0.0001
		s = strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.10f", v), "0"), ".")
	}
	return s
}

func sortedPairs(m map[[2]string]uint64) [][2]string {
	keys := make([][2]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"\x00"+keys[i][1] < keys[j][0]+"\x00"+keys[j][1] })
	return keys
}
