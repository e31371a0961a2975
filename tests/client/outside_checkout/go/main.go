package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	triton "example.com/consumer/triton"
	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc/status"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func main() {
	addr, ca, cert, key, token := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	client, err := jaxport.NewClient(addr, jaxport.WithTLSFiles(ca, cert, key), jaxport.WithBearerToken(token))
	must(err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // the deadline
	defer cancel()

	x := jaxport.Must(jaxport.Float32("x", []int64{3}, []float32{1.5, -2, 4.25}))
	out, err := client.Infer(ctx, "echo", x)
	must(err)
	y, _ := out.Get("y")
	values, err := y.AsFloat32()
	must(err)
	fmt.Println("jaxport infer", values)
	_, err = client.Infer(ctx, "echo", jaxport.Must(jaxport.Float32("x", []int64{2}, []float32{1, 2})))
	fmt.Printf("jaxport error %v %s\n", status.Code(err), status.Convert(err).Message())

	// Triton's own generated stubs, linked into the same program, on the client's connection.
	stub := triton.NewGRPCInferenceServiceClient(client.Conn())
	meta, err := stub.ModelMetadata(ctx, &triton.ModelMetadataRequest{Name: "echo"})
	must(err)
	fmt.Println("triton metadata", meta.GetName(), meta.GetInputs()[0].GetName(), meta.GetInputs()[0].GetShape())
	resp, err := stub.ModelInfer(ctx, &triton.ModelInferRequest{
		ModelName:        "echo",
		Inputs:           []*triton.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{3}}},
		RawInputContents: [][]byte{x.Raw},
	})
	must(err)
	fmt.Println("triton infer", resp.GetOutputs()[0].GetName(), bytes.Equal(resp.GetRawOutputContents()[0], x.Raw))
	_, err = stub.ModelMetadata(ctx, &triton.ModelMetadataRequest{Name: "no_such_model"})
	fmt.Println("triton error", status.Code(err))
}
