// Package telemetry is what the front tells about its work: each model version's statistics
// (ModelStatistics, Triton's counters), the Prometheus families on /metrics (jaxport_* and
// Triton's nv_inference_*), and OpenTelemetry traces (tracing.go). Metrics and traces are
// written here, from counters the request path updates once per request.
package telemetry

import (
	"sort"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

// Timings says where one successful request's time went (Triton's split).
type Timings struct {
	Queue, Input, Infer, Output time.Duration
	Inferences                  int // batch rows the request carried
	Executions                  int // program executions it accounts for (batching: the batch's first request)
	BatchRows                   int // rows of that execution (0 = Inferences)
}

type duration struct{ count, ns uint64 }

func (d *duration) add(t time.Duration) { d.count++; d.ns += uint64(t) }

func (d duration) pb() *inferencepb.StatisticDuration {
	return &inferencepb.StatisticDuration{Count: d.count, Ns: d.ns}
}

type batchStats struct{ input, infer, output duration }

// histogramBuckets (seconds): from 100 us to 30 s, a tiny MLP to a large-tensor request.
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

func (h histogram) clone() histogram {
	h.counts = append([]uint64(nil), h.counts...)
	return h
}

// ModelStats are one model version's counters (statistics and metrics), under one mutex.
type ModelStats struct {
	mu                                           sync.Mutex
	inferences, executions                       uint64
	lastMs                                       uint64
	success, fail, queue, input, infer, output   duration
	batches                                      map[int]*batchStats
	requests, successes                          uint64
	failures                                     map[string]uint64 // by code name
	requestSeconds, queueSeconds, computeSeconds histogram
	pending                                      pendingCount // ModelInfer calls in flight (lock-free)
}

// NewModelStats: all zero.
func NewModelStats() *ModelStats {
	return &ModelStats{batches: map[int]*batchStats{}, failures: map[string]uint64{}}
}

// Record counts one finished inference request (t nil on failure): Triton's statistics
// (inference vs execution counts, durations, per-batch-size compute) and the metrics.
func (s *ModelStats) Record(total time.Duration, c codes.Code, t *Timings) {
	now := uint64(time.Now().UnixMilli())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastMs = now
	s.requests++
	s.requestSeconds.observe(total.Seconds())
	if c != codes.OK || t == nil {
		s.fail.add(total)
		s.failures[status.CodeName(c)]++
		return
	}
	s.successes++
	s.inferences += uint64(t.Inferences)
	s.executions += uint64(t.Executions)
	s.success.add(total)
	s.queue.add(t.Queue)
	s.input.add(t.Input)
	s.infer.add(t.Infer)
	s.output.add(t.Output)
	if t.Executions > 0 {
		rows := t.BatchRows
		if rows == 0 {
			rows = t.Inferences
		}
		b := s.batches[rows]
		if b == nil {
			b = &batchStats{}
			s.batches[rows] = b
		}
		b.input.add(t.Input)
		b.infer.add(t.Infer)
		b.output.add(t.Output)
	}
	s.queueSeconds.observe(t.Queue.Seconds())
	s.computeSeconds.observe((t.Input + t.Infer + t.Output).Seconds())
}

// Statistics is the version's entry of a ModelStatisticsResponse.
func (s *ModelStats) Statistics(name, version string) *inferencepb.ModelStatistics {
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

// snapshot copies what the metrics read.
type statsSnapshot struct {
	requests, successes                          uint64
	failures                                     map[string]uint64
	requestSeconds, queueSeconds, computeSeconds histogram
}

func (s *ModelStats) snapshot() statsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := statsSnapshot{requests: s.requests, successes: s.successes, failures: map[string]uint64{},
		requestSeconds: s.requestSeconds.clone(), queueSeconds: s.queueSeconds.clone(), computeSeconds: s.computeSeconds.clone()}
	for c, n := range s.failures {
		out.failures[c] = n
	}
	return out
}
