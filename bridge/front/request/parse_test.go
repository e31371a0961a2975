package request

import (
	"bytes"
	"slices"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func TestParseReadsEveryFieldOnceWithRawContentsAsViews(t *testing.T) {
	in := &inferencepb.ModelInferRequest{ModelName: "mlp", ModelVersion: "3", Id: "r1",
		Parameters: map[string]*inferencepb.InferParameter{"p": {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}}},
		Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
			{Name: "x", Datatype: "FP32", Shape: []int64{2, -3}, Parameters: map[string]*inferencepb.InferParameter{
				"shared_memory_region": {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}}}},
			{Name: "t", Datatype: "INT32", Shape: []int64{2}, Contents: &inferencepb.InferTensorContents{IntContents: []int32{1, -2}}}},
		Outputs:          []*inferencepb.ModelInferRequest_InferRequestedOutputTensor{{Name: "y", Parameters: map[string]*inferencepb.InferParameter{"classification": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 2}}}}},
		RawInputContents: [][]byte{{1, 2, 3}, {}}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "mlp" || r.Version != "3" || r.ID != "r1" || !r.Params["p"].GetBoolParam() {
		t.Fatalf("header %+v", r)
	}
	if len(r.Inputs) != 2 || r.Inputs[0].Name != "x" || !slices.Equal(r.Inputs[0].Shape, []int64{2, -3}) ||
		r.Inputs[0].Params["shared_memory_region"].GetStringParam() != "r" ||
		!slices.Equal(r.Inputs[1].Contents.GetIntContents(), []int32{1, -2}) {
		t.Fatalf("inputs %+v", r.Inputs)
	}
	if len(r.Outputs) != 1 || r.Outputs[0].Params["classification"].GetInt64Param() != 2 {
		t.Fatalf("outputs %+v", r.Outputs)
	}
	if len(r.Raw) != 2 || !slices.Equal(r.Raw[0], []byte{1, 2, 3}) || r.Raw[1] == nil || len(r.Raw[1]) != 0 {
		t.Fatalf("raw %v", r.Raw)
	}
	at := bytes.Index(b, []byte{1, 2, 3}) // the raw bytes: a view, not a copy
	if &r.Raw[0][0] != &b[at] {
		t.Fatal("raw contents copied; want views into the message")
	}
	// Unpacked shape entries (as older encoders write them) and unknown fields are read too.
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	m = protowire.AppendString(m, "mlp")
	var tensor []byte
	tensor = protowire.AppendTag(tensor, 3, protowire.VarintType)
	tensor = protowire.AppendVarint(tensor, 4)
	tensor = protowire.AppendTag(tensor, 3, protowire.VarintType)
	tensor = protowire.AppendVarint(tensor, 5)
	tensor = protowire.AppendTag(tensor, 99, protowire.Fixed32Type)
	tensor = protowire.AppendFixed32(tensor, 7)
	m = protowire.AppendTag(m, 5, protowire.BytesType)
	m = protowire.AppendBytes(m, tensor)
	m = protowire.AppendTag(m, 42, protowire.VarintType)
	m = protowire.AppendVarint(m, 1)
	if r, err := Parse(m); err != nil || !slices.Equal(r.Inputs[0].Shape, []int64{4, 5}) {
		t.Fatalf("unpacked shape: %+v %v", r, err)
	}
}

func TestParseRefusesWhatIsNoRequest(t *testing.T) {
	valid, _ := proto.Marshal(&inferencepb.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{make([]byte, 16)}})
	var badUTF8 []byte
	badUTF8 = protowire.AppendTag(badUTF8, 1, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, []byte{0xff, 0xfe})
	for name, b := range map[string][]byte{
		"truncated": valid[:len(valid)-3], "bad tag": {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"name not UTF-8": badUTF8, "length past the end": {0x0a, 0x7f, 'a'},
	} {
		_, err := Parse(b)
		if status.Code(err) != codes.Internal || status.Convert(err).Message() != DeserializeFailed {
			t.Errorf("%s: %v", name, err)
		}
	}
	if r, err := Parse(nil); err != nil || r.Model != "" {
		t.Fatalf("empty message: %+v %v", r, err)
	}
}

// FuzzParse: no message makes Parse panic; what it accepts, the generated code accepts too.
func FuzzParse(f *testing.F) {
	b, _ := proto.Marshal(&inferencepb.ModelInferRequest{ModelName: "m", Inputs: []*inferencepb.ModelInferRequest_InferInputTensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}}}, RawInputContents: [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		var pb inferencepb.ModelInferRequest
		if proto.Unmarshal(b, &pb) == nil && (pb.GetModelName() != r.Model || len(pb.GetInputs()) != len(r.Inputs)) {
			t.Fatalf("Parse %+v, proto %v", r, &pb)
		}
	})
}
