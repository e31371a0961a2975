package server

import (
	"context"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func TestTraceSettingRPC(t *testing.T) {
	s := New(Options{})
	body, err := proto.Marshal(&inferencepb.TraceSettingRequest{ModelName: "m"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.handlers()["TraceSetting"]
	out, err := h(context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	resp := &inferencepb.TraceSettingResponse{}
	if err := proto.Unmarshal(out[0], resp); err != nil {
		t.Fatal(err)
	}
	if v := resp.GetSettings()["trace_level"].GetValue(); len(v) != 1 || v[0] != "OFF" {
		t.Fatalf("trace_level %q", v)
	}
	body, _ = proto.Marshal(&inferencepb.TraceSettingRequest{Settings: map[string]*inferencepb.TraceSettingRequest_SettingValue{
		"trace_rate": {Value: []string{"100"}}}})
	if _, err := h(context.Background(), body); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "'trace_rate' cannot be changed to [\"100\"]") {
		t.Fatalf("update: %v", err)
	}
	if _, err := h(context.Background(), []byte{0xff}); status.Code(err) != codes.Internal ||
		status.Convert(err).Message() != "Exception deserializing request!" {
		t.Fatalf("garbage: %v", err)
	}
}
