package main

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/jaxport/jaxport/bridge/front/engine"
)

// parallelRounds is how many times each goroutine runs every case in parallelRun.
const parallelRounds = 20

// parallelRun executes every golden case a compiled program runs from n goroutines at once,
// parallelRounds times each, and counts results that differ (byte for byte) from a sequential
// run: the front will call Execute from many goroutines.
func parallelRun(dir string, model *engine.Model, n int) (map[string]any, error) {
	runs, err := nativeRuns(dir, model)
	if err != nil {
		return nil, err
	}
	want := make([][][]byte, len(runs))
	for i, r := range runs {
		if want[i], err = r.prog.Execute(r.inputs); err != nil {
			return nil, err
		}
	}
	var executes, mismatches, failures atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range parallelRounds {
				for k, r := range runs {
					got, err := r.prog.Execute(r.inputs)
					executes.Add(1)
					if err != nil {
						failures.Add(1)
						continue
					}
					for i := range got {
						if !bytes.Equal(got[i], want[k][i]) {
							mismatches.Add(1)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	return map[string]any{"model": model.Name, "parallel": n, "executes": executes.Load(),
		"mismatches": mismatches.Load(), "failures": failures.Load()}, nil
}
