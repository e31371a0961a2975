package batch_test

import (
	"context"
	"fmt"

	"github.com/jaxport/jaxport/bridge/front/batch"
)

// A model exported with batch sizes 1 and 4, one input and one output of one byte a row
// (y = 10*x). A request of 3 rows runs on the 4-row program, padded with a copy of its last
// row; only its own 3 rows come back.
func Example() {
	exec := func(batchSize int, inputs [][]byte) ([][]byte, error) {
		fmt.Printf("execute at batch size %d: x = %v\n", batchSize, inputs[0])
		y := make([]byte, batchSize)
		for i, x := range inputs[0] {
			y[i] = 10 * x
		}
		return [][]byte{y}, nil
	}
	b, err := batch.New(batch.Config{
		BatchSizes: []int{1, 4}, MaxQueue: 8, Name: "tenfold/1",
		InputNames: []string{"x"}, InputRowBytes: []int{1},
		OutputNames: []string{"y"}, OutputRowBytes: []int{1},
	}, exec)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	out, timing, err := b.Submit(context.Background(), 3, [][]byte{{1, 2, 3}})
	fmt.Println(out[0], timing.BatchSize, timing.Rows, timing.First, err)
	_, _, err = b.Submit(context.Background(), 5, [][]byte{make([]byte, 5)})
	fmt.Println(err)
	// Output:
	// execute at batch size 4: x = [1 2 3 3]
	// [10 20 30] 4 3 true <nil>
	// rpc error: code = InvalidArgument desc = model 'tenfold/1': request batch size 5 exceeds the model's max_batch_size 4 (exported batch sizes [1, 4]); split the request
}
