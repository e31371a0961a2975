package main

// Statistics and metrics of the requests the front executes natively (native.go): the same
// accounting the workers do (bridge/statistics.py ModelStatistics, bridge/metrics.py), so
// ModelStatistics and /metrics read the same whichever engine served a request. ModelStatistics
// merges the front's answer with the workers' (stats.go); /metrics adds the front's samples to
// the workers' families with the label worker="front" (metrics.go).

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
)

// codeName is a status code as Python's grpc.StatusCode names it (INVALID_ARGUMENT, ...).
func codeName(c codes.Code) string { return code.Code(c).String() }

// timings: where one successful request's time went (bridge/statistics.py Timings).
type timings struct {
	queue, input, infer, output time.Duration
	inferences                  int // batch rows the request carried
	executions                  int // program executions it accounts for (batching: the batch's first request)
	batchRows                   int // rows of that execution (0 = inferences)
}

type duration struct{ count, ns uint64 }

func (d *duration) add(t time.Duration) { d.count++; d.ns += uint64(t) }

func (d duration) pb() *inferencepb.StatisticDuration {
	return &inferencepb.StatisticDuration{Count: d.count, Ns: d.ns}
}

type batchStats struct{ input, infer, output duration }

// histogramBuckets are bridge/metrics.py's _BUCKETS (seconds).
var histogramBuckets = []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0}

type histogram struct {
	counts []uint64 // per bucket (not cumulative)
	sum    float64
	n      uint64
}

func (h *histogram) observe(seconds float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(histogramBuckets))
	}
	i := sort.SearchFloat64s(histogramBuckets, seconds) // first bucket >= seconds
	if i < len(histogramBuckets) {
		h.counts[i]++
	}
	h.sum += seconds
	h.n++
}

// nativeStats: one model version's counters (statistics and metrics), under one mutex.
type nativeStats struct {
	mu                                           sync.Mutex
	inferences, executions                       uint64
	lastMs                                       uint64
	success, fail, queue, input, infer, output   duration
	batches                                      map[int]*batchStats
	requests, successes                          uint64
	failures                                     map[string]uint64 // by code name
	requestSeconds, queueSeconds, computeSeconds histogram
}

func newNativeStats() *nativeStats {
	return &nativeStats{batches: map[int]*batchStats{}, failures: map[string]uint64{}}
}

// record counts one finished request (t nil on failure), as InferenceCore._account does.
func (s *nativeStats) record(total time.Duration, c codes.Code, t *timings) {
	now := uint64(time.Now().UnixMilli())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastMs = now
	s.requests++
	s.requestSeconds.observe(total.Seconds())
	if c != codes.OK || t == nil {
		s.fail.add(total)
		s.failures[codeName(c)]++
		return
	}
	s.successes++
	s.inferences += uint64(t.inferences)
	s.executions += uint64(t.executions)
	s.success.add(total)
	s.queue.add(t.queue)
	s.input.add(t.input)
	s.infer.add(t.infer)
	s.output.add(t.output)
	if t.executions > 0 {
		rows := t.batchRows
		if rows == 0 {
			rows = t.inferences
		}
		b := s.batches[rows]
		if b == nil {
			b = &batchStats{}
			s.batches[rows] = b
		}
		b.input.add(t.input)
		b.infer.add(t.infer)
		b.output.add(t.output)
	}
	s.queueSeconds.observe(t.queue.Seconds())
	s.computeSeconds.observe((t.input + t.infer + t.output).Seconds())
}

// statistics is the version's entry of a ModelStatisticsResponse.
func (s *nativeStats) statistics(name, version string) *inferencepb.ModelStatistics {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &inferencepb.ModelStatistics{
		Name: name, Version: version, LastInference: s.lastMs,
		InferenceCount: s.inferences, ExecutionCount: s.executions,
		InferenceStats: &inferencepb.InferStatistics{
			Success: s.success.pb(), Fail: s.fail.pb(), Queue: s.queue.pb(),
			ComputeInput: s.input.pb(), ComputeInfer: s.infer.pb(), ComputeOutput: s.output.pb(),
		},
	}
	sizes := make([]int, 0, len(s.batches))
	for size := range s.batches {
		sizes = append(sizes, size)
	}
	sort.Ints(sizes)
	for _, size := range sizes {
		b := s.batches[size]
		out.BatchStats = append(out.BatchStats, &inferencepb.InferBatchStatistics{
			BatchSize: uint64(size), ComputeInput: b.input.pb(), ComputeInfer: b.infer.pb(), ComputeOutput: b.output.pb()})
	}
	return out
}

// metricFamilies are the bridge's per-model families the front reports for native models
// (bridge/metrics.py: names, help, type), in the workers' order.
var metricFamilies = []struct{ name, help, kind string }{
	{"jaxport_inference_requests_total", "Inference requests received", "counter"},
	{"jaxport_inference_success_total", "Successful inference requests", "counter"},
	{"jaxport_inference_failure_total", "Failed inference requests", "counter"},
	{"jaxport_inference_request_duration_seconds", "Request time in the server", "histogram"},
	{"jaxport_inference_queue_duration_seconds", "Time waiting for an execution slot", "histogram"},
	{"jaxport_inference_compute_duration_seconds", "Transfer in + execution + transfer out", "histogram"},
}

// metricsText writes the Prometheus text of every native model's families (mergeMetrics adds
// the worker="front" label): models is name/version -> stats.
func metricsText(models map[[2]string]*nativeStats, admission map[[2]string]uint64, rpcs map[[2]string]uint64) string {
	keys := make([][2]string, 0, len(models))
	for k := range models {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"/"+keys[i][1] < keys[j][0]+"/"+keys[j][1] })
	var b strings.Builder
	head := func(i int) {
		f := metricFamilies[i]
		family := strings.TrimSuffix(f.name, "_total") // prometheus_client names a counter's family without it
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", family, f.help, family, f.kind)
	}
	snap := make([]nativeStats, len(keys))
	for i, k := range keys {
		s := models[k]
		s.mu.Lock()
		snap[i] = nativeStats{requests: s.requests, successes: s.successes, failures: map[string]uint64{},
			requestSeconds: s.requestSeconds, queueSeconds: s.queueSeconds, computeSeconds: s.computeSeconds}
		for c, n := range s.failures {
			snap[i].failures[c] = n
		}
		snap[i].requestSeconds.counts = append([]uint64(nil), s.requestSeconds.counts...)
		snap[i].queueSeconds.counts = append([]uint64(nil), s.queueSeconds.counts...)
		snap[i].computeSeconds.counts = append([]uint64(nil), s.computeSeconds.counts...)
		s.mu.Unlock()
	}
	mv := func(k [2]string) string { return fmt.Sprintf("model=%q,version=%q", k[0], k[1]) }
	head(0)
	for i, k := range keys {
		fmt.Fprintf(&b, "jaxport_inference_requests_total{%s} %d\n", mv(k), snap[i].requests)
	}
	head(1)
	for i, k := range keys {
		fmt.Fprintf(&b, "jaxport_inference_success_total{%s} %d\n", mv(k), snap[i].successes)
	}
	head(2)
	for i, k := range keys {
		codes := make([]string, 0, len(snap[i].failures))
		for c := range snap[i].failures {
			codes = append(codes, c)
		}
		sort.Strings(codes)
		for _, c := range codes {
			fmt.Fprintf(&b, "jaxport_inference_failure_total{%s,code=%q} %d\n", mv(k), c, snap[i].failures[c])
		}
	}
	for f, pick := range []func(*nativeStats) *histogram{
		func(s *nativeStats) *histogram { return &s.requestSeconds },
		func(s *nativeStats) *histogram { return &s.queueSeconds },
		func(s *nativeStats) *histogram { return &s.computeSeconds },
	} {
		head(3 + f)
		name := metricFamilies[3+f].name
		for i, k := range keys {
			h := pick(&snap[i])
			var cum uint64
			for j, le := range histogramBuckets {
				if h.counts != nil {
					cum += h.counts[j]
				}
				fmt.Fprintf(&b, "%s_bucket{%s,le=%q} %d\n", name, mv(k), formatLe(le), cum)
			}
			fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, mv(k), h.n)
			fmt.Fprintf(&b, "%s_count{%s} %d\n", name, mv(k), h.n)
			fmt.Fprintf(&b, "%s_sum{%s} %g\n", name, mv(k), h.sum)
		}
	}
	b.WriteString("# HELP jaxport_admission Admission control outcomes\n# TYPE jaxport_admission counter\n")
	for _, k := range sortedPairs(admission) {
		fmt.Fprintf(&b, "jaxport_admission_total{model=%q,outcome=%q} %d\n", k[0], k[1], admission[k])
	}
	b.WriteString("# HELP jaxport_grpc_requests RPCs by method and final status\n# TYPE jaxport_grpc_requests counter\n")
	for _, k := range sortedPairs(rpcs) {
		fmt.Fprintf(&b, "jaxport_grpc_requests_total{method=%q,code=%q} %d\n", k[0], k[1], rpcs[k])
	}
	return b.String()
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
