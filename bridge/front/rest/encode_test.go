package rest

// Unit tests of the REST codec's answer side (encode.go, protojson.go).

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

func le32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func TestEncodeResponseJSONAndBinary(t *testing.T) {
	resp := &request.Response{
		Model: "m", Version: "1", ID: "r1",
		Params: map[string]*inferencepb.InferParameter{"k": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 3}}},
		Outputs: []request.OutputTensor{
			{Name: "f", Datatype: "FP32", Shape: []int64{2, 2}, Data: le32(0.1, float32(math.NaN()), float32(math.Inf(1)), -2)},
			{Name: "i", Datatype: "INT64", Shape: []int64{2},
				Data: binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(1<<62+1)), math.MaxUint64)},
			{Name: "b", Datatype: "BOOL", Shape: []int64{2}, Data: []byte{1, 0}},
			{Name: "u", Datatype: "UINT8", Shape: []int64{1}, Data: []byte{255}},
			{Name: "h", Datatype: "BF16", Shape: []int64{1}, Data: []byte{0x80, 0x3f}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: []byte{1, 0, 0, 0, '"', 0, 0, 0, 0}},
			{Name: "d", Datatype: "FP64", Shape: []int64{1}, Data: binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1))},
		},
	}
	plan := &outputPlan{binary: map[string]bool{"h": true}}
	header, blobs, err := encodeInferResponse(resp, plan)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model_name":"m","model_version":"1","id":"r1","parameters":{"k":3},"outputs":[` +
		`{"name":"f","datatype":"FP32","shape":[2,2],"data":[0.1,NaN,Infinity,-2]},` +
		`{"name":"i","datatype":"INT64","shape":[2],"data":[4611686018427387905,-1]},` +
		`{"name":"b","datatype":"BOOL","shape":[2],"data":[true,false]},` +
		`{"name":"u","datatype":"UINT8","shape":[1],"data":[255]},` +
		`{"name":"h","datatype":"BF16","shape":[1],"parameters":{"binary_data_size":2}},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["\"",""]},` +
		`{"name":"d","datatype":"FP64","shape":[1],"data":[0.1]}]}`
	if string(header) != want {
		t.Fatalf("header\n got  %s\n want %s", header, want)
	}
	if len(blobs) != 1 || !bytes.Equal(blobs[0], []byte{0x80, 0x3f}) {
		t.Fatalf("blobs %v", blobs)
	}
	// Everything binary; an output in shared memory has neither data nor binary bytes, and
	// (Triton's HTTP answer) no shared-memory parameters: other parameters stay.
	resp.Outputs[0].Params = map[string]*inferencepb.InferParameter{
		paramShmRegion:            {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}},
		"shared_memory_byte_size": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 16}},
		"other":                   {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}},
	}
	resp.Outputs[0].Data = []byte{}
	header, blobs, err = encodeInferResponse(resp, &outputPlan{allBinary: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(header), `{"name":"f","datatype":"FP32","shape":[2,2],"parameters":{"other":true}}`) || len(blobs) != 6 {
		t.Fatalf("all binary: %s (%d blobs)", header, len(blobs))
	}
	if !strings.Contains(string(header), `{"name":"i","datatype":"INT64","shape":[2],"parameters":{"binary_data_size":16}}`) {
		t.Fatalf("binary_data_size: %s", header)
	}
}

func TestEncodeResponseRefusals(t *testing.T) {
	resp := &request.Response{Model: "m",
		Outputs: []request.OutputTensor{{Name: "h", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0, 0x3c}}}}
	_, _, err := encodeInferResponse(resp, &outputPlan{})
	if re, ok := err.(*status.HTTPError); !ok || re.Status != 400 || re.Msg != "output 'h': FP16 data cannot be sent as JSON; "+
		"request it with parameters.binary_data=true (or the request parameter binary_data_output=true)" {
		t.Fatalf("FP16 as JSON: %v", err)
	}
	resp.Outputs[0].Datatype, resp.Outputs[0].Data = "BYTES", []byte{1, 0, 0, 0, 0xff}
	_, _, err = encodeInferResponse(resp, &outputPlan{})
	if err == nil || !strings.HasPrefix(err.Error(), "output 'h': element 0 is not UTF-8 text") {
		t.Fatalf("non-UTF-8 BYTES: %v", err)
	}
	resp.Outputs[0].Datatype, resp.Outputs[0].Data = "FP32", []byte{1, 2}
	_, _, err = encodeInferResponse(resp, &outputPlan{})
	if re, ok := err.(*status.HTTPError); !ok || re.Status != 500 {
		t.Fatalf("short FP32 bytes: %v", err)
	}
}

func TestProtoJSONNumbersAndNames(t *testing.T) {
	m := &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{{
		Name: "m", Version: "1", InferenceCount: 1 << 60,
		InferenceStats: &inferencepb.InferStatistics{Success: &inferencepb.StatisticDuration{Count: 2, Ns: 30}},
	}}}
	got := string(appendJSONValue(nil, protoJSON(m.ProtoReflect())))
	for _, part := range []string{`"model_stats":[{"name":"m","version":"1","last_inference":0,"inference_count":1152921504606846976`,
		`"inference_stats":{"success":{"count":2,"ns":30}}`, `"batch_stats":[]`} {
		if !strings.Contains(got, part) {
			t.Errorf("%s lacks %s", got, part)
		}
	}
}
