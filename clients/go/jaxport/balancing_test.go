package jaxport

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// replica counts the calls it answers.
type replica struct {
	pb.UnimplementedGRPCInferenceServiceServer
	calls atomic.Int64
}

func (r *replica) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	r.calls.Add(1)
	return &pb.ServerLiveResponse{Live: true}, nil
}

// replicas starts n servers and a resolver naming all of them ("replicas:///set").
func replicas(t *testing.T, n int) ([]*replica, *manual.Resolver) {
	t.Helper()
	var addrs []resolver.Address
	var rs []*replica
	for i := 0; i < n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		r := &replica{}
		pb.RegisterGRPCInferenceServiceServer(srv, r)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		rs = append(rs, r)
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	res := manual.NewBuilderWithScheme("replicas")
	res.InitialState(resolver.State{Addresses: addrs})
	return rs, res
}

func TestRoundRobinReachesEveryReplica(t *testing.T) {
	rs, res := replicas(t, 2)
	c, err := NewClient("replicas:///set", WithLoadBalancing("round_robin"),
		WithRetry(DefaultRetryPolicy), // one service config holds both
		WithDialOptions(grpc.WithResolvers(res)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Until both have answered: round_robin adds the second replica once it is connected. The
	// context only bounds a failure; nothing here depends on how fast that happens.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for rs[0].calls.Load() == 0 || rs[1].calls.Load() == 0 {
		if _, err := c.Live(ctx); err != nil {
			t.Fatalf("after %d + %d calls: %v", rs[0].calls.Load(), rs[1].calls.Load(), err)
		}
	}
}

func TestPickFirstByDefaultStaysOnOneReplica(t *testing.T) {
	rs, res := replicas(t, 2)
	c, err := NewClient("replicas:///set", WithDialOptions(grpc.WithResolvers(res)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 50; i++ {
		if _, err := c.Live(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := rs[0].calls.Load(), rs[1].calls.Load(); a != 0 && b != 0 {
		t.Fatalf("pick_first spread calls over both replicas: %d and %d", a, b)
	}
}

func TestAnUnknownLoadBalancingPolicyFailsNewClientNamingIt(t *testing.T) {
	_, err := NewClient("127.0.0.1:1", WithLoadBalancing("round_robbin"))
	if err == nil || !strings.Contains(err.Error(), "round_robbin") {
		t.Fatalf("want an error naming the policy, got %v", err)
	}
}
