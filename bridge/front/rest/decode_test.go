package rest

// Unit tests of the REST codec's request side (decode.go). The live REST tests, against a
// real front, are tests/front/test_rest.py.

import (
	"encoding/binary"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
)

func mustDecode(t *testing.T, body string, jsonLength int64) (*request.Request, *outputPlan) {
	t.Helper()
	req, plan, err := decodeInferRequest([]byte(body), jsonLength, "m", "2")
	if err != nil {
		t.Fatal(err)
	}
	return req, plan
}

func TestDecodeJSONInputsAsRawElements(t *testing.T) {
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
	if req.Model != "m" || req.Version != "2" || req.ID != "r1" || len(req.Raw) != len(req.Inputs) {
		t.Fatalf("request %v", req)
	}
	p := req.Params
	if !p["flag"].GetBoolParam() || p["n"].GetInt64Param() != 7 || p["big"].GetUint64Param() != math.MaxUint64 ||
		p["x"].GetDoubleParam() != 0.5 || p["s"].GetStringParam() != "v" {
		t.Fatalf("parameters %v", p)
	}
	in, raw := req.Inputs, req.Raw
	f := make([]float32, 4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[0][4*i:]))
	}
	if len(raw[0]) != 16 || f[0] != 1 || f[1] != 2.5 || !math.IsNaN(float64(f[2])) || !math.IsInf(float64(f[3]), -1) {
		t.Fatalf("FP32 %v", f)
	}
	if !reflect.DeepEqual(in[0].Shape, []int64{2, 2}) || in[0].Datatype != "FP32" || in[0].Contents != nil {
		t.Fatalf("tensor %v", in[0])
	}
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	if !reflect.DeepEqual(raw[1], []byte{0x80, 0x7f}) ||
		!reflect.DeepEqual(raw[2], le64(math.MaxUint64)) ||
		!reflect.DeepEqual(raw[3], le64(9007199254740993)) ||
		!reflect.DeepEqual(raw[4], []byte{1, 0}) ||
		in[4].Params["p"].GetStringParam() != "q" ||
		!reflect.DeepEqual(raw[5], append([]byte{3, 0, 0, 0}, "hé"...)) ||
		!reflect.DeepEqual(raw[6], le64(math.Float64bits(0.1))) ||
		!reflect.DeepEqual(raw[7], []byte{0xff, 0xff}) {
		t.Fatalf("raw contents %v", raw)
	}
	if len(req.Outputs) != 2 || req.Outputs[0].Params["classification"].GetInt64Param() != 2 {
		t.Fatalf("outputs %v", req.Outputs)
	}
	if _, forwarded := req.Outputs[1].Params[paramBinaryData]; forwarded {
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
	if !reflect.DeepEqual(req.Raw, want) {
		t.Fatalf("raw %v, want %v", req.Raw, want)
	}
	if &req.Raw[0][0] != &body[len(header)] {
		t.Fatal("binary data copied; want a view of the body")
	}
	for _, in := range req.Inputs {
		if in.Contents != nil {
			t.Fatalf("input %s has typed contents beside raw ones", in.Name)
		}
	}
	if _, ok := req.Inputs[0].Params[paramBinaryDataSize]; ok {
		t.Fatal("binary_data_size passed on")
	}
	if req.Inputs[4].Params[paramShmRegion].GetStringParam() != "r" {
		t.Fatal("shared memory parameters not passed on")
	}
	if _, ok := req.Params[paramBinaryDataOutput]; ok || !plan.isBinary("anything") {
		t.Fatalf("binary_data_output: parameters %v plan %+v", req.Params, plan)
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
		{one(`{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}`), `input 'x': "data" holds 5 elements; expected 6 (shape [2, 3])`},
		{one(`{"name": "x", "shape": [5], "datatype": "INT64", "data": [[1, 2], [3, 4]]}`), `input 'x': "data" holds 4 elements; expected 5 (shape [5])`},
		{one(`{"name": "x", "shape": [0], "datatype": "BOOL", "data": [true]}`), `input 'x': "data" holds 1 elements; expected 0 (shape [0])`},
		{`{"parameters": {"binary_data_output": 1}, "inputs": []}`, "parameters.binary_data_output: expected true or false, got 1"},
		{`{"inputs": [], "outputs": [{"parameters": {}}]}`, `outputs[0]: "name" is required`},
		{`{"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": "yes"}}]}`, `output 'y' parameters.binary_data: expected true or false, got "yes"`},
		{`{"inputs": [], "outputs": "y"}`, `outputs: expected an array of objects, got "y"`},
		{`{"inputs": []}` + "\x00\x01", "request body: invalid JSON at byte 14: unexpected data after the JSON value (binary tensor data after the JSON needs the Inference-Header-Content-Length header)"},
	} {
		_, _, err := decodeInferRequest([]byte(c.body), -1, "m", "")
		re, ok := err.(*status.HTTPError)
		if !ok || re.Status != http.StatusBadRequest || !strings.HasPrefix(re.Msg, c.msg) {
			t.Errorf("%s:\n got  %v\n want %q (400)", c.body, err, c.msg)
		}
	}
}

func TestDecodeDataCountWithBinaryInputs(t *testing.T) {
	// Beside a binary input, JSON data is encoded raw: its count is still the REST field's.
	header := `{"inputs": [{"name": "b", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}},` +
		`{"name": "x", "shape": [3], "datatype": "INT32", "data": [1, 2]}]}`
	_, _, err := decodeInferRequest(append([]byte(header), 0, 0, 0, 0), int64(len(header)), "m", "")
	if err == nil || err.Error() != `input 'x': "data" holds 2 elements; expected 3 (shape [3])` {
		t.Fatalf("got %v", err)
	}
	// A shape the codec cannot count is the signature's to judge.
	if _, _, err := decodeInferRequest([]byte(`{"inputs": [{"name": "x", "shape": [-1], "datatype": "INT32", "data": [1, 2]}]}`), -1, "m", ""); err != nil {
		t.Fatalf("negative dimension refused by the codec: %v", err)
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

// FuzzDecodeInferRequest: no input makes the codec panic; whatever it accepts, it translates
// into a request whose raw contents come from the body's binary part or from JSON data.
func FuzzDecodeInferRequest(f *testing.F) {
	f.Add([]byte(`{"id":"a","inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,NaN]}],"outputs":[{"name":"y"}]}`), int64(-1))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":5}}]}`+"\x01\x00\x00\x00a"), int64(91))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[[[1]]],"datatype":"INT8","data":[[[-1]]]}],"parameters":{"binary_data_output":true}}`), int64(-1))
	f.Fuzz(func(t *testing.T, body []byte, jsonLength int64) {
		req, plan, err := decodeInferRequest(body, jsonLength, "m", "")
		if err != nil {
			if _, ok := err.(*status.HTTPError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if req == nil || plan == nil || req.Model != "m" {
			t.Fatalf("accepted without a request: %v %v", req, plan)
		}
	})
}
