package server

// Health: ServerLive, ServerReady, ModelReady, and the grpc.health.v1 service (grpc.go) with
// per-model answers (a model's name as the service).

// ServerLive: the process answers.
func (s *Service) ServerLive() bool { return true }

// ServerReady: the initial load has finished (every version in its final state) and the
// server is not draining.
func (s *Service) ServerReady() bool { return s.ready.Load() && !s.draining.Load() }

// ModelReady: the version a request would get is READY, i.e. the backend that serves it has it
// open (NOT_FOUND for an unknown model or version).
func (s *Service) ModelReady(name, version string) (bool, error) {
	return s.o.Repository.Ready(name, version)
}
