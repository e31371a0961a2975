// Command infer is a complete call of a jaxport bridge (or any Open Inference Protocol server):
// connect, read server and model metadata, run one inference, read its outputs.
//
//	go run ./examples/infer --url 127.0.0.1:8001 --model cf_fp32
//
// It builds one input per model input from the metadata (FP32 ramps; other datatypes zeros).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc/status"
)

func main() {
	url := flag.String("url", "127.0.0.1:8001", "server host:port")
	model := flag.String("model", "cf_fp32", "model name")
	flag.Parse()
	if err := run(*url, *model); err != nil {
		// The gRPC status code and message are the server's, unchanged.
		fmt.Fprintf(os.Stderr, "infer: %v: %s\n", status.Code(err), status.Convert(err).Message())
		os.Exit(1)
	}
}

func run(url, model string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := jaxport.NewClient(url)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.WaitReady(ctx); err != nil { // fail here, not at the first call
		return err
	}

	server, err := client.ServerMetadata(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("server %s %s\n", server.GetName(), server.GetVersion())
	meta, err := client.Metadata(ctx, model)
	if err != nil {
		return err
	}
	var inputs []jaxport.Tensor
	for _, in := range meta.GetInputs() {
		fmt.Printf("input  %s %s%v\n", in.GetName(), in.GetDatatype(), in.GetShape())
		n := int64(1)
		for _, d := range in.GetShape() {
			n *= d
		}
		dt := jaxport.Datatype(in.GetDatatype())
		size, err := jaxport.ItemSize(dt)
		if err != nil {
			return err
		}
		if dt == jaxport.FP32 {
			data := make([]float32, n)
			for i := range data {
				data[i] = float32(i) / 2
			}
			t, err := jaxport.Float32(in.GetName(), in.GetShape(), data)
			if err != nil {
				return err
			}
			inputs = append(inputs, t)
		} else {
			inputs = append(inputs, jaxport.RawTensor(in.GetName(), dt, in.GetShape(), make([]byte, n*int64(size))))
		}
	}
	out, err := client.Infer(ctx, model, inputs...)
	if err != nil {
		return err
	}
	for _, t := range out.Tensors {
		values, err := t.AsFloat64Any()
		if err != nil {
			return err
		}
		fmt.Printf("output %s %s%v = %v\n", t.Name, t.Datatype, t.Shape, values)
	}
	return nil
}
