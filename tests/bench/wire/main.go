// Command wire measures 16 MiB ModelInfer round trips with the Go client (issue 12's large
// tensor case) and the floor under them: what grpc-go itself moves on this machine with no
// model behind it. Benchmark use only (tests/bench/front.py builds and runs it).
//
//	wire echo [--tuned]     serve ModelInfer on 127.0.0.1:0, answering each request's first
//	                        input as output "y" (one copy, no model); prints the address
//	wire call --target HOST:PORT [--model ew16] [--mib 16] [--n 12] [--expect affine|echo]
//	                        send an FP32 tensor of MIB MiB n times with the jaxport Go client,
//	                        check every answer (affine: y = 2x + 0.5, the bench's elementwise
//	                        model; echo: y = x), print {"latencies_ms": [...]} as JSON
//
// --tuned: 64 MiB HTTP/2 flow-control windows on both ends and 1 MiB read/write buffers, to
// show the floor is not grpc-go's default window (the front runs grpc-go's defaults).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/jaxport/jaxport/clients/go/jaxport"
	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
)

const window = 64 << 20

type echo struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (echo) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (echo) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if len(r.Inputs) == 0 || len(r.RawInputContents) == 0 {
		return nil, errors.New("echo: no raw input")
	}
	out := make([]byte, len(r.RawInputContents[0]))
	copy(out, r.RawInputContents[0])
	return &pb.ModelInferResponse{
		ModelName: r.ModelName, Id: r.Id,
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: r.Inputs[0].Datatype, Shape: r.Inputs[0].Shape}},
		RawOutputContents: [][]byte{out},
	}, nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("echo", flag.ContinueOnError)
	tuned := fs.Bool("tuned", false, "64 MiB windows, 1 MiB buffers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(256 << 20), grpc.MaxSendMsgSize(256 << 20)}
	if *tuned {
		opts = append(opts, grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
			grpc.ReadBufferSize(1<<20), grpc.WriteBufferSize(1<<20))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(lis.Addr().String())
	s := grpc.NewServer(opts...)
	pb.RegisterGRPCInferenceServiceServer(s, echo{})
	return s.Serve(lis)
}

func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	target := fs.String("target", "", "HOST:PORT")
	model := fs.String("model", "ew16", "model name")
	mib := fs.Int("mib", 16, "tensor size in MiB")
	n := fs.Int("n", 12, "calls")
	expect := fs.String("expect", "affine", "affine (y = 2x + 0.5) or echo (y = x)")
	tuned := fs.Bool("tuned", false, "64 MiB client windows")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" || (*expect != "affine" && *expect != "echo") {
		return errors.New("call: --target HOST:PORT and --expect affine|echo are required")
	}
	ctx := context.Background()
	opts := []jaxport.Option{jaxport.WithMaxMessageSize(2*(*mib<<20) + (1 << 20))}
	if *tuned {
		opts = append(opts, jaxport.WithDialOptions(grpc.WithInitialWindowSize(window),
			grpc.WithInitialConnWindowSize(window)))
	}
	c, err := jaxport.NewClient(*target, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	count := *mib << 20 / 4
	x := make([]float32, count)
	for i := range x {
		x[i] = float32(i%2048)/1024 - 1
	}
	in, err := jaxport.Float32("x", []int64{int64(count)}, x)
	if err != nil {
		return err
	}
	lat := make([]float64, 0, *n)
	for k := 0; k < *n; k++ {
		cctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		t0 := time.Now()
		out, err := c.Infer(cctx, *model, in)
		elapsed := time.Since(t0)
		cancel()
		if err != nil {
			return fmt.Errorf("call %d: %w", k, err)
		}
		lat = append(lat, float64(elapsed.Nanoseconds())/1e6)
		y, ok := out.Get("y")
		if !ok {
			return fmt.Errorf("call %d: no output y", k)
		}
		got, err := y.AsFloat32()
		if err != nil {
			return err
		}
		if len(got) != count {
			return fmt.Errorf("call %d: %d elements, want %d", k, len(got), count)
		}
		for i, v := range got {
			want := x[i]
			if *expect == "affine" {
				want = x[i]*2 + 0.5
			}
			if math.Abs(float64(v-want)) > 1e-6 {
				return fmt.Errorf("call %d: y[%d] = %g, want %g", k, i, v, want)
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"latencies_ms": lat})
}

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "echo":
		err = serve(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "call":
		err = call(os.Args[2:])
	default:
		err = errors.New("usage: wire echo [--tuned] | wire call --target HOST:PORT [flags]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wire:", err)
		os.Exit(1)
	}
}
