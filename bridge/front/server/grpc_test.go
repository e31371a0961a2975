package server

import (
	"bytes"
	"context"
	"net"
	"testing"

	_ "github.com/jaxport/jaxport/bridge/front/compression" // registers deflate
	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
)

// inPayloads records what a client received: uncompressed and on-the-wire payload sizes.
type inPayloads struct{ got chan *stats.InPayload }

func (h *inPayloads) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (h *inPayloads) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h *inPayloads) HandleConn(context.Context, stats.ConnStats)                       {}
func (h *inPayloads) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		h.got <- p
	}
}

// TestGRPCCompressionReachesTheRawCodec: a server with the front's codec decompresses a
// gzip/deflate request before rawCodec sees its bytes, and answers compressed with the
// request's encoding; a message decompressing past MaxRecvMsgSize is RESOURCE_EXHAUSTED.
func TestGRPCCompressionReachesTheRawCodec(t *testing.T) {
	const limit = 1 << 16
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec()), grpc.MaxRecvMsgSize(limit))
	echo := func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(rawMsg)
		if err := dec(in); err != nil {
			return nil, err
		}
		return &rawMsg{out: [][]byte{in.bytes()}}, nil // the request's (decompressed) bytes, back
	}
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "t.Echo", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: echo}}}, struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	h := &inPayloads{got: make(chan *stats.InPayload, 4)}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(h), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	msg := bytes.Repeat([]byte("tensor bytes "), 1000)
	for _, enc := range []string{"gzip", "deflate"} {
		out := new(rawMsg)
		err := cc.Invoke(context.Background(), "/t.Echo/Echo", &rawMsg{out: [][]byte{msg}}, out, grpc.UseCompressor(enc))
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if !bytes.Equal(out.bytes(), msg) {
			t.Fatalf("%s: the echo is not the request's bytes", enc)
		}
		p := <-h.got
		if p.Length != len(msg) || p.CompressedLength >= len(msg)/4 {
			t.Fatalf("%s: response of %d bytes came as %d: not compressed", enc, p.Length, p.CompressedLength)
		}
		bomb := &rawMsg{out: [][]byte{make([]byte, 4*limit)}}
		err = cc.Invoke(context.Background(), "/t.Echo/Echo", bomb, new(rawMsg), grpc.UseCompressor(enc))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: a message decompressing past the limit: %v", enc, err)
		}
	}
	out := new(rawMsg) // uncompressed request: uncompressed answer
	if err := cc.Invoke(context.Background(), "/t.Echo/Echo", &rawMsg{out: [][]byte{msg}}, out); err != nil {
		t.Fatal(err)
	}
	if p := <-h.got; p.CompressedLength != p.Length {
		t.Fatalf("identity request answered compressed: %d of %d", p.CompressedLength, p.Length)
	}
}
