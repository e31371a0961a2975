// Package server is the Open Inference Protocol's dataplane in the front, one method per RPC
// of inference.GRPCInferenceService (health, metadata/config, infer, stream, repository,
// statistics, shared memory, trace: a file per kind of call), answered for every model
// whichever engine executes it; grpc.go serves them over gRPC, package rest over HTTP from
// the same methods.
package server

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
)

// Name, platform and version the server reports (ServerMetadata, ModelMetadata).
const (
	ServerName = "jaxport"
	Platform   = "jax"
	// Version is jaxport's version (pyproject.toml; version_test.go holds them together).
	Version = "0.1.0"
)

// ServiceName is the OIP service's full name.
const ServiceName = "inference.GRPCInferenceService"

// Entry is one model version of the repository as RepositoryIndex lists it (version "" for a
// model without version directories).
type Entry struct {
	Name, Version, State, Reason string
}

// Repository is the model table the server answers from (package repository).
type Repository interface {
	// Get is the READY version a request names ("" = the highest READY one), acquired
	// (dispatch.Model.Done releases it): NOT_FOUND for an unknown model or version,
	// UNAVAILABLE with the reason for one that is not ready.
	Get(name, version string) (*dispatch.Model, error)
	// Ready: ModelReady (false for a known model or version that cannot serve; NOT_FOUND
	// errors as Get).
	Ready(name, version string) (bool, error)
	// Serving: every READY version of name, ascending ("" = of every model; name unknown or
	// not ready: Get's errors).
	Serving(name string) ([]*dispatch.Model, error)
	// Index: every version in the repository or its table, with state and reason.
	Index(readyOnly bool) []Entry
	// Load / Unload: RepositoryModelLoad / Unload (their errors are the caller's answer: the
	// control mode's refusals, NOT_FOUND, a failed load's FAILED_PRECONDITION).
	Load(ctx context.Context, name string) error
	Unload(ctx context.Context, name string) error
	// Metrics: every version of the table as /metrics reports it.
	Metrics() []telemetry.Model
}

// Options configure a Service.
type Options struct {
	Repository Repository
	// SharedMemory: the system shared-memory registry (nil: --system-shared-memory is off).
	SharedMemory *shm.Registry
	Tracing      *telemetry.Tracing // nil: off
	Metrics      *telemetry.Metrics
	Dispatcher   *dispatch.Dispatcher
	// Extra returns the backends' own metric families (text format), or "".
	Extra func() string
	Log   *slog.Logger
}

// Service answers every RPC.
type Service struct {
	o          Options
	shm        request.SharedMemory
	ready      atomic.Bool // the initial load has finished
	draining   atomic.Bool
	extensions []string
}

// New is a Service over o; it reports ready once SetReady is called.
func New(o Options) *Service {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = telemetry.NewMetrics()
	}
	s := &Service{o: o, shm: shm.Disabled{},
		extensions: []string{"model_repository", "model_configuration", "statistics", "classification"}}
	if o.SharedMemory != nil {
		s.shm = o.SharedMemory
		s.extensions = append(s.extensions, shm.Extension)
	}
	return s
}

// SetReady: the initial load has finished (every version in its final state).
func (s *Service) SetReady() { s.ready.Store(true) }

// Drain: shutdown began; ServerReady is false from now on.
func (s *Service) Drain() { s.draining.Store(true) }

// Tracing is the service's tracing (nil: off).
func (s *Service) Tracing() *telemetry.Tracing { return s.o.Tracing }

// Metrics are the service's counters.
func (s *Service) Metrics() *telemetry.Metrics { return s.o.Metrics }
