package main

// Unit tests of the REST codec's answer side (rest_encode.go, rest_protojson.go).

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

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
	resp := &inferencepb.ModelInferResponse{
		ModelName: "m", ModelVersion: "1", Id: "r1",
		Parameters: map[string]*inferencepb.InferParameter{"k": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 3}}},
		Outputs: []*inferencepb.ModelInferResponse_InferOutputTensor{
			{Name: "f", Datatype: "FP32", Shape: []int64{2, 2}},
			{Name: "i", Datatype: "INT64", Shape: []int64{2}},
			{Name: "b", Datatype: "BOOL", Shape: []int64{2}},
			{Name: "u", Datatype: "UINT8", Shape: []int64{1}},
			{Name: "h", Datatype: "BF16", Shape: []int64{1}},
			{Name: "s", Datatype: "BYTES", Shape: []int64{2}},
			{Name: "d", Datatype: "FP64", Shape: []int64{1}},
		},
		RawOutputContents: [][]byte{
			le32(0.1, float32(math.NaN()), float32(math.Inf(1)), -2),
			binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(1<<62+1)), math.MaxUint64),
			{1, 0},
			{255},
			{0x80, 0x3f},
			{1, 0, 0, 0, '"', 0, 0, 0, 0},
			binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.1)),
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
	resp.Outputs[0].Parameters = map[string]*inferencepb.InferParameter{
		paramShmRegion:            {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}},
		"shared_memory_byte_size": {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 16}},
		"other":                   {ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}},
	}
	resp.RawOutputContents[0] = nil
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
	resp := &inferencepb.ModelInferResponse{ModelName: "m",
		Outputs:           []*inferencepb.ModelInferResponse_InferOutputTensor{{Name: "h", Datatype: "FP16", Shape: []int64{1}}},
		RawOutputContents: [][]byte{{0, 0x3c}}}
	_, _, err := encodeInferResponse(resp, &outputPlan{})
	if re, ok := err.(*restError); !ok || re.status != 400 || re.msg != "output 'h': FP16 data cannot be sent as JSON; "+
		"request it with parameters.binary_data=true (or the request parameter binary_data_output=true)" {
		t.Fatalf("FP16 as JSON: %v", err)
	}
	resp.Outputs[0].Datatype, resp.RawOutputContents[0] = "BYTES", []byte{1, 0, 0, 0, 0xff}
	_, _, err = encodeInferResponse(resp, &outputPlan{})
	if err == nil || !strings.HasPrefix(err.Error(), "output 'h': element 0 is not UTF-8 text") {
		t.Fatalf("non-UTF-8 BYTES: %v", err)
	}
	resp.Outputs[0].Datatype, resp.RawOutputContents[0] = "FP32", []byte{1, 2}
	_, _, err = encodeInferResponse(resp, &outputPlan{})
	if re, ok := err.(*restError); !ok || re.status != 500 {
		t.Fatalf("short FP32 bytes: %v", err)
	}
}

func TestTypedOutputContents(t *testing.T) {
	resp := &inferencepb.ModelInferResponse{ModelName: "m",
		Outputs: []*inferencepb.ModelInferResponse_InferOutputTensor{{Name: "i", Datatype: "INT16", Shape: []int64{2},
			Contents: &inferencepb.InferTensorContents{IntContents: []int32{-3, 4}}}}}
	header, _, err := encodeInferResponse(resp, &outputPlan{})
	if err != nil || !strings.Contains(string(header), `"data":[-3,4]`) {
		t.Fatalf("%s %v", header, err)
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
