package jaxport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A complete call. The server runs in this process (example_server_test.go); against a
// bridge, jaxport.NewClient("127.0.0.1:8001") (plus WithTLSFiles / WithBearerToken) instead.
func Example() {
	inProcess, stop := inProcessServer()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := jaxport.NewClient("passthrough:///in-process", inProcess)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	meta, err := client.Metadata(ctx, "scale")
	if err != nil {
		panic(err)
	}
	for _, in := range meta.GetInputs() {
		fmt.Println("input", in.GetName(), in.GetDatatype(), in.GetShape())
	}

	x, err := jaxport.Float32("x", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	if err != nil {
		panic(err)
	}
	out, err := client.Infer(ctx, "scale", x)
	if err != nil {
		panic(err)
	}
	y, _ := out.Get("y")
	values, err := y.AsFloat32()
	fmt.Println(y.Datatype, y.Shape, values, err)

	_, err = client.Infer(ctx, "no-such-model", x)
	fmt.Println(status.Code(err), status.Convert(err).Message())
	// Output:
	// input x FP32 [-1 3]
	// FP32 [2 3] [2 4 6 8 10 12] <nil>
	// NotFound unknown model 'no-such-model'
}

// A full request: id, typed contents instead of raw bytes, a subset of the outputs.
func ExampleClient_Do() {
	inProcess, stop := inProcessServer()
	defer stop()
	ctx := context.Background()
	client, err := jaxport.NewClient("passthrough:///in-process", inProcess)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	out, err := client.Do(ctx, jaxport.Request{
		Model:   "scale",
		ID:      "req-1",
		Typed:   true,
		Outputs: []string{"y"},
		Inputs:  []jaxport.Tensor{jaxport.Must(jaxport.Float32("x", []int64{1, 3}, []float32{0.5, 1, 1.5}))},
	})
	if err != nil {
		fmt.Println(status.Code(err), status.Convert(err).Message())
		return
	}
	y, _ := out.Get("y")
	values, _ := y.AsFloat32()
	fmt.Println(out.ID, out.Model, out.Version, values)
	// Output: req-1 scale 1 [1 2 3]
}

// A stream: results arrive in order; a failed request is a *jaxport.StreamError that keeps
// the gRPC code, and the stream goes on.
func ExampleClient_OpenStream() {
	inProcess, stop := inProcessServer()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel() // the context bounds the whole stream
	client, err := jaxport.NewClient("passthrough:///in-process", inProcess)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	stream, err := client.OpenStream(ctx)
	if err != nil {
		panic(err)
	}
	x := jaxport.Must(jaxport.Float32("x", []int64{1, 3}, []float32{1, 2, 3}))
	for i, model := range []string{"scale", "missing", "scale"} {
		if err := stream.Send(jaxport.Request{Model: model, ID: fmt.Sprint(i), Inputs: []jaxport.Tensor{x}}); err != nil {
			panic(err)
		}
	}
	_ = stream.CloseSend()
	for {
		out, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		var failed *jaxport.StreamError
		if errors.As(err, &failed) {
			fmt.Println(failed.ID, status.Code(err) == codes.NotFound, failed.Message)
			continue
		}
		if err != nil {
			panic(err)
		}
		y, _ := out.Get("y")
		values, _ := y.AsFloat32()
		fmt.Println(out.ID, values)
	}
	// Output:
	// 0 [2 4 6]
	// 1 true unknown model 'missing'
	// 2 [2 4 6]
}

// Constructors check that the data fills the shape.
func ExampleFloat32() {
	_, err := jaxport.Float32("x", []int64{2, 3}, []float32{1, 2, 3})
	var shapeErr *jaxport.ShapeError
	fmt.Println(errors.As(err, &shapeErr), err)
	// Output: true jaxport: tensor "x": shape [2 3] holds 6 elements, data has 3
}

// A bearer token needs TLS: over plaintext NewClient refuses it unless explicitly allowed.
func ExampleWithBearerToken() {
	_, err := jaxport.NewClient("127.0.0.1:8001", jaxport.WithBearerToken("secret"))
	fmt.Println(errors.Is(err, jaxport.ErrTokenOverPlaintext))
	// Output: true
}

// The service config WithRetry installs: UNAVAILABLE is retried for every call,
// DEADLINE_EXCEEDED only for the idempotent reads; streams are not retried.
func ExampleRetryPolicy_ServiceConfig() {
	sc, err := jaxport.RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second, BackoffMultiplier: 2}.ServiceConfig()
	fmt.Println(len(sc) > 0, err)
	_, err = jaxport.RetryPolicy{MaxAttempts: 9}.ServiceConfig()
	fmt.Println(err)
	// Output:
	// true <nil>
	// retry policy: MaxAttempts must be 2..5, got 9
}

// An interceptor sees every unary call the client makes: here it adds a request id to the
// metadata and logs the method and the outcome. Streams take grpc.WithStreamInterceptor the
// same way; OpenTelemetry is a stats handler (docs/clients.md).
func ExampleWithDialOptions_interceptor() {
	inProcess, stop := inProcessServer()
	defer stop()
	logCalls := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-request-id", "42")
		err := invoker(ctx, method, req, reply, cc, opts...)
		fmt.Println(method, status.Code(err))
		return err
	}
	client, err := jaxport.NewClient("passthrough:///in-process", inProcess,
		jaxport.WithDialOptions(grpc.WithUnaryInterceptor(logCalls)))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x := jaxport.Must(jaxport.Float32("x", []int64{1, 3}, []float32{1, 2, 3}))
	_, _ = client.Infer(ctx, "scale", x)
	_, _ = client.Infer(ctx, "missing", x)
	// Output:
	// /inference.GRPCInferenceService/ModelInfer OK
	// /inference.GRPCInferenceService/ModelInfer NotFound
}

// Conn carries the client's credentials, limits and retries to stubs of your own: the
// generated ones here, or another generated copy of the protocol (Triton's stubs link beside
// ours: docs/clients.md).
func ExampleClient_Conn() {
	inProcess, stop := inProcessServer()
	defer stop()
	client, err := jaxport.NewClient("passthrough:///in-process", inProcess)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stub := pb.NewGRPCInferenceServiceClient(client.Conn())
	meta, err := stub.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "scale"})
	fmt.Println(meta.GetName(), meta.GetPlatform(), err)
	// Output: scale jax <nil>
}
