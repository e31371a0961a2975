package server

// Metadata and configuration, from the manifest in Go: ServerMetadata, ModelMetadata and
// ModelConfig, for every model whichever engine serves it.

import (
	"slices"
	"strconv"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/request"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// ServerMetadata: name, version and the extensions this server implements.
func (s *Service) ServerMetadata() *inferencepb.ServerMetadataResponse {
	return &inferencepb.ServerMetadataResponse{Name: ServerName, Version: Version, Extensions: slices.Clone(s.extensions)}
}

func tensorMetadata(specs []*jaxportv1.TensorSpec) []*inferencepb.ModelMetadataResponse_TensorMetadata {
	out := make([]*inferencepb.ModelMetadataResponse_TensorMetadata, len(specs))
	for i, t := range specs {
		out[i] = &inferencepb.ModelMetadataResponse_TensorMetadata{Name: t.GetName(),
			Datatype: t.GetDtype().GetDatatype(), Shape: slices.Clone(t.GetShape())}
	}
	return out
}

// ModelMetadata: the version's inputs and outputs (-1: the batch dimension or a symbolic one),
// and the versions: the one asked for, or every READY version of the model.
func (s *Service) ModelMetadata(name, version string) (*inferencepb.ModelMetadataResponse, error) {
	model, err := s.o.Repository.Get(name, version)
	if err != nil {
		return nil, err
	}
	defer model.Done()
	versions := []string{model.Version}
	if version == "" {
		serving, err := s.o.Repository.Serving(name)
		if err != nil {
			return nil, err
		}
		versions = versions[:0]
		for _, m := range serving {
			versions = append(versions, m.Version)
		}
	}
	return &inferencepb.ModelMetadataResponse{Name: model.Name, Versions: versions, Platform: Platform,
		Inputs: tensorMetadata(model.Manifest.GetInputs()), Outputs: tensorMetadata(model.Manifest.GetOutputs())}, nil
}

// ModelConfig: the version as Triton's ModelConfig describes a model, from its manifest:
// max_batch_size (the largest exported batch size; 0 unbatched), inputs and outputs (dims
// without the batch dimension of a batched model; label_filename where labels were read),
// backend `jaxport-<engine>`, dynamic_batching as the model batches, and parameters: engine
// (native, exported, pjrt), reason (why not native), schema_version, and for symbolic
// dimensions dims (every dimension's rule), buckets (the sizes served, when bucket programs
// serve it) and padding (dimension=mask input).
func (s *Service) ModelConfig(name, version string) (*inferencepb.ModelConfigResponse, error) {
	model, err := s.o.Repository.Get(name, version)
	if err != nil {
		return nil, err
	}
	defer model.Done()
	return &inferencepb.ModelConfigResponse{Config: Config(model)}, nil
}

// Config is a model version's ModelConfig.
func Config(model *dispatch.Model) *inferencepb.ModelConfig {
	m := model.Manifest
	sizes := model.Sig.BatchSizes()
	batched := len(sizes) > 0
	dims := func(t *jaxportv1.TensorSpec) []int64 {
		shape := t.GetShape()
		if batched && len(shape) > 0 && shape[0] == -1 {
			return slices.Clone(shape[1:])
		}
		return slices.Clone(shape)
	}
	dataType := func(t *jaxportv1.TensorSpec) inferencepb.DataType {
		return inferencepb.DataType(inferencepb.DataType_value["TYPE_"+t.GetDtype().GetDatatype()])
	}
	cfg := &inferencepb.ModelConfig{Name: model.Name, Platform: Platform, Backend: "jaxport-" + model.Engine,
		Parameters: map[string]*inferencepb.ModelParameter{}}
	if batched {
		cfg.MaxBatchSize = int32(slices.Max(sizes))
	}
	for _, t := range m.GetInputs() {
		cfg.Input = append(cfg.Input, &inferencepb.ModelInput{Name: t.GetName(), DataType: dataType(t), Dims: dims(t)})
	}
	labels := model.Sig.LabelFiles()
	for _, t := range m.GetOutputs() {
		cfg.Output = append(cfg.Output, &inferencepb.ModelOutput{Name: t.GetName(), DataType: dataType(t), Dims: dims(t),
			LabelFilename: labels[t.GetName()]})
	}
	param := func(k, v string) { cfg.Parameters[k] = &inferencepb.ModelParameter{StringValue: v} }
	param("engine", model.Engine)
	if model.Reason != "" {
		param("reason", model.Reason)
	}
	param("schema_version", strconv.Itoa(int(m.GetSchemaVersion())))
	if model.Sig.Symbolic() {
		param("dims", request.DimsText(m.GetDimensions()))
		if model.Engine != dispatch.EngineExported {
			if b := model.Sig.BucketsText(); b != "" {
				param("buckets", b)
				if p := model.Sig.PaddingText(); p != "" {
					param("padding", p)
				}
			}
		}
	}
	if b := model.Batching; b != nil {
		db := &inferencepb.ModelDynamicBatching{MaxQueueDelayMicroseconds: uint64(b.MaxQueueDelay.Microseconds())}
		for _, p := range b.Preferred {
			db.PreferredBatchSize = append(db.PreferredBatchSize, int32(p))
		}
		cfg.SchedulingChoice = &inferencepb.ModelConfig_DynamicBatching{DynamicBatching: db}
	}
	return cfg
}
