package jaxport

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// attempts counts the client's call attempts (gRPC reports each retry attempt to the stats
// handler; transparent retries of a call that never reached a server are not counted) and signals every failed one, so the test restarts the server exactly after an
// attempt has failed rather than after a guessed sleep.
type attempts struct {
	begun  atomic.Int32
	failed chan error
}

func (a *attempts) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (a *attempts) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (a *attempts) HandleConn(context.Context, stats.ConnStats) {}
func (a *attempts) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch e := s.(type) {
	case *stats.Begin:
		if !e.IsTransparentRetryAttempt { // gRPC's own replay of a call that never left
			a.begun.Add(1)
		}
	case *stats.End:
		if e.Error != nil {
			select {
			case a.failed <- e.Error:
			default:
			}
		}
	}
}

// serveAt starts the echo server on addr ("127.0.0.1:0" for any port).
func serveAt(t *testing.T, addr string) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, &echoServer{lastAuth: make(chan string, 1)})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// inferAcrossRestart stops the server, starts an inference, and, once the first attempt has
// failed, starts the server again on the same port. It returns the call's error and how many
// attempts it made (never how long it took: the machine may be loaded).
func inferAcrossRestart(t *testing.T, opts ...Option) (error, int32) {
	addr, srv := serveAt(t, "127.0.0.1:0")
	counter := &attempts{failed: make(chan error, 16)}
	c := dial(t, addr, append(opts, WithDialOptions(grpc.WithStatsHandler(counter)))...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	x := Must(Float32("x", []int64{2}, []float32{1, 2}))
	if _, err := c.Infer(ctx, "echo", x); err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	srv.Stop()
	// Wait until the client has seen the connection go, so the call below is not replayed
	// transparently on a half-closed one but really meets a server that is down.
	for state := c.owned.GetState(); state == connectivity.Ready; state = c.owned.GetState() {
		c.owned.WaitForStateChange(ctx, state)
	}
	counter.begun.Store(0)

	done := make(chan error, 1)
	go func() {
		_, err := c.Infer(ctx, "echo", x)
		done <- err
	}()
	select {
	case err := <-done: // failed for good without waiting for the restart
		return err, counter.begun.Load()
	case <-counter.failed:
	}
	serveAt(t, addr)
	err := <-done
	return err, counter.begun.Load()
}

func TestRetryCarriesARequestAcrossAServerRestart(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 5, InitialBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second, BackoffMultiplier: 2}
	err, n := inferAcrossRestart(t, WithRetry(policy))
	if err != nil {
		t.Fatalf("with retries the request must survive the restart: %v (%d attempts)", err, n)
	}
	if n < 2 {
		t.Fatalf("expected a retried request, got %d attempt(s)", n)
	}
}

func TestWithoutRetryARequestFailsWithOneAttemptDuringARestart(t *testing.T) {
	err, n := inferAcrossRestart(t)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without retries want UNAVAILABLE, got %v", err)
	}
	if n != 1 {
		t.Fatalf("without retries: %d attempts, want exactly 1", n)
	}
}

func TestServiceConfigIsValidForGRPC(t *testing.T) {
	sc, err := DefaultRetryPolicy.ServiceConfig()
	if err != nil {
		t.Fatal(err)
	}
	// grpc.NewClient parses the default service config and rejects an invalid one.
	conn, err := grpc.NewClient("passthrough:///unused", grpc.WithDefaultServiceConfig(sc),
		grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatalf("gRPC rejects the service config %s: %v", sc, err)
	}
	_ = conn.Close()
}

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }
