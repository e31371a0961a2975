package workers

import (
	"context"
	"testing"
)

// BenchmarkExecuteMLP: one Execute round trip of the 4x16 MLP on one worker (frames, the
// worker's queue, XLA), sequentially and from parallel callers. Not part of the unit tests:
// `go test -run '^$' -bench . ./workers`. On the shared 2-core machine (load ~6): median
// ~260 us sequential, ~120-160 us with 16 callers; the worker's own execute (decode, jit
// call, encode) is ~90 us of it.
func BenchmarkExecuteMLP(b *testing.B) {
	if _, _, err := SetUpForExamples(); err != nil {
		b.Fatal(err)
	}
	p := New(WithPython(python), WithStderr(quiet()))
	defer p.Close()
	h, err := p.Load(context.Background(), Model{Key: "mlp/1", Location: artifacts["mlp"], Engine: "exported"})
	if err != nil {
		b.Fatal(err)
	}
	x := mlpInput(b)
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			if _, err := h.Execute(context.Background(), 0, x); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := h.Execute(context.Background(), 0, x); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
