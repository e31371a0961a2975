package server

import (
	"net/http"

	"github.com/jaxport/jaxport/bridge/front/telemetry"
)

// MetricsHandler serves /metrics: every family of package telemetry for every version of the
// repository, the admission outcomes, and the backends' own families.
func (s *Service) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		var admission map[[2]string]uint64
		if d := s.o.Dispatcher; d != nil {
			admission = d.Admission().TotalsByModel()
		}
		extra := ""
		if s.o.Extra != nil {
			extra = s.o.Extra()
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		var models []telemetry.Model
		if s.o.Repository != nil {
			models = s.o.Repository.Metrics()
		}
		s.o.Metrics.Write(w, models, admission, extra)
	})
	return mux
}
