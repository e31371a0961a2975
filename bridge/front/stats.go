package main

// Answers the front assembles from every worker (issue 12): each worker keeps its own
// per-model statistics and its own view of which models are ready, so a question about the
// server as a whole is asked of every connected worker and the answers are merged here.
//
//   - ModelStatistics: per (model, version): inference/execution counts and every duration
//     (count and ns) summed, last_inference the latest, batch_stats merged by batch size,
//     memory_usage summed by (type, id); models in the order the workers list them.
//   - ModelReady: ready only when every connected worker says so.
//
// The first worker error (e.g. NOT_FOUND for an unknown model, which every worker gives) is
// the answer, as for the broadcast RPCs.

import (
	"cmp"
	"fmt"
	"slices"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/proto"
)

// gathered lists the RPCs answered by asking every connected worker and merging the answers.
var gathered = map[string]func(bodies [][]byte) ([]byte, error){
	"ModelStatistics": mergeStatistics,
	"ModelReady":      mergeReady,
}

// mergeReady: a model is ready only when every worker serving it says so.
func mergeReady(bodies [][]byte) ([]byte, error) {
	ready := len(bodies) > 0
	for i, b := range bodies {
		var r inferencepb.ModelReadyResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("worker answer %d to ModelReady does not parse: %v", i, err)
		}
		ready = ready && r.GetReady()
	}
	return proto.Marshal(&inferencepb.ModelReadyResponse{Ready: ready})
}

func addDuration(dst **inferencepb.StatisticDuration, src *inferencepb.StatisticDuration) {
	if src == nil {
		return
	}
	if *dst == nil {
		*dst = &inferencepb.StatisticDuration{}
	}
	(*dst).Count += src.GetCount()
	(*dst).Ns += src.GetNs()
}

func addInferStats(dst *inferencepb.InferStatistics, src *inferencepb.InferStatistics) {
	if src == nil {
		return
	}
	addDuration(&dst.Success, src.Success)
	addDuration(&dst.Fail, src.Fail)
	addDuration(&dst.Queue, src.Queue)
	addDuration(&dst.ComputeInput, src.ComputeInput)
	addDuration(&dst.ComputeInfer, src.ComputeInfer)
	addDuration(&dst.ComputeOutput, src.ComputeOutput)
	addDuration(&dst.CacheHit, src.CacheHit)
	addDuration(&dst.CacheMiss, src.CacheMiss)
}

type modelKey struct{ name, version string }

type memoryKey struct {
	kind string
	id   int64
}

// mergeStatistics sums every worker's ModelStatisticsResponse per (model, version).
func mergeStatistics(bodies [][]byte) ([]byte, error) {
	out := &inferencepb.ModelStatisticsResponse{}
	models := map[modelKey]*inferencepb.ModelStatistics{}
	batches := map[modelKey]map[uint64]*inferencepb.InferBatchStatistics{}
	memory := map[modelKey]map[memoryKey]*inferencepb.MemoryUsage{}
	for i, b := range bodies {
		var r inferencepb.ModelStatisticsResponse
		if err := proto.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("worker answer %d to ModelStatistics does not parse: %v", i, err)
		}
		for _, s := range r.GetModelStats() {
			key := modelKey{s.GetName(), s.GetVersion()}
			m, ok := models[key]
			if !ok {
				m = &inferencepb.ModelStatistics{Name: key.name, Version: key.version,
					InferenceStats: &inferencepb.InferStatistics{}}
				models[key] = m
				batches[key] = map[uint64]*inferencepb.InferBatchStatistics{}
				memory[key] = map[memoryKey]*inferencepb.MemoryUsage{}
				out.ModelStats = append(out.ModelStats, m)
			}
			m.LastInference = max(m.LastInference, s.GetLastInference())
			m.InferenceCount += s.GetInferenceCount()
			m.ExecutionCount += s.GetExecutionCount()
			addInferStats(m.InferenceStats, s.GetInferenceStats())
			for _, bs := range s.GetBatchStats() {
				acc, ok := batches[key][bs.GetBatchSize()]
				if !ok {
					acc = &inferencepb.InferBatchStatistics{BatchSize: bs.GetBatchSize()}
					batches[key][bs.GetBatchSize()] = acc
					m.BatchStats = append(m.BatchStats, acc)
				}
				addDuration(&acc.ComputeInput, bs.ComputeInput)
				addDuration(&acc.ComputeInfer, bs.ComputeInfer)
				addDuration(&acc.ComputeOutput, bs.ComputeOutput)
			}
			for _, mu := range s.GetMemoryUsage() {
				mk := memoryKey{mu.GetType(), mu.GetId()}
				acc, ok := memory[key][mk]
				if !ok {
					acc = &inferencepb.MemoryUsage{Type: mk.kind, Id: mk.id}
					memory[key][mk] = acc
					m.MemoryUsage = append(m.MemoryUsage, acc)
				}
				acc.ByteSize += mu.GetByteSize()
			}
		}
	}
	// Batch sizes in increasing order, as one worker lists them.
	for _, m := range out.ModelStats {
		slices.SortFunc(m.BatchStats, func(a, b *inferencepb.InferBatchStatistics) int {
			return cmp.Compare(a.GetBatchSize(), b.GetBatchSize())
		})
	}
	return proto.Marshal(out)
}
