package server

// Per-model health (grpc.health.v1 with a model's name as the service, docs/bridge.md):
// SERVING when the server serves and the model is ready, NOT_SERVING while the server is not
// serving or the model is known but not ready (here: LOADING, its load held by the test's
// loader), NOT_FOUND naming an unknown model. Served through Register on a real gRPC server,
// over a real repository table; the held load is released by the test, nothing sleeps.

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"
)

type opened struct{}

func (opened) Close() {}

// readiness is a repository as health sees it: ModelReady from a real table, nothing else.
type readiness struct {
	noModels
	r *repository.Repository[opened]
}

func (x readiness) Ready(name, version string) (bool, error) { return x.r.Ready(name, version) }

func TestPerModelHealthIsNotServingWhileTheModelLoads(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"mlp", "late"} {
		artifacttest.CopyTree(t, artifacttest.Backcompat(), filepath.Join(root, name, "1"))
	}
	entered, release := make(chan struct{}), make(chan struct{})
	loader := repository.LoaderFunc[opened](func(ctx context.Context, v *repository.Version) (opened, error) {
		if v.Model == "late" {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				return opened{}, ctx.Err()
			}
		}
		return opened{}, nil
	})
	quiet := slog.New(slog.DiscardHandler)
	repo, err := repository.New[opened](root, loader, repository.Options{Mode: "explicit", LoadModels: []string{"mlp"}, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(repo.Close)
	repo.Start(context.Background())

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec()))
	health := New(Options{Repository: readiness{r: repo}, Log: quiet}).Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := healthpb.NewHealthClient(cc)
	want := func(what, service string, st healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		got, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || got.GetStatus() != st {
			t.Fatalf("%s: health of %q = %v, %v; want %v", what, service, got.GetStatus(), err, st)
		}
	}

	want("the server not serving yet", "mlp", healthpb.HealthCheckResponse_NOT_SERVING)
	health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	want("ready", "mlp", healthpb.HealthCheckResponse_SERVING)
	want("known, not loaded", "late", healthpb.HealthCheckResponse_NOT_SERVING)

	loaded := make(chan error, 1)
	go func() { loaded <- repo.Load(context.Background(), "late") }()
	<-entered
	if st, _ := repo.Status("late", 1); st.State != repository.Loading {
		t.Fatalf("late/1 is %+v while its load is held, want LOADING", st)
	}
	want("loading", "late", healthpb.HealthCheckResponse_NOT_SERVING)
	want("another model meanwhile", "mlp", healthpb.HealthCheckResponse_SERVING)
	close(release)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	want("loaded", "late", healthpb.HealthCheckResponse_SERVING)

	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"})
	if grpcstatus.Code(err) != codes.NotFound || !strings.Contains(grpcstatus.Convert(err).Message(), "no model 'nope'") {
		t.Fatalf("an unknown model: %v, want NOT_FOUND naming it", err)
	}
}
