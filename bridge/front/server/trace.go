package server

// Triton's trace extension: what tracing is configured (one server-wide setting; a model name
// is accepted), fixed at start (--trace-otlp-endpoint).

import (
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// TraceSetting answers gRPC TraceSetting: the settings after the update (an update other
// than restating a value or clearing it is INVALID_ARGUMENT naming it).
func (s *Service) TraceSetting(req *inferencepb.TraceSettingRequest) (*inferencepb.TraceSettingResponse, error) {
	update := map[string][]string{}
	for name, v := range req.GetSettings() {
		update[name] = v.GetValue()
	}
	settings, err := s.o.Tracing.Update(update)
	if err != nil {
		return nil, err
	}
	resp := &inferencepb.TraceSettingResponse{Settings: map[string]*inferencepb.TraceSettingResponse_SettingValue{}}
	for name, values := range settings {
		resp.Settings[name] = &inferencepb.TraceSettingResponse_SettingValue{Value: values}
	}
	return resp, nil
}
