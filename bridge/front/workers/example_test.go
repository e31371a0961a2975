package workers_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/jaxport/jaxport/bridge/front/workers"
	"github.com/jaxport/jaxport/clients/go/conformance"
)

// A pool loads an artifact version on its (lazily started) Python workers and executes
// validated inputs on one of its programs; the results are every non-token @main result.
func Example() {
	python, artifacts, err := workers.SetUpForExamples()
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	pool := workers.New(workers.WithPython(python), workers.WithStderr(io.Discard))
	defer pool.Close()

	h, err := pool.Load(ctx, workers.Model{Key: "mlp/1", Location: artifacts["mlp"], Engine: "exported"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	fmt.Printf("%+v\n", h.Programs())

	x, _ := conformance.ReadNpy(filepath.Join(artifacts["mlp"], "goldens", "case0", "inputs", "x.npy"))
	out, err := h.Execute(ctx, h.Programs()[0].Index, []workers.Tensor{{Datatype: "FP32", Shape: x.Shape, Data: x.Data}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0].Datatype, out[0].Shape, len(out[0].Data), "bytes")

	_, err = pool.Load(ctx, workers.Model{Key: "gone/1", Location: filepath.Join(os.TempDir(), "no-such-artifact"), Engine: "exported"})
	fmt.Println(err != nil)
	// Output:
	// [{Index:0 BatchSize:0 Dims:map[] Polymorphic:false}]
	// FP32 [4 10] 160 bytes
	// true
}
