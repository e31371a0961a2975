package jaxport

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// echoServer is a tiny OIP server for the client's own plumbing (token, limits, status
// pass-through, decoding); behaviour against the real bridge is the conformance suite's job.
type echoServer struct {
	pb.UnimplementedGRPCInferenceServiceServer
	lastAuth chan string
}

func (s *echoServer) ServerLive(ctx context.Context, _ *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	select {
	case s.lastAuth <- firstOf(md.Get("authorization")):
	default:
	}
	return &pb.ServerLiveResponse{Live: true}, nil
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (s *echoServer) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	switch r.GetModelName() {
	case "reject":
		return nil, status.Error(codes.InvalidArgument, "input 'pixels': expected shape [2, 3], got [3, 2]")
	case "big":
		return &pb.ModelInferResponse{
			Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "y", Datatype: string(UINT8), Shape: []int64{16 << 20}}},
			RawOutputContents: [][]byte{make([]byte, 16<<20)},
		}, nil
	case "typed":
		// Answer in typed contents, as some servers do.
		out := &pb.ModelInferResponse{Id: r.GetId()}
		for _, in := range r.GetInputs() {
			out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape(), Contents: in.GetContents()})
		}
		return out, nil
	}
	out := &pb.ModelInferResponse{ModelName: r.GetModelName(), Id: r.GetId()}
	for i, in := range r.GetInputs() {
		out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{Name: in.GetName() + "_out", Datatype: in.GetDatatype(), Shape: in.GetShape()})
		out.RawOutputContents = append(out.RawOutputContents, r.GetRawInputContents()[i])
	}
	return out, nil
}

func (s *echoServer) ModelStreamInfer(stream pb.GRPCInferenceService_ModelStreamInferServer) error {
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.GetModelName() == "reject" {
			_ = stream.Send(&pb.ModelStreamInferResponse{ErrorMessage: "NOT_FOUND: no such model 'reject'", InferResponse: &pb.ModelInferResponse{Id: r.GetId()}})
			continue
		}
		resp, _ := s.ModelInfer(stream.Context(), r)
		if err := stream.Send(&pb.ModelStreamInferResponse{InferResponse: resp}); err != nil {
			return err
		}
	}
}

func startServer(t *testing.T) (string, *echoServer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	impl := &echoServer{lastAuth: make(chan string, 1)}
	pb.RegisterGRPCInferenceServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), impl
}

func dial(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInferRoundTripAndID(t *testing.T) {
	addr, _ := startServer(t)
	c := dial(t, addr)
	ctx := context.Background()
	out, err := c.Do(ctx, Request{Model: "echo", ID: "req-7", Inputs: []Tensor{
		Must(Float32("a", []int64{2}, []float32{1, 2})), Must(BFloat16("b", []int64{1}, []float32{0.5})),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != "req-7" || len(out.Tensors) != 2 {
		t.Fatalf("unexpected response %+v", out)
	}
	a, _ := out.Get("a_out")
	if v, err := a.AsFloat32(); err != nil || v[1] != 2 {
		t.Fatalf("a_out = %v (%v)", v, err)
	}
	b, _ := out.Get("b_out")
	if v, err := b.AsBFloat16(); err != nil || v[0] != 0.5 {
		t.Fatalf("b_out = %v (%v)", v, err)
	}
}

func TestTypedContentsResponseDecodes(t *testing.T) {
	addr, _ := startServer(t)
	c := dial(t, addr)
	out, err := c.Do(context.Background(), Request{Model: "typed", Typed: true, Inputs: []Tensor{Must(Int64("n", []int64{2}, []int64{-3, 1 << 40}))}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := out.Get("n")
	if v, err := n.AsInt64(); err != nil || v[0] != -3 || v[1] != 1<<40 {
		t.Fatalf("n = %v (%v)", v, err)
	}
}

func TestStatusCodeAndMessageArePreserved(t *testing.T) {
	addr, _ := startServer(t)
	c := dial(t, addr)
	_, err := c.Infer(context.Background(), "reject", Must(Float32("pixels", []int64{1}, []float32{1})))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v, want InvalidArgument (err %v)", status.Code(err), err)
	}
	if msg := status.Convert(err).Message(); msg != "input 'pixels': expected shape [2, 3], got [3, 2]" {
		t.Fatalf("message changed: %q", msg)
	}
}

func TestDefaultLimitCarries16MiBAndOptionLowersIt(t *testing.T) {
	addr, _ := startServer(t)
	out, err := dial(t, addr).Infer(context.Background(), "big", Must(Uint8("x", []int64{1}, []uint8{1})))
	if err != nil {
		t.Fatalf("16 MiB response with the default limit: %v", err)
	}
	if y, _ := out.Get("y"); len(y.Raw) != 16<<20 {
		t.Fatalf("got %d bytes", len(y.Raw))
	}
	_, err = dial(t, addr, WithMaxMessageSize(4<<20)).Infer(context.Background(), "big", Must(Uint8("x", []int64{1}, []uint8{1})))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("with a 4 MiB limit want ResourceExhausted, got %v", err)
	}
}

func TestBearerTokenOverPlaintextIsRefusedUnlessAllowed(t *testing.T) {
	addr, impl := startServer(t)
	if c, err := NewClient(addr, WithBearerToken("s3cret")); !errors.Is(err, ErrTokenOverPlaintext) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("WithBearerToken over plaintext: want ErrTokenOverPlaintext, got %v", err)
	}
	// gRPC itself refuses the credentials on a plaintext connection made by the caller.
	if conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(BearerToken("s3cret", false))); err == nil {
		_ = conn.Close()
		t.Fatal("grpc.NewClient accepted a token requiring transport security over plaintext")
	}
	if live, err := dial(t, addr, WithInsecureBearerToken("s3cret")).Live(context.Background()); err != nil || !live {
		t.Fatalf("live %v err %v", live, err)
	}
	if got := <-impl.lastAuth; got != "Bearer s3cret" {
		t.Fatalf("authorization %q", got)
	}
}

func TestParseStreamError(t *testing.T) {
	for _, tc := range []struct {
		in   string
		code codes.Code
		msg  string
	}{
		{"INVALID_ARGUMENT: input 'x': bad shape", codes.InvalidArgument, "input 'x': bad shape"},
		{"CANCELLED: gone", codes.Canceled, "gone"},
		{"DEADLINE_EXCEEDED: slow", codes.DeadlineExceeded, "slow"},
		{"UNAUTHENTICATED: who", codes.Unauthenticated, "who"},
		{"OK: not an error code", codes.Unknown, "OK: not an error code"},
		{"plain text: no code", codes.Unknown, "plain text: no code"},
	} {
		e := ParseStreamError(tc.in, "7")
		if e.Code != tc.code || e.Message != tc.msg || e.ID != "7" || status.Code(e) != tc.code {
			t.Fatalf("%q -> %v %q", tc.in, e.Code, e.Message)
		}
	}
}

func TestNewClientFromConnLeavesTheCallersConnectionOpen(t *testing.T) {
	addr, _ := startServer(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := NewClientFromConn(conn)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if live, err := NewClientFromConn(conn).Live(context.Background()); err != nil || !live {
		t.Fatalf("the caller's connection must still work after Client.Close: %v %v", live, err)
	}
}

func TestStreamResultsAndErrors(t *testing.T) {
	addr, _ := startServer(t)
	s, err := dial(t, addr).OpenStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(Request{Model: "echo", ID: "1", Inputs: []Tensor{Must(Int32("k", []int64{1}, []int32{5}))}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(Request{Model: "reject", ID: "2", Inputs: []Tensor{Must(Int32("k", []int64{1}, []int32{5}))}}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseSend()
	out, err := s.Recv()
	if err != nil || out.ID != "1" {
		t.Fatalf("first result %+v %v", out, err)
	}
	_, err = s.Recv()
	var se *StreamError
	if !errors.As(err, &se) || se.ID != "2" || se.Message != "no such model 'reject'" {
		t.Fatalf("second result should be a StreamError for id 2, got %v", err)
	}
	if status.Code(err) != codes.NotFound || se.Code != codes.NotFound || status.Convert(err).Message() != "no such model 'reject'" {
		t.Fatalf("the stream error must keep its code: status.Code=%v Code=%v", status.Code(err), se.Code)
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("want io.EOF at the end, got %v", err)
	}
}

func TestWaitReadyFailsOnADeadServerWhenItsContextEnds(t *testing.T) {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	_ = lis.Close()
	c, err := NewClient(addr) // no I/O yet: a closed port is not NewClient's error
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("WaitReady on a closed port: want DeadlineExceeded once ctx ends, got %v", err)
	}
}

func TestWaitReadyNeedsAConnectionThatReportsItsState(t *testing.T) {
	err := NewClientFromConn(stateless{}).WaitReady(context.Background())
	if err == nil || !strings.Contains(err.Error(), "jaxport.stateless does not report its connectivity state") {
		t.Fatalf("got %v", err)
	}
}

// stateless is a grpc.ClientConnInterface without connectivity state (a wrapper of the
// caller's, say).
type stateless struct{}

func (stateless) Invoke(context.Context, string, any, any, ...grpc.CallOption) error { return nil }
func (stateless) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, nil
}
