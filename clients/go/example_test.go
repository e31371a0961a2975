package jaxport_test

import (
	"context"
	"fmt"
	"time"

	jaxport "github.com/jaxport/jaxport/clients/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A complete call. It needs a live server, so it has no Output block (it compiles under
// go vet/go test; examples/infer runs the same steps, and the conformance suite runs them
// against a real bridge).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := jaxport.Dial(ctx, "127.0.0.1:8001")
	if err != nil {
		panic(err)
	}
	defer client.Close()

	meta, err := client.Metadata(ctx, "cf_fp32")
	if err != nil {
		panic(err)
	}
	fmt.Println(meta.GetInputs())

	out, err := client.Infer(ctx, "cf_fp32",
		jaxport.Float32("data_in", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}))
	if status.Code(err) == codes.InvalidArgument {
		fmt.Println("bad request:", status.Convert(err).Message())
		return
	}
	if err != nil {
		panic(err)
	}
	y, _ := out.Get("data_out")
	values, _ := y.AsFloat32()
	fmt.Println(values)
}

// Requesting a subset of outputs, sending typed contents and a request id.
func ExampleClient_Do() {
	client, err := jaxport.Dial(context.Background(), "127.0.0.1:8001", jaxport.WithBearerToken("token"))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	out, err := client.Do(context.Background(), jaxport.Request{
		Model:   "cf_multi",
		ID:      "req-1",
		Typed:   true,
		Outputs: []string{"total"},
		Inputs: []jaxport.Tensor{
			jaxport.Float32("alpha", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
			jaxport.Int32("beta", []int64{3}, []int32{1, 0, -1}),
		},
	})
	if err != nil {
		fmt.Println(status.Code(err), status.Convert(err).Message())
		return
	}
	fmt.Println(out.ID, len(out.Tensors))
}
