package jaxport_test

import (
	"context"
	"errors"
	"io"
	"net"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// scaleServer is a one-model Open Inference Protocol server that runs inside the test process
// over an in-memory connection (bufconn), so the examples run under `go test` and their
// // Output: blocks are checked. Model "scale": FP32 input "x" of any shape -> "y" = 2 * x.
type scaleServer struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (scaleServer) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (scaleServer) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if r.GetName() != "scale" {
		return nil, status.Errorf(codes.NotFound, "unknown model '%s'", r.GetName())
	}
	return &pb.ModelMetadataResponse{
		Name: "scale", Versions: []string{"1"}, Platform: "jax",
		Inputs:  []*pb.ModelMetadataResponse_TensorMetadata{{Name: "x", Datatype: "FP32", Shape: []int64{-1, 3}}},
		Outputs: []*pb.ModelMetadataResponse_TensorMetadata{{Name: "y", Datatype: "FP32", Shape: []int64{-1, 3}}},
	}, nil
}

func (scaleServer) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if r.GetModelName() != "scale" {
		return nil, status.Errorf(codes.NotFound, "unknown model '%s'", r.GetModelName())
	}
	if len(r.GetInputs()) != 1 || r.GetInputs()[0].GetName() != "x" {
		return nil, status.Error(codes.InvalidArgument, "model 'scale' takes one input 'x'")
	}
	in := r.GetInputs()[0]
	var x []float32
	var err error
	if len(r.GetRawInputContents()) == 1 {
		x, err = jaxport.RawTensor("x", jaxport.Datatype(in.GetDatatype()), in.GetShape(), r.GetRawInputContents()[0]).AsFloat32()
	} else {
		x = in.GetContents().GetFp32Contents()
		if in.GetDatatype() != "FP32" {
			err = errors.New("input 'x' must be FP32")
		}
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	for i := range x {
		x[i] *= 2
	}
	y, err := jaxport.Float32("y", in.GetShape(), x)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.ModelInferResponse{
		ModelName: "scale", ModelVersion: "1", Id: r.GetId(),
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: "FP32", Shape: y.Shape}},
		RawOutputContents: [][]byte{y.Raw},
	}, nil
}

// ModelStreamInfer answers each request in order; a failed one becomes an error_message
// "CODE: message", as the jaxport bridge words it.
func (s scaleServer) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.ModelInfer(stream.Context(), r)
		out := &pb.ModelStreamInferResponse{InferResponse: resp}
		if err != nil {
			st := status.Convert(err)
			out = &pb.ModelStreamInferResponse{
				ErrorMessage:  codeName(st.Code()) + ": " + st.Message(),
				InferResponse: &pb.ModelInferResponse{Id: r.GetId()},
			}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

func codeName(c codes.Code) string {
	switch c {
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	}
	return "UNKNOWN"
}

// inProcessServer starts scaleServer on an in-memory listener and returns the NewClient option
// that reaches it (target "passthrough:///in-process") and a stop function.
func inProcessServer() (jaxport.Option, func()) {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, scaleServer{})
	go func() { _ = srv.Serve(lis) }()
	dialer := func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }
	return jaxport.WithDialOptions(grpc.WithContextDialer(dialer)), srv.Stop
}
