package server

// Inference: ModelInfer and one message of ModelStreamInfer, for the request read once at
// the edge (request.Parse over gRPC, REST's JSON decoded into the same Request).

import (
	"context"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

// Triton's stream parameters.
const (
	enableEmptyFinal = "triton_enable_empty_final_response"
	finalResponse    = "triton_final_response"
)

// Infer answers one ModelInfer: the version the request names, then its one validation,
// execution and response (dispatch.Model.Infer).
func (s *Service) Infer(ctx context.Context, req *request.Request) (*request.Response, error) {
	model, err := s.o.Repository.Get(req.Model, req.Version)
	if err != nil {
		return nil, err
	}
	defer model.Done()
	return model.Infer(ctx, req, s.shm)
}

// StreamItem answers one message of a ModelStreamInfer call as Triton's streams do: a failed
// request is a response with error_message (`CODE: message`) and the stream goes on; every
// response is marked final (triton_final_response).
func (s *Service) StreamItem(ctx context.Context, req *request.Request) (string, *request.Response) {
	if p, ok := req.Params[enableEmptyFinal]; ok {
		if _, isBool := p.GetParameterChoice().(*inferencepb.InferParameter_BoolParam); !isBool {
			return s.streamFailure(req, status.New(codes.InvalidArgument,
				"invalid value type for '"+enableEmptyFinal+"' parameter, expected bool_param"))
		}
	}
	resp, err := s.Infer(ctx, req)
	if err != nil {
		return s.streamFailure(req, err)
	}
	markFinal(resp)
	return "", resp
}

func (s *Service) streamFailure(req *request.Request, err error) (string, *request.Response) {
	st := status.Convert(err)
	resp := &request.Response{Model: req.Model, Version: req.Version, ID: req.ID}
	markFinal(resp)
	return status.CodeName(st.Code()) + ": " + st.Message(), resp
}

// markFinal: `triton_final_response: true` on every stream response, success or error, asked
// for or not (Triton's stream handler sets it whenever a response completes its request; models
// here are never decoupled, so the one response is also the last).
// triton_enable_empty_final_response only asks for an extra empty response after a decoupled
// model's last one: nothing to send here.
func markFinal(resp *request.Response) {
	if resp.Params == nil {
		resp.Params = request.Params{}
	}
	resp.Params[finalResponse] = &inferencepb.InferParameter{
		ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}}
}
