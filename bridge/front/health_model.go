package main

// Per-model health (issue 27): the front's grpc.health.v1 service answers a model's name as
// a service, so `grpc-health-probe -service=MODEL` (and Kubernetes' gRPC probes with a
// service) read one model's readiness. The services "" and inference.GRPCInferenceService
// keep the health.Server's answer (main.go updateHealth); any other name is a model, asked
// with ModelReady through the unary path a gRPC call takes:
//
//	SERVING       the server is serving and the model is ready (every version the repository serves)
//	NOT_SERVING   the server is not serving (starting, a worker down, draining), or the model
//	              is known but not ready (loading, failed)
//	NOT_FOUND     no model of that name (the status grpc-go's health.Server gives an unknown service)
//
// Watch keeps the health.Server's behaviour (model names are not pushed: a watcher of one is
// told SERVICE_UNKNOWN); probes use Check.

import (
	"context"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

type modelHealth struct {
	*health.Server
	f *front
}

func (h *modelHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "" || req.GetService() == serviceName {
		return h.Server.Check(ctx, req)
	}
	server, err := h.Server.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	if server.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return server, nil
	}
	ready := &inferencepb.ModelReadyResponse{}
	err = h.f.call(ctx, "ModelReady", &inferencepb.ModelReadyRequest{Name: req.GetService()}, ready)
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, status.Errorf(codes.NotFound, "unknown service: no model '%s' (per-model health: "+
			"the service is a model name)", req.GetService())
	case err != nil:
		return nil, err
	case ready.GetReady():
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}
