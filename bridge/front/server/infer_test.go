package server

// Stream responses as Triton writes them: every response carries triton_final_response=true
// (success or error, asked for or not; jaxport's models are never decoupled, so each response
// completes its request), an error response keeps the request's id, model and version, and
// triton_enable_empty_final_response must be a bool.

import (
	"context"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

// noModels is a repository without models: every Get is NOT_FOUND.
type noModels struct{}

func (noModels) Get(name, _ string) (*dispatch.Model, error) {
	return nil, status.New(codes.NotFound, "Request for unknown model: '"+name+"' is not found")
}
func (noModels) Ready(string, string) (bool, error)        { return false, nil }
func (noModels) Serving(string) ([]*dispatch.Model, error) { return nil, nil }
func (noModels) Index(bool) []Entry                        { return nil }
func (noModels) Load(context.Context, string) error        { return nil }
func (noModels) Unload(context.Context, string) error      { return nil }
func (noModels) Metrics() []telemetry.Model                { return nil }

func boolParam(v bool) *inferencepb.InferParameter {
	return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: v}}
}

func TestEveryStreamResponseIsMarkedFinal(t *testing.T) {
	s := New(Options{Repository: noModels{}})
	for _, params := range []request.Params{nil, {enableEmptyFinal: boolParam(false)}, {enableEmptyFinal: boolParam(true)}} {
		msg, resp := s.StreamItem(context.Background(), &request.Request{Model: "nope", Version: "3", ID: "r7", Params: params})
		if !strings.HasPrefix(msg, "NOT_FOUND: ") {
			t.Fatalf("%v: error message %q", params, msg)
		}
		if resp.ID != "r7" || resp.Model != "nope" || resp.Version != "3" {
			t.Fatalf("%v: the error response lost the request's id/model/version: %+v", params, resp)
		}
		if p := resp.Params[finalResponse]; p == nil || !p.GetBoolParam() {
			t.Fatalf("%v: no %s=true on the response: %v", params, finalResponse, resp.Params)
		}
	}
	msg, resp := s.StreamItem(context.Background(), &request.Request{Model: "nope", ID: "r8",
		Params: request.Params{enableEmptyFinal: {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "yes"}}}})
	if msg != "INVALID_ARGUMENT: invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param" {
		t.Fatalf("a string %s: %q", enableEmptyFinal, msg)
	}
	if p := resp.Params[finalResponse]; p == nil || !p.GetBoolParam() || resp.ID != "r8" {
		t.Fatalf("the refusal is a final response with the request's id: %+v", resp)
	}
}
