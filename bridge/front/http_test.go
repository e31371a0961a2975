package main

// Unit tests of the REST codec (pure: no server). The live REST tests, against a real front
// and workers, are tests/front/test_rest.py.

import (
	"bytes"
	"encoding/binary"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

func TestParseJSONValues(t *testing.T) {
	v, err := parseJSON([]byte(` {"a": [1, -2.5e3, NaN, Infinity, -Infinity], "b": "x\"\u00e9\ud83d\ude00\n", "c": [true, false, null], "d": {}} `))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*jsonObject)
	if !reflect.DeepEqual(o.keys, []string{"a", "b", "c", "d"}) {
		t.Fatalf("keys %v", o.keys)
	}
	want := []any{jsonNumber("1"), jsonNumber("-2.5e3"), jsonNumber("NaN"), jsonNumber("Infinity"), jsonNumber("-Infinity")}
	if !reflect.DeepEqual(o.values["a"], want) {
		t.Fatalf("a = %#v", o.values["a"])
	}
	if o.values["b"] != "x\"é😀\n" {
		t.Fatalf("b = %q", o.values["b"])
	}
	if !reflect.DeepEqual(o.values["c"], []any{true, false, nil}) {
		t.Fatalf("c = %#v", o.values["c"])
	}
	// What is written reads back the same.
	again, err := parseJSON(appendJSONValue(nil, v))
	if err != nil || !reflect.DeepEqual(again, v) {
		t.Fatalf("round trip: %v %#v", err, again)
	}
}

func TestParseJSONErrors(t *testing.T) {
	for text, msg := range map[string]string{
		``:                         "invalid JSON at byte 0: unexpected end of input",
		`{"a": 1,}`:                "invalid JSON at byte 8: expected a string key",
		`{"a": 1} x`:               "invalid JSON at byte 9: unexpected data after the JSON value",
		`{"a": 1, "a": 2}`:         `invalid JSON at byte 9: duplicate key "a"`,
		`[01]`:                     "invalid JSON at byte 2: expected ',' or ']' in an array",
		`[1.]`:                     "invalid JSON at byte 3: invalid number: no digit after '.'",
		`["a`:                      "invalid JSON at byte 3: unterminated string",
		"[\"\x01\"]":               "invalid JSON at byte 2: control character in a string",
		`["\ud800"]`:               `invalid JSON at byte 8: unpaired UTF-16 surrogate in a \u escape`,
		`[nan]`:                    "invalid JSON at byte 1: unexpected character 'n'",
		strings.Repeat("[", 200):   "invalid JSON at byte 128: nested deeper than 128 levels",
		"[\"\xff\"]":               "invalid JSON at byte 2: string is not valid UTF-8",
		`{"a" 1}`:                  "invalid JSON at byte 5: expected ':' after an object key",
		`["\q"]`:                   `invalid JSON at byte 4: invalid escape '\q'`,
		`[1e]`:                     "invalid JSON at byte 3: invalid number: no digit in the exponent",
		`{"inputs": [1, 2}`:        "invalid JSON at byte 16: expected ',' or ']' in an array",
		`-`:                        "invalid JSON at byte 0: invalid number",
		`{"a": tru}`:               "invalid JSON at byte 6: unexpected character 't'",
		`{"a": "\u12"}`:            `invalid JSON at byte 9: invalid \u escape`,
		`{"k": [1, 2, 3]`:          "invalid JSON at byte 15: unexpected end of input in an object",
		`[1, 2`:                    "invalid JSON at byte 5: unexpected end of input in an array",
		`{"a": "b", "c": {"d": ]}`: "invalid JSON at byte 22: unexpected character ']'",
	} {
		_, err := parseJSON([]byte(text))
		if err == nil || err.Error() != msg {
			t.Errorf("%q: got %v, want %q", text, err, msg)
		}
	}
}

func mustDecode(t *testing.T, body string, jsonLength int64) (*inferencepb.ModelInferRequest, *outputPlan) {
	t.Helper()
	req, plan, err := decodeInferRequest([]byte(body), jsonLength, "m", "2")
	if err != nil {
		t.Fatal(err)
	}
	return req, plan
}

func TestDecodeJSONInputsAsTypedContents(t *testing.T) {
	req, plan := mustDecode(t, `{"id": "r1", "parameters": {"flag": true, "n": 7, "big": 18446744073709551615, "x": 0.5, "s": "v"},
		"inputs": [
		  {"name": "f", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2.5], [NaN, -Infinity]]},
		  {"name": "i8", "shape": [2], "datatype": "INT8", "data": [-128, 127]},
		  {"name": "u64", "shape": [1], "datatype": "UINT64", "data": [18446744073709551615]},
		  {"name": "i64", "shape": [1], "datatype": "INT64", "data": [9007199254740993]},
		  {"name": "b", "shape": [2], "datatype": "BOOL", "data": [true, false], "parameters": {"p": "q"}},
		  {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hé"]},
		  {"name": "d", "shape": [1], "datatype": "FP64", "data": [0.1]},
		  {"name": "u16", "shape": [1], "datatype": "UINT16", "data": [65535]}],
		"outputs": [{"name": "y", "parameters": {"classification": 2}}, {"name": "z", "parameters": {"binary_data": true}}]}`, -1)
	if req.ModelName != "m" || req.ModelVersion != "2" || req.Id != "r1" || len(req.RawInputContents) != 0 {
		t.Fatalf("request %v", req)
	}
	p := req.Parameters
	if !p["flag"].GetBoolParam() || p["n"].GetInt64Param() != 7 || p["big"].GetUint64Param() != math.MaxUint64 ||
		p["x"].GetDoubleParam() != 0.5 || p["s"].GetStringParam() != "v" {
		t.Fatalf("parameters %v", p)
	}
	in := req.Inputs
	f := in[0].Contents.Fp32Contents
	if len(f) != 4 || f[0] != 1 || f[1] != 2.5 || !math.IsNaN(float64(f[2])) || !math.IsInf(float64(f[3]), -1) {
		t.Fatalf("FP32 %v", f)
	}
	if !reflect.DeepEqual(in[0].Shape, []int64{2, 2}) || in[0].Datatype != "FP32" {
		t.Fatalf("tensor %v", in[0])
	}
	if !reflect.DeepEqual(in[1].Contents.IntContents, []int32{-128, 127}) ||
		!reflect.DeepEqual(in[2].Contents.Uint64Contents, []uint64{math.MaxUint64}) ||
		!reflect.DeepEqual(in[3].Contents.Int64Contents, []int64{9007199254740993}) ||
		!reflect.DeepEqual(in[4].Contents.BoolContents, []bool{true, false}) ||
		in[4].Parameters["p"].GetStringParam() != "q" ||
		!reflect.DeepEqual(in[5].Contents.BytesContents, [][]byte{[]byte("hé")}) ||
		!reflect.DeepEqual(in[6].Contents.Fp64Contents, []float64{0.1}) ||
		!reflect.DeepEqual(in[7].Contents.UintContents, []uint32{65535}) {
		t.Fatalf("typed contents %v", in)
	}
	if len(req.Outputs) != 2 || req.Outputs[0].Parameters["classification"].GetInt64Param() != 2 {
		t.Fatalf("outputs %v", req.Outputs)
	}
	if _, forwarded := req.Outputs[1].Parameters[paramBinaryData]; forwarded {
		t.Fatal("binary_data is the codec's parameter, not forwarded")
	}
	if plan.isBinary("y") || !plan.isBinary("z") || plan.isBinary("other") {
		t.Fatalf("plan %+v", plan)
	}
}

func TestDecodeBinaryInputsMakeEveryInputRaw(t *testing.T) {
	header := `{"parameters": {"binary_data_output": true}, "inputs": [
		{"name": "a", "shape": [2], "datatype": "UINT32", "parameters": {"binary_data_size": 8}},
		{"name": "j", "shape": [3], "datatype": "INT16", "data": [-1, 2, 300]},
		{"name": "h", "shape": [1], "datatype": "BF16", "parameters": {"binary_data_size": 2}},
		{"name": "s", "shape": [2], "datatype": "BYTES", "data": ["ab", ""]},
		{"name": "shm", "shape": [1], "datatype": "FP32", "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 4}}]}`
	blob := []byte{1, 0, 0, 0, 2, 0, 0, 0, 0x80, 0x3f}
	body := append([]byte(header), blob...)
	req, plan, err := decodeInferRequest(body, int64(len(header)), "m", "")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{
		{1, 0, 0, 0, 2, 0, 0, 0},
		{0xff, 0xff, 2, 0, 0x2c, 1},
		{0x80, 0x3f},
		{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0},
	}
	if !reflect.DeepEqual(req.RawInputContents, want) {
		t.Fatalf("raw %v, want %v", req.RawInputContents, want)
	}
	for _, in := range req.Inputs {
		if in.Contents != nil {
			t.Fatalf("input %s has typed contents beside raw ones", in.Name)
		}
	}
	if _, ok := req.Inputs[0].Parameters[paramBinaryDataSize]; ok {
		t.Fatal("binary_data_size forwarded")
	}
	if req.Inputs[4].Parameters[paramShmRegion].GetStringParam() != "r" {
		t.Fatal("shared memory parameters not forwarded")
	}
	if _, ok := req.Parameters[paramBinaryDataOutput]; ok || !plan.isBinary("anything") {
		t.Fatalf("binary_data_output: parameters %v plan %+v", req.Parameters, plan)
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	one := func(input string) string { return `{"inputs": [` + input + `]}` }
	for _, c := range []struct{ body, msg string }{
		{`[1]`, "request body: expected a JSON object, got an array"},
		{`{}`, `request: "inputs" is required`},
		{`{"inputs": {}}`, "inputs: expected an array of objects, got an object"},
		{`{"id": 5, "inputs": []}`, "request.id: expected a string, got 5"},
		{one(`3`), "inputs[0]: expected a JSON object, got 3"},
		{one(`{"shape": [1], "datatype": "FP32", "data": [1]}`), `inputs[0]: "name" is required`},
		{one(`{"name": "x", "shape": [1], "data": [1]}`), `inputs[0]: "datatype" is required`},
		{one(`{"name": "x", "datatype": "FP32", "data": [1]}`), `inputs[0]: "shape" is required`},
		{one(`{"name": "x", "shape": "2", "datatype": "FP32", "data": [1]}`), `input 'x': shape: expected an array of integers, got "2"`},
		{one(`{"name": "x", "shape": [2.5], "datatype": "FP32", "data": [1]}`), "input 'x': shape[0]: expected an integer, got 2.5"},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32"}`), `input 'x': no "data" and no parameters.binary_data_size (or shared memory parameters)`},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "data": ["a"]}`), `input 'x': data element 0: expected a number for FP32, got "a"`},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "data": [1e39]}`), "input 'x': data element 0: 1e39 does not fit FP32"},
		{one(`{"name": "x", "shape": [2], "datatype": "INT8", "data": [1, 128]}`), "input 'x': data element 1: 128 is not an integer that fits INT8"},
		{one(`{"name": "x", "shape": [1], "datatype": "UINT8", "data": [-1]}`), "input 'x': data element 0: -1 is not an integer that fits UINT8"},
		{one(`{"name": "x", "shape": [1], "datatype": "INT32", "data": [1.5]}`), "input 'x': data element 0: 1.5 is not an integer that fits INT32"},
		{one(`{"name": "x", "shape": [1], "datatype": "INT32", "data": [true]}`), "input 'x': data element 0: expected an integer for INT32, got true"},
		{one(`{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}`), "input 'x': data element 0: expected true or false for BOOL, got 1"},
		{one(`{"name": "x", "shape": [1], "datatype": "BYTES", "data": [1]}`), "input 'x': data element 0: expected a string for BYTES, got 1"},
		{one(`{"name": "x", "shape": [1], "datatype": "FP16", "data": [1]}`), "input 'x': FP16 data cannot be sent as JSON; send it as binary data (parameters.binary_data_size, Triton's binary tensor data extension)"},
		{one(`{"name": "x", "shape": [1], "datatype": "BF16", "data": [1]}`), "input 'x': BF16 data cannot be sent as JSON"},
		{one(`{"name": "x", "shape": [1], "datatype": "COMPLEX", "data": [1]}`), `input 'x': datatype "COMPLEX" cannot be given as JSON data`},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": {"binary_data_size": 4}}`), `input 'x': has both "data" and parameters.binary_data_size; send its data one way`},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": -4}}`), "input 'x' parameters.binary_data_size: expected an integer >= 0, got -4"},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"p": [1]}}`), "input 'x' parameters.p: a parameter must be a boolean, number or string, got an array"},
		{one(`{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}`), "input 'x': binary_data_size 4 goes past the end of the binary data (0 bytes after the JSON, 0 of them left for this input)"},
		{`{"parameters": {"binary_data_output": 1}, "inputs": []}`, "parameters.binary_data_output: expected true or false, got 1"},
		{`{"inputs": [], "outputs": [{"parameters": {}}]}`, `outputs[0]: "name" is required`},
		{`{"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": "yes"}}]}`, `output 'y' parameters.binary_data: expected true or false, got "yes"`},
		{`{"inputs": [], "outputs": "y"}`, `outputs: expected an array of objects, got "y"`},
		{`{"inputs": []}` + "\x00\x01", "request body: invalid JSON at byte 14: unexpected data after the JSON value (binary tensor data after the JSON needs the Inference-Header-Content-Length header)"},
	} {
		_, _, err := decodeInferRequest([]byte(c.body), -1, "m", "")
		re, ok := err.(*restError)
		if !ok || re.status != http.StatusBadRequest || !strings.HasPrefix(re.msg, c.msg) {
			t.Errorf("%s:\n got  %v\n want %q (400)", c.body, err, c.msg)
		}
	}
}

func TestDecodeBinaryLengthErrors(t *testing.T) {
	header := `{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]}`
	body := append([]byte(header), 1, 2, 3, 4, 5, 6)
	_, _, err := decodeInferRequest(body, int64(len(header)), "m", "")
	if err == nil || err.Error() != "6 bytes of binary data after the JSON are not claimed by any input's binary_data_size (the inputs claim 4)" {
		t.Fatalf("unclaimed bytes: %v", err)
	}
	_, _, err = decodeInferRequest(body, int64(len(body)+1), "m", "")
	if err == nil || err.Error() != "Inference-Header-Content-Length 107 exceeds the body (106 bytes)" {
		t.Fatalf("header length: %v", err)
	}
}

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
	// Everything binary; an output in shared memory has neither data nor binary bytes.
	resp.Outputs[0].Parameters = map[string]*inferencepb.InferParameter{paramShmRegion: {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "r"}}}
	resp.RawOutputContents[0] = nil
	header, blobs, err = encodeInferResponse(resp, &outputPlan{allBinary: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(header), `{"name":"f","datatype":"FP32","shape":[2,2],"parameters":{"shared_memory_region":"r"}}`) || len(blobs) != 6 {
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

func TestHTTPStatusTable(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.NotFound: 404, codes.InvalidArgument: 400, codes.Unavailable: 503,
		codes.ResourceExhausted: 429, codes.DeadlineExceeded: 504, codes.Unauthenticated: 401,
		codes.Internal: 500, codes.Unimplemented: 501, codes.Canceled: 499, codes.Code(99): 500,
	} {
		if got := httpStatus(c); got != want {
			t.Errorf("%v: %d, want %d", c, got, want)
		}
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if _, ok := httpStatusOf[c]; !ok {
			t.Errorf("%v has no HTTP status", c)
		}
	}
}

func TestParseRoute(t *testing.T) {
	for path, want := range map[string]route{
		"/v2":                                {rpc: "ServerMetadata", method: "GET"},
		"/v2/":                               {rpc: "ServerMetadata", method: "GET"},
		"/v2/health/live":                    {rpc: "ServerLive", method: "GET"},
		"/v2/health/ready":                   {rpc: "ServerReady", method: "GET"},
		"/v2/models/stats":                   {rpc: "ModelStatistics", method: "GET"},
		"/v2/models/a":                       {rpc: "ModelMetadata", method: "GET", model: "a"},
		"/v2/models/a/versions/3":            {rpc: "ModelMetadata", method: "GET", model: "a", version: "3"},
		"/v2/models/a/ready":                 {rpc: "ModelReady", method: "GET", model: "a"},
		"/v2/models/a/versions/3/ready":      {rpc: "ModelReady", method: "GET", model: "a", version: "3"},
		"/v2/models/a%2Fb/infer":             {rpc: "ModelInfer", method: "POST", model: "a/b"},
		"/v2/models/a/versions/1/infer":      {rpc: "ModelInfer", method: "POST", model: "a", version: "1"},
		"/v2/models/a/config":                {rpc: "ModelConfig", method: "GET", model: "a"},
		"/v2/models/a/versions/1/stats":      {rpc: "ModelStatistics", method: "GET", model: "a", version: "1"},
		"/v2/models/a%20b/versions/x%2Fy":    {rpc: "ModelMetadata", method: "GET", model: "a b", version: "x/y"},
		"/v2/repository/index":               {rpc: "RepositoryIndex", method: "POST"},
		"/v2/repository/models/a/load":       {rpc: "RepositoryModelLoad", method: "POST", model: "a"},
		"/v2/repository/models/a%2Fb/unload": {rpc: "RepositoryModelUnload", method: "POST", model: "a/b"},
	} {
		got, err := parseRoute("GET", path)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", path, got, err, want)
		}
	}
	for _, path := range []string{"/", "/v1/models/a", "/v2/models", "/v2/models/", "/v2/models/a/explain",
		"/v2/models/a/versions", "/v2/health", "/v2/models/a/ready/x", "/v2/models/%zz",
		"/v2/repository/models/a", "/v2/repository/models/a/delete", "/v2/repository/models//load"} {
		if _, err := parseRoute("GET", path); err == nil {
			t.Errorf("%s: routed", path)
		}
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

func TestHTTPPortFlag(t *testing.T) {
	for args, want := range map[string]int{
		"--repository r":                        defaultHTTPPort,
		"--repository r --port 0":               0,
		"--repository r --port 0 --http-port 9": 9,
		"--repository r --http-port -1":         -1,
	} {
		f, err := parseArgs(strings.Fields(args))
		if err != nil || f.httpPort != want {
			t.Errorf("%s: http port %v %v, want %d", args, f, err, want)
		}
		for _, a := range f.workerArgs {
			if a == "--http-port" {
				t.Errorf("%s: --http-port forwarded to the workers", args)
			}
		}
	}
	t.Setenv("JAXPORT_HTTP_PORT", "8500")
	if f, err := parseArgs([]string{"--port", "0"}); err != nil || f.httpPort != 8500 {
		t.Errorf("environment: %v %v", f, err)
	}
	if _, err := parseArgs([]string{"--http-port", "-2"}); err == nil || err.Error() != "--http-port must be in -1..65535, got -2" {
		t.Errorf("range: %v", err)
	}
}

// FuzzDecodeInferRequest: no input makes the codec panic; whatever it accepts, it translates
// into a request whose raw contents come from the body's binary part or from JSON data.
func FuzzDecodeInferRequest(f *testing.F) {
	f.Add([]byte(`{"id":"a","inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,NaN]}],"outputs":[{"name":"y"}]}`), int64(-1))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`+"\x01\x00\x00\x00a"), int64(91))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[[[1]]],"datatype":"INT8","data":[[[-1]]]}],"parameters":{"binary_data_output":true}}`), int64(-1))
	f.Fuzz(func(t *testing.T, body []byte, jsonLength int64) {
		req, plan, err := decodeInferRequest(body, jsonLength, "m", "")
		if err != nil {
			if _, ok := err.(*restError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if req == nil || plan == nil || req.ModelName != "m" {
			t.Fatalf("accepted without a request: %v %v", req, plan)
		}
	})
}

// FuzzParseJSON: the reader never panics, and what it reads, it writes back readably.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,-2.5e3,NaN,"\u00e9"]}`, `[[[]]]`, `"\ud83d\ude00"`, `-Infinity`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseJSON(data)
		if err != nil {
			return
		}
		again, err := parseJSON(appendJSONValue(nil, v))
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("%q: written back as %q: %v", data, appendJSONValue(nil, v), err)
		}
	})
}

func TestDecodeRepositoryRequests(t *testing.T) {
	in, err := decodeRepositoryRequest("RepositoryIndex", "", []byte(`{"ready": true}`))
	if err != nil || !in.(*inferencepb.RepositoryIndexRequest).Ready {
		t.Fatalf("index: %v %v", in, err)
	}
	in, err = decodeRepositoryRequest("RepositoryIndex", "", nil)
	if err != nil || in.(*inferencepb.RepositoryIndexRequest).Ready {
		t.Fatalf("index without a body: %v %v", in, err)
	}
	in, err = decodeRepositoryRequest("RepositoryModelLoad", "m", []byte(
		`{"parameters": {"config": "{}", "n": 3, "b": true, "file:1/model.bin": "AAE="}}`))
	if err != nil {
		t.Fatal(err)
	}
	load := in.(*inferencepb.RepositoryModelLoadRequest)
	p := load.Parameters
	if load.ModelName != "m" || p["config"].GetStringParam() != "{}" || p["n"].GetInt64Param() != 3 ||
		!p["b"].GetBoolParam() || !bytes.Equal(p["file:1/model.bin"].GetBytesParam(), []byte{0, 1}) {
		t.Fatalf("load %v", load)
	}
	in, err = decodeRepositoryRequest("RepositoryModelUnload", "m", []byte(`{"parameters": {"unload_dependents": false}}`))
	if err != nil || in.(*inferencepb.RepositoryModelUnloadRequest).ModelName != "m" {
		t.Fatalf("unload %v %v", in, err)
	}
	for body, msg := range map[string]string{
		`{"ready": 1}`:                     "request.ready: expected true or false, got 1",
		`{"parameters": {"x": [1]}}`:       "parameters.x: a parameter must be a boolean, integer or string, got an array",
		`{"parameters": {"x": 1.5}}`:       "parameters.x: expected an integer, got 1.5",
		`{"parameters": {"file:a": "%%"}}`: "parameters.file:a: a file: parameter is base64 content",
		`[`:                                "request body: invalid JSON at byte 1: unexpected end of input",
		`{"parameters": "x"}`:              `parameters: expected a JSON object, got "x"`,
	} {
		rpc := "RepositoryModelLoad"
		if strings.Contains(body, "ready") {
			rpc = "RepositoryIndex"
		}
		_, err := decodeRepositoryRequest(rpc, "m", []byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), msg) || err.(*restError).status != 400 {
			t.Errorf("%s: got %v, want %q", body, err, msg)
		}
	}
}
