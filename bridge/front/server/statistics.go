package server

import (
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// ModelStatistics: Triton's per-version counters of the READY versions asked for (name "" =
// every model; version "" = every READY version of name), as the front counted them.
func (s *Service) ModelStatistics(name, version string) (*inferencepb.ModelStatisticsResponse, error) {
	out := &inferencepb.ModelStatisticsResponse{}
	if name != "" && version != "" {
		model, err := s.o.Repository.Get(name, version)
		if err != nil {
			return nil, err
		}
		defer model.Done()
		out.ModelStats = append(out.ModelStats, model.Stats.Statistics(model.Name, model.Version))
		return out, nil
	}
	if name != "" {
		model, err := s.o.Repository.Get(name, "") // NOT_FOUND / UNAVAILABLE as for any request
		if err != nil {
			return nil, err
		}
		model.Done()
	}
	serving, err := s.o.Repository.Serving(name)
	if err != nil {
		return nil, err
	}
	for _, m := range serving {
		out.ModelStats = append(out.ModelStats, m.Stats.Statistics(m.Name, m.Version))
	}
	return out, nil
}
