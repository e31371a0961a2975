package server

// Stream responses as Triton writes them: every response carries triton_final_response=true
// (success or error, asked for or not; jaxport's models are never decoupled, so each response
// completes its request), an error response keeps the request's id, model and version, and
// triton_enable_empty_final_response must be a bool.

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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

// A ModelStreamInfer call over a real gRPC server: a message whose
// triton_enable_empty_final_response is not a bool (a string, an int) is answered in place,
// INVALID_ARGUMENT naming the parameter, before any model is looked up; the stream goes on, so
// the next message reaches the repository (NOT_FOUND here, no models) and the call ends OK.
func TestANonBoolEmptyFinalFailsOnlyItsStreamMessage(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(Codec()))
	srv.RegisterService(New(Options{Repository: noModels{}}).ServiceDesc(), struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := inferencepb.NewGRPCInferenceServiceClient(cc).ModelStreamInfer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	refused := "INVALID_ARGUMENT: invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param"
	messages := []struct {
		id    string
		param *inferencepb.InferParameter
		want  string // the error_message, or its prefix for NOT_FOUND
	}{
		{"s1", &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "true"}}, refused},
		{"s2", boolParam(true), "NOT_FOUND: "},
		{"s3", &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 1}}, refused},
		{"s4", nil, "NOT_FOUND: "},
	}
	for _, m := range messages {
		req := &inferencepb.ModelInferRequest{ModelName: "nope", Id: m.id}
		if m.param != nil {
			req.Parameters = map[string]*inferencepb.InferParameter{enableEmptyFinal: m.param}
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for _, m := range messages {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: the stream ended: %v", m.id, err)
		}
		msg := resp.GetErrorMessage()
		if (m.want == refused && msg != refused) || !strings.HasPrefix(msg, m.want) {
			t.Fatalf("%s: error_message %q, want %q", m.id, msg, m.want)
		}
		if resp.GetInferResponse().GetId() != m.id {
			t.Fatalf("%s: answered as %q: out of order", m.id, resp.GetInferResponse().GetId())
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("the call did not end OK after its last message: %v", err)
	}
}
