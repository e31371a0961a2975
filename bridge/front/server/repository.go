package server

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

// RepositoryIndex: every model version with its state and reason (ready ones only when
// asked). This server has one repository, named "".
func (s *Service) RepositoryIndex(req *inferencepb.RepositoryIndexRequest) (*inferencepb.RepositoryIndexResponse, error) {
	if req.GetRepositoryName() != "" {
		return nil, status.Errorf(codes.NotFound, "unknown repository '%s': this server has one repository; send an empty repository_name",
			status.Clip(req.GetRepositoryName(), false))
	}
	out := &inferencepb.RepositoryIndexResponse{}
	for _, e := range s.o.Repository.Index(req.GetReady()) {
		out.Models = append(out.Models, &inferencepb.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version,
			State: e.State, Reason: e.Reason})
	}
	return out, nil
}

// RepositoryModelLoad: (re)load a model from the repository, as the control mode allows.
// Triton's load parameters (a config override, file: uploads) are refused: the manifest is
// the model's configuration and its files are checksummed by the exporter.
func (s *Service) RepositoryModelLoad(ctx context.Context, req *inferencepb.RepositoryModelLoadRequest) error {
	if req.GetRepositoryName() != "" {
		return status.Errorf(codes.NotFound, "unknown repository '%s'", status.Clip(req.GetRepositoryName(), false))
	}
	if len(req.GetParameters()) > 0 {
		names := make([]string, 0, len(req.GetParameters()))
		for k := range req.GetParameters() {
			names = append(names, k)
		}
		sort.Strings(names)
		return status.Invalid("load parameters are not supported (got: %s): Triton's 'config' override "+
			"and 'file:' uploads are refused here, because the artifact's manifest is the "+
			"model configuration and its files are checksummed by the exporter; put a new "+
			"version directory in the repository and load the model without parameters "+
			"(docs/bridge.md, Model repository)", status.Clip(strings.Join(names, ", "), false))
	}
	return s.o.Repository.Load(ctx, req.GetModelName())
}

// RepositoryModelUnload: stop serving every version of a model, as the control mode allows.
func (s *Service) RepositoryModelUnload(ctx context.Context, req *inferencepb.RepositoryModelUnloadRequest) error {
	if req.GetRepositoryName() != "" {
		return status.Errorf(codes.NotFound, "unknown repository '%s'", status.Clip(req.GetRepositoryName(), false))
	}
	return s.o.Repository.Unload(ctx, req.GetModelName())
}

var _ = fmt.Sprintf
