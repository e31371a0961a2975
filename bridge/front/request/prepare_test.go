package request

// Tests of Prepare and Response: each case is a request to one of testModels and the answer
// the server gives it: the INVALID_ARGUMENT message, or the prepared rows, outputs, classes
// and input bytes, and for cases with `results` the serialized response (the exact wire
// bytes, deterministic map order). The texts are the ones the bridge has always given (its
// callers and the conformance suite rely on them).

import (
	"encoding/hex"
	"math"
	"slices"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// testDTypes: the dtype table's rows as the exporter writes them into a manifest.
var testDTypes = map[string]*jaxportv1.DType{
	"BOOL":   {Numpy: "bool", Mlir: "i1", Datatype: "BOOL", Itemsize: 1},
	"UINT8":  {Numpy: "uint8", Mlir: "ui8", Datatype: "UINT8", Itemsize: 1},
	"UINT16": {Numpy: "uint16", Mlir: "ui16", Datatype: "UINT16", Itemsize: 2},
	"UINT32": {Numpy: "uint32", Mlir: "ui32", Datatype: "UINT32", Itemsize: 4},
	"UINT64": {Numpy: "uint64", Mlir: "ui64", Datatype: "UINT64", Itemsize: 8},
	"INT8":   {Numpy: "int8", Mlir: "i8", Datatype: "INT8", Itemsize: 1},
	"INT16":  {Numpy: "int16", Mlir: "i16", Datatype: "INT16", Itemsize: 2},
	"INT32":  {Numpy: "int32", Mlir: "i32", Datatype: "INT32", Itemsize: 4},
	"INT64":  {Numpy: "int64", Mlir: "i64", Datatype: "INT64", Itemsize: 8},
	"FP16":   {Numpy: "float16", Mlir: "f16", Datatype: "FP16", Itemsize: 2},
	"BF16":   {Numpy: "bfloat16", Mlir: "bf16", Datatype: "BF16", Itemsize: 2},
	"FP32":   {Numpy: "float32", Mlir: "f32", Datatype: "FP32", Itemsize: 4},
	"FP64":   {Numpy: "float64", Mlir: "f64", Datatype: "FP64", Itemsize: 8},
}

func spec(name, datatype string, shape ...int64) *jaxportv1.TensorSpec {
	return &jaxportv1.TensorSpec{Name: name, Shape: shape, Dtype: testDTypes[datatype]}
}

// testManifest: a fixed-shape manifest, one program per batch size (one unbatched program
// without sizes).
func testManifest(ins, outs []*jaxportv1.TensorSpec, sizes []uint32, batchedIns, batchedOuts []string) *jaxportv1.Manifest {
	m := &jaxportv1.Manifest{SchemaVersion: 2, Inputs: ins, Outputs: outs}
	if len(sizes) == 0 {
		m.Programs = []*jaxportv1.Program{{MlirbcFile: "model.mlirbc"}}
		return m
	}
	m.Batching = &jaxportv1.Batching{BatchSizes: sizes, BatchedInputs: batchedIns, BatchedOutputs: batchedOuts}
	for _, b := range sizes {
		m.Programs = append(m.Programs, &jaxportv1.Program{BatchSize: b})
	}
	return m
}

type testModel struct {
	version  string
	manifest *jaxportv1.Manifest
	dynamic  bool // served through the dynamic batcher
	labels   map[string][]string
}

// testModels: the models of prepareCases (the Python generator built the same ones).
func testModels() map[string]testModel {
	s := spec
	return map[string]testModel{
		"mlp": {version: "3", manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("x", "FP32", 2, 3), s("ids", "INT8", 4), s("h", "FP16", 2)},
			[]*jaxportv1.TensorSpec{s("logits", "FP32", 2, 4), s("flag", "BOOL", 2), s("count", "INT64")}, nil, nil, nil),
			labels: map[string][]string{"logits": {"cat", "", "dog"}}},
		"rows": {version: "1", manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("a", "FP32", -1, 2), s("b", "INT32", -1), s("c", "FP32", 3)},
			[]*jaxportv1.TensorSpec{s("y", "FP32", -1, 3), s("s", "FP64")}, []uint32{1, 4, 8}, []string{"a", "b"}, []string{"y"}),
			labels: map[string][]string{"y": {"r0", "r1", "r2", "r3"}}},
		"dyn": {version: "2", dynamic: true, manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("a", "FP32", -1, 2), s("b", "INT32", -1)},
			[]*jaxportv1.TensorSpec{s("y", "FP32", -1, 3)}, []uint32{1, 4, 8}, []string{"a", "b"}, []string{"y"})},
		"dynscalar": {version: "1", dynamic: true, manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("a", "FP32", -1, 2), s("t", "FP32")},
			[]*jaxportv1.TensorSpec{s("y", "FP32", -1, 3)}, []uint32{1, 2}, []string{"a"}, []string{"y"})},
		"quoted": {version: "1", dynamic: true, manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("it's", "FP32", -1), s(`x"y'z`, "FP32", -1)},
			[]*jaxportv1.TensorSpec{s("y", "FP32", -1)}, []uint32{1, 2}, []string{"it's", `x"y'z`}, []string{"y"})},
		"nobatched": {version: "1", manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("z", "INT32", 2)},
			[]*jaxportv1.TensorSpec{s("y", "FP32", -1, 3)}, []uint32{1, 2}, nil, []string{"y"})},
		"types": {version: "1", manifest: testManifest(
			[]*jaxportv1.TensorSpec{s("b", "BOOL", 3), s("u8", "UINT8", 3), s("u16", "UINT16", 3), s("u32", "UINT32", 3),
				s("u64", "UINT64", 3), s("i8", "INT8", 3), s("i16", "INT16", 3), s("i32", "INT32", 3), s("i64", "INT64", 3),
				s("f32", "FP32", 3), s("f64", "FP64", 3), s("f16", "FP16", 0), s("bf", "BF16", 0)},
			[]*jaxportv1.TensorSpec{s("u8", "UINT8", 5), s("u16", "UINT16", 5), s("u32", "UINT32", 5), s("u64", "UINT64", 5),
				s("i8", "INT8", 5), s("i16", "INT16", 5), s("i32", "INT32", 5), s("i64", "INT64", 5), s("f16", "FP16", 5),
				s("bf", "BF16", 5), s("f32", "FP32", 2, 5), s("f64", "FP64", 5), s("sc", "FP32")}, nil, nil, nil),
			labels: map[string][]string{"f32": {"zero", "one"}}},
	}
}

func testSignature(t testing.TB, model string) *Signature {
	t.Helper()
	m, ok := testModels()[model]
	if !ok {
		t.Fatalf("no test model %q", model)
	}
	s, err := NewSignature(model, m.version, m.manifest, m.labels, Plan{Engine: "native", DynamicBatching: m.dynamic})
	if err != nil {
		t.Fatalf("NewSignature(%s): %v", model, err)
	}
	return s
}

type tIn struct {
	name, datatype string
	shape          []int64
	contents       *inferencepb.InferTensorContents
}

type tOut struct {
	name           string
	classification *inferencepb.InferParameter // nil: none
}

func strParam(v string) *inferencepb.InferParameter {
	return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: v}}
}

func i64Param(v int64) *inferencepb.InferParameter {
	return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: v}}
}

func u64Param(v uint64) *inferencepb.InferParameter {
	return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Uint64Param{Uint64Param: v}}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type prepareCase struct {
	name, model string
	ins         []tIn
	raw         []string // hex
	outs        []tOut
	id          string
	msg         string // the Python path's INVALID_ARGUMENT message; "" when it accepts the request
	rows        int
	outputs     []int
	classes     map[int]int
	inputs      []string          // hex of each prepared input, manifest order
	results     map[string]string // output bytes by name (hex) fed to response
	response    string            // hex of the Python path's serialized response
}

func (c *prepareCase) request(t testing.TB) *Request { return FromProto(c.proto(t)) }

func (c *prepareCase) proto(t testing.TB) *inferencepb.ModelInferRequest {
	req := &inferencepb.ModelInferRequest{ModelName: c.model, Id: c.id}
	for _, in := range c.ins {
		req.Inputs = append(req.Inputs, &inferencepb.ModelInferRequest_InferInputTensor{
			Name: in.name, Datatype: in.datatype, Shape: in.shape, Contents: in.contents})
	}
	for _, r := range c.raw {
		req.RawInputContents = append(req.RawInputContents, unhex(t, r))
	}
	for _, o := range c.outs {
		out := &inferencepb.ModelInferRequest_InferRequestedOutputTensor{Name: o.name}
		if o.classification != nil {
			out.Parameters = map[string]*inferencepb.InferParameter{ParamClassification: o.classification}
		}
		req.Outputs = append(req.Outputs, out)
	}
	return req
}

// prepareCases: requests and the answers the server gives them (the texts and wire bytes its
// callers and the conformance suite rely on).
var prepareCases = []prepareCase{
	{name: "unexpected input", model: "mlp",
		ins: []tIn{{"z", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		msg: "unexpected input 'z': model 'mlp' (version 3) has inputs 'x' (FP32 [2, 3]), 'ids' (INT8 [4]), 'h' (FP16 [2])"},
	{name: "unexpected input long name", model: "mlp",
		ins: []tIn{{"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn", "FP32", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "unexpected input 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...(100 chars)': model 'mlp' (version 3) has inputs 'x' (FP32 [2, 3]), 'ids' (INT8 [4]), 'h' (FP16 [2])"},
	{name: "unexpected input long unicode name", model: "mlp",
		ins: []tIn{{"éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé", "FP32", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "unexpected input 'ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé...(70 chars)': model 'mlp' (version 3) has inputs 'x' (FP32 [2, 3]), 'ids' (INT8 [4]), 'h' (FP16 [2])"},
	{name: "unexpected empty input name", model: "mlp",
		ins: []tIn{{"", "FP32", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "unexpected input '': model 'mlp' (version 3) has inputs 'x' (FP32 [2, 3]), 'ids' (INT8 [4]), 'h' (FP16 [2])"},
	{name: "datatype", model: "mlp",
		ins: []tIn{{"x", "INT32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		msg: "input 'x': expected datatype FP32, got INT32"},
	{name: "datatype empty", model: "mlp",
		ins: []tIn{{"x", "", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "input 'x': expected datatype FP32, got (empty)"},
	{name: "datatype long", model: "mlp",
		ins: []tIn{{"x", "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "input 'x': expected datatype FP32, got FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF...(80 chars)"},
	{name: "shape", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{3, 2}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		msg: "input 'x': expected shape [2, 3], got [3, 2]"},
	{name: "shape rank", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3, 1}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "input 'x': expected shape [2, 3], got [2, 3, 1]"},
	{name: "shape long", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "input 'x': expected shape [2, 3], got [1, 2, 3, 4, 5, 6, 7, 8, ...] (10 dimensions)"},
	{name: "shape negative", model: "mlp",
		ins: []tIn{{"ids", "INT8", []int64{-4}, nil}},
		raw: []string{"01fe03fc"},
		msg: "input 'ids': expected shape [4], got [-4]"},
	{name: "duplicate input", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}, {"x", "FP32", []int64{2, 3}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4", "000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "duplicate input 'x': each input may appear once"},
	{name: "raw count", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc"},
		msg: "raw_input_contents has 2 entries; expected 3 (one per input not in shared memory, in the order of `inputs`)"},
	{name: "raw and typed", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, &inferencepb.InferTensorContents{IntContents: []int32{1, 2, 3, 4}}}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		msg: "input 'ids': has typed contents but the request uses raw_input_contents; send every input one way, not both"},
	{name: "raw byte count", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f", "01fe03fc", "003e00b4"},
		msg: "input 'x': raw contents hold 20 bytes; expected 24 (shape [2, 3] x 4 bytes per FP32 element)"},
	{name: "typed fp16", model: "mlp",
		ins: []tIn{{"h", "FP16", []int64{2}, &inferencepb.InferTensorContents{Fp32Contents: []float32{1.0, 2.0}}}},
		msg: "input 'h': FP16 has no typed contents field; send it as raw bytes (raw_input_contents)"},
	{name: "typed no data", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}},
		msg: "input 'x': no data; expected raw_input_contents or contents.fp32_contents with 6 elements (shape [2, 3])"},
	{name: "typed wrong field", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, &inferencepb.InferTensorContents{IntContents: []int32{1, 1, 1, 1, 1, 1}, BytesContents: [][]byte{[]byte("a")}}}},
		msg: "input 'x': datatype FP32 uses contents.fp32_contents; got contents.int_contents, contents.bytes_contents"},
	{name: "typed count", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, &inferencepb.InferTensorContents{Fp32Contents: []float32{1.0, 1.0, 1.0, 1.0, 1.0}}}},
		msg: "input 'x': contents.fp32_contents holds 5 elements; expected 6 (shape [2, 3])"},
	{name: "typed int8 range", model: "mlp",
		ins: []tIn{{"ids", "INT8", []int64{4}, &inferencepb.InferTensorContents{IntContents: []int32{1, -200, 3, 127}}}},
		msg: "input 'ids': INT8 values must lie in [-128, 127]; got values in [-200, 127]"},
	{name: "missing input", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc"},
		msg: "missing input 'h': model 'mlp' (version 3) expects FP16 [2]"},
	{name: "requested output empty name", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"", nil}},
		msg:  "requested output with an empty name; every requested output needs a name"},
	{name: "requested output duplicate", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", nil}, {"flag", nil}, {"logits", nil}},
		msg:  "duplicate requested output 'logits': each requested output may appear once"},
	{name: "requested output unknown", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", nil}, {"probs", nil}},
		msg:  "unknown requested output 'probs': model 'mlp' (version 3) has outputs 'logits', 'flag', 'count'"},
	{name: "requested output unknown long", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn", nil}},
		msg:  "unknown requested output 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...(100 chars)': model 'mlp' (version 3) has outputs 'logits', 'flag', 'count'"},
	{name: "requested outputs many duplicate", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"o0", nil}, {"o1", nil}, {"o2", nil}, {"o3", nil}, {"o4", nil}, {"o5", nil}, {"o6", nil}, {"o7", nil}, {"o8", nil}, {"o9", nil}, {"o10", nil}, {"o11", nil}, {"o12", nil}, {"o13", nil}, {"o14", nil}, {"o15", nil}, {"o16", nil}, {"o17", nil}, {"o18", nil}, {"o19", nil}, {"o3", nil}},
		msg:  "duplicate requested output 'o3': each requested output may appear once"},
	{name: "requested outputs many unknown", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"o0", nil}, {"o1", nil}, {"o2", nil}, {"o3", nil}, {"o4", nil}, {"o5", nil}, {"o6", nil}, {"o7", nil}, {"o8", nil}, {"o9", nil}, {"o10", nil}, {"o11", nil}, {"o12", nil}, {"o13", nil}, {"o14", nil}, {"o15", nil}, {"o16", nil}, {"o17", nil}, {"o18", nil}, {"o19", nil}},
		msg:  "unknown requested output 'o0': model 'mlp' (version 3) has outputs 'logits', 'flag', 'count'"},
	{name: "classification string", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", strParam("2")}},
		msg:  "requested output 'logits': parameter 'classification' must be an int64 class count"},
	{name: "classification no value", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", &inferencepb.InferParameter{}}},
		msg:  "requested output 'logits': parameter 'classification' must be an int64 class count"},
	{name: "classification zero", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", i64Param(0)}},
		msg:  "requested output 'logits': class count must be >= 1, got 0"},
	{name: "classification negative", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"logits", i64Param(-2)}},
		msg:  "requested output 'logits': class count must be >= 1, got -2"},
	{name: "classification bool", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"flag", i64Param(1)}},
		msg:  "requested output 'flag': class result not available for an output of type BOOL"},
	{name: "order: requested output before inputs", model: "mlp",
		ins:  []tIn{{"z", "FP32", []int64{1}, nil}},
		outs: []tOut{{"a", nil}, {"a", nil}},
		msg:  "duplicate requested output 'a': each requested output may appear once"},
	{name: "order: shape before raw count", model: "mlp",
		ins: []tIn{{"x", "FP32", []int64{1}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw: []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		msg: "input 'x': expected shape [2, 3], got [1]"},
	{name: "order: bytes before requested output", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b400"},
		outs: []tOut{{"probs", nil}},
		msg:  "input 'h': raw contents hold 5 bytes; expected 4 (shape [2] x 2 bytes per FP16 element)"},
	{name: "order: requested output before missing input", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		outs: []tOut{{"probs", nil}},
		msg:  "unknown requested output 'probs': model 'mlp' (version 3) has outputs 'logits', 'flag', 'count'"},
	{name: "order: classifiable before missing input", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f"},
		outs: []tOut{{"flag", i64Param(1)}},
		msg:  "requested output 'flag': class result not available for an output of type BOOL"},
	{name: "ok raw all outputs", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		id:   "r1",
		rows: 1, outputs: []int{0, 1, 2},
		inputs: []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
	},
	{name: "ok requested order", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"count", nil}, {"logits", i64Param(3)}},
		rows: 1, outputs: []int{2, 0},
		classes: map[int]int{0: 3},
		inputs:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
	},
	{name: "ok classification uint64", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"count", u64Param(2)}},
		rows: 1, outputs: []int{2},
		classes: map[int]int{2: 2},
		inputs:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
	},
	{name: "ok typed every dtype", model: "types",
		ins:  []tIn{{"b", "BOOL", []int64{3}, &inferencepb.InferTensorContents{BoolContents: []bool{true, false, true}}}, {"u8", "UINT8", []int64{3}, &inferencepb.InferTensorContents{UintContents: []uint32{0, 255, 7}}}, {"u16", "UINT16", []int64{3}, &inferencepb.InferTensorContents{UintContents: []uint32{0, 65535, 258}}}, {"u32", "UINT32", []int64{3}, &inferencepb.InferTensorContents{UintContents: []uint32{0, 4294967295, 16909060}}}, {"u64", "UINT64", []int64{3}, &inferencepb.InferTensorContents{Uint64Contents: []uint64{0, 18446744073709551615, 1}}}, {"i8", "INT8", []int64{3}, &inferencepb.InferTensorContents{IntContents: []int32{-128, 127, -1}}}, {"i16", "INT16", []int64{3}, &inferencepb.InferTensorContents{IntContents: []int32{-32768, 32767, -2}}}, {"i32", "INT32", []int64{3}, &inferencepb.InferTensorContents{IntContents: []int32{-2147483648, 2147483647, -3}}}, {"i64", "INT64", []int64{3}, &inferencepb.InferTensorContents{Int64Contents: []int64{-9223372036854775808, 9223372036854775807, -4}}}, {"f32", "FP32", []int64{3}, &inferencepb.InferTensorContents{Fp32Contents: []float32{0.5, -1.25, 1e-08}}}, {"f64", "FP64", []int64{3}, &inferencepb.InferTensorContents{Fp64Contents: []float64{0.1, -2.5e+300, math.Copysign(0, -1)}}}, {"f16", "FP16", []int64{0}, nil}, {"bf", "BF16", []int64{0}, nil}},
		rows: 1, outputs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		inputs: []string{"010001", "00ff07", "0000ffff0201", "00000000ffffffff04030201", "0000000000000000ffffffffffffffff0100000000000000", "807fff", "0080ff7ffeff", "00000080ffffff7ffdffffff", "0000000000000080ffffffffffffff7ffcffffffffffffff", "0000003f0000a0bf77cc2b32", "9a9999999999b93f039300aa4bdd4dfe0000000000000080", "", ""},
	},
	{name: "typed uint8 range", model: "types",
		ins: []tIn{{"u8", "UINT8", []int64{3}, &inferencepb.InferTensorContents{UintContents: []uint32{0, 256, 7}}}},
		msg: "input 'u8': UINT8 values must lie in [0, 255]; got values in [0, 256]"},
	{name: "typed uint16 range", model: "types",
		ins: []tIn{{"u16", "UINT16", []int64{3}, &inferencepb.InferTensorContents{UintContents: []uint32{0, 70000, 7}}}},
		msg: "input 'u16': UINT16 values must lie in [0, 65535]; got values in [0, 70000]"},
	{name: "typed int16 range", model: "types",
		ins: []tIn{{"i16", "INT16", []int64{3}, &inferencepb.InferTensorContents{IntContents: []int32{-40000, 0, 40000}}}},
		msg: "input 'i16': INT16 values must lie in [-32768, 32767]; got values in [-40000, 40000]"},
	{name: "typed bf16 empty with contents", model: "types",
		ins: []tIn{{"bf", "BF16", []int64{0}, &inferencepb.InferTensorContents{Fp32Contents: []float32{1.0}}}},
		msg: "input 'bf': BF16 has no typed contents field; send it as raw bytes (raw_input_contents)"},
	{name: "ok raw bool normalised", model: "types",
		ins:  []tIn{{"b", "BOOL", []int64{3}, nil}, {"u8", "UINT8", []int64{3}, nil}, {"u16", "UINT16", []int64{3}, nil}, {"u32", "UINT32", []int64{3}, nil}, {"u64", "UINT64", []int64{3}, nil}, {"i8", "INT8", []int64{3}, nil}, {"i16", "INT16", []int64{3}, nil}, {"i32", "INT32", []int64{3}, nil}, {"i64", "INT64", []int64{3}, nil}, {"f32", "FP32", []int64{3}, nil}, {"f64", "FP64", []int64{3}, nil}, {"f16", "FP16", []int64{0}, nil}, {"bf", "BF16", []int64{0}, nil}},
		raw:  []string{"0002ff", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
		rows: 1, outputs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		inputs: []string{"000101", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
	},
	{name: "response classification every dtype", model: "types",
		ins:  []tIn{{"b", "BOOL", []int64{3}, nil}, {"u8", "UINT8", []int64{3}, nil}, {"u16", "UINT16", []int64{3}, nil}, {"u32", "UINT32", []int64{3}, nil}, {"u64", "UINT64", []int64{3}, nil}, {"i8", "INT8", []int64{3}, nil}, {"i16", "INT16", []int64{3}, nil}, {"i32", "INT32", []int64{3}, nil}, {"i64", "INT64", []int64{3}, nil}, {"f32", "FP32", []int64{3}, nil}, {"f64", "FP64", []int64{3}, nil}, {"f16", "FP16", []int64{0}, nil}, {"bf", "BF16", []int64{0}, nil}},
		raw:  []string{"0002ff", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
		outs: []tOut{{"u8", i64Param(3)}, {"u16", i64Param(5)}, {"u32", i64Param(9)}, {"u64", i64Param(4)}, {"i8", i64Param(2)}, {"i16", i64Param(5)}, {"i32", i64Param(1)}, {"i64", i64Param(3)}, {"f16", i64Param(4)}, {"bf", i64Param(5)}, {"f32", i64Param(10)}, {"f64", i64Param(5)}, {"sc", i64Param(2)}},
		id:   "cls-1",
		rows: 1, outputs: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		classes:  map[int]int{0: 3, 1: 5, 2: 9, 3: 4, 4: 2, 5: 5, 6: 1, 7: 3, 8: 4, 9: 5, 10: 10, 11: 5, 12: 2},
		inputs:   []string{"000101", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
		results:  map[string]string{"u8": "03c80300ff", "u16": "0100ffff090009000000", "u32": "ffffffff00000000050000000500000001000000", "u64": "ffffffffffffffff0000000000000000000000000000008001000000000000000500000000000000", "i8": "ff807fff00", "i16": "fbff2c0100802c010100", "i32": "00000000f9ffffff07000000f9ffffffffffff7f", "i64": "000000000000008005000000000000000500000000000000ffffffffffffff7fffffffffffffffff", "f16": "003800b4ff7b003800fc", "bf": "c03fc07f627f0080c03f", "f32": "0000003cec78ad60000000800000c07f0000807f000020400000204095bfd6b3000000000000c07f", "f64": "9a9999999999b93f555555555555d53f039300aa4bdd4dfe48afbc9af2d77a3e8dedb5a0f7c6a03e", "sc": "000070c0"},
		response: "0a0574797065731201311a05636c732d312a0e0a027538120542595445531a01032a0f0a03753136120542595445531a01052a0f0a03753332120542595445531a01052a0f0a03753634120542595445531a01042a0e0a026938120542595445531a01022a0f0a03693136120542595445531a01052a0f0a03693332120542595445531a01012a0f0a03693634120542595445531a01032a0f0a03663136120542595445531a01042a0e0a026266120542595445531a01052a0f0a03663332120542595445531a010a2a0f0a03663634120542595445531a01052a0e0a027363120542595445531a01013219050000003235353a34050000003230303a3103000000333a3032270700000036353533353a3103000000393a3203000000393a3303000000313a3003000000303a34322c0c000000343239343936373239353a3003000000353a3203000000353a3303000000313a3403000000303a3132411600000031383434363734343037333730393535313631353a3015000000393232333337323033363835343737353830383a3203000000353a3403000000313a333210050000003132373a3203000000303a34322d050000003330303a31050000003330303a3303000000313a34040000002d353a30080000002d33323736383a3232100c000000323134373438333634373a34322715000000393232333337323033363835343737353830373a3303000000353a3103000000353a32323d0e00000036353530342e3030303030303a320a000000302e3530303030303a300a000000302e3530303030303a330b0000002d302e3235303030303a313268050000006e616e3a31300000003330303430353532373034373339303938373237363236303339353632333335373837343137362e3030303030303a320a000000312e3530303030303a300a000000312e3530303030303a340b0000002d302e3030303030303a33329c01050000006e616e3a33050000006e616e3a3905000000696e663a34220000003130303030303030323030343038373733343237322e3030303030303a313a6f6e650a000000322e3530303030303a350a000000322e3530303030303a360f000000302e3030373831323a303a7a65726f0b0000002d302e3030303030303a320a000000302e3030303030303a380b0000002d302e3030303030303a3732f3020a000000302e3333333333333a310a000000302e3130303030303a300a000000302e3030303030303a340a000000302e3030303030303a33370100002d323530303030303030303030303030303133313236313930303633383031313035303632313736313137313435323737303339373838373238393633353238383737393530363134343937323237303438393436353932383433373730313131393636303130393236313130393538323230393639353434323335363330383038383430313037363433393131313938303436313936363736373435373132303936383030323331363433393530393334343537353538343438363937303232353134383432323338333038373432363939393836323730323739373539373431393130323230303138363633313835363935303335363233363434383134363937323035303134323130373039353238393137333638303439303936373136333634383530313335303430302e3030303030303a32320f0b0000002d332e3735303030303a30",
	},
	{name: "response typed outputs mixed", model: "types",
		ins:  []tIn{{"b", "BOOL", []int64{3}, nil}, {"u8", "UINT8", []int64{3}, nil}, {"u16", "UINT16", []int64{3}, nil}, {"u32", "UINT32", []int64{3}, nil}, {"u64", "UINT64", []int64{3}, nil}, {"i8", "INT8", []int64{3}, nil}, {"i16", "INT16", []int64{3}, nil}, {"i32", "INT32", []int64{3}, nil}, {"i64", "INT64", []int64{3}, nil}, {"f32", "FP32", []int64{3}, nil}, {"f64", "FP64", []int64{3}, nil}, {"f16", "FP16", []int64{0}, nil}, {"bf", "BF16", []int64{0}, nil}},
		raw:  []string{"0002ff", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
		outs: []tOut{{"f32", nil}, {"u64", u64Param(2)}, {"bf", nil}, {"sc", nil}},
		rows: 1, outputs: []int{10, 3, 9, 12},
		classes:  map[int]int{3: 2},
		inputs:   []string{"000101", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "010203", "010002000300", "010000000200000003000000", "010000000000000002000000000000000300000000000000", "0000803f0000004000004040", "000000000000f03f00000000000000400000000000000840", "", ""},
		results:  map[string]string{"u8": "03c80300ff", "u16": "0100ffff090009000000", "u32": "ffffffff00000000050000000500000001000000", "u64": "ffffffffffffffff0000000000000000000000000000008001000000000000000500000000000000", "i8": "ff807fff00", "i16": "fbff2c0100802c010100", "i32": "00000000f9ffffff07000000f9ffffffffffff7f", "i64": "000000000000008005000000000000000500000000000000ffffffffffffff7fffffffffffffffff", "f16": "003800b4ff7b003800fc", "bf": "c03fc07f627f0080c03f", "f32": "0000003cec78ad60000000800000c07f0000807f000020400000204095bfd6b3000000000000c07f", "f64": "9a9999999999b93f555555555555d53f039300aa4bdd4dfe48afbc9af2d77a3e8dedb5a0f7c6a03e", "sc": "000070c0"},
		response: "0a0574797065731201312a0f0a036633321204465033321a0202052a0f0a03753634120542595445531a01022a0d0a0262661204424631361a01052a0a0a02736312044650333232280000003cec78ad60000000800000c07f0000807f000020400000204095bfd6b3000000000000c07f32331600000031383434363734343037333730393535313631353a3015000000393232333337323033363835343737353830383a32320ac03fc07f627f0080c03f3204000070c0",
	},
	{name: "response mlp all", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		id:   "req-7",
		rows: 1, outputs: []int{0, 1, 2},
		inputs:   []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		results:  map[string]string{"logits": "cdcccc3d6666663f6666663f000080bf9a99993ecdcc4c3ecdcccc3d00000000", "flag": "0100", "count": "0c00000000000000"},
		response: "0a036d6c701201331a057265712d372a120a066c6f676974731204465033321a0202042a0f0a04666c61671204424f4f4c1a01022a0e0a05636f756e741205494e5436343220cdcccc3d6666663f6666663f000080bf9a99993ecdcc4c3ecdcccc3d000000003202010032080c00000000000000",
	},
	{name: "response mlp labels whole tensor", model: "mlp",
		ins:  []tIn{{"x", "FP32", []int64{2, 3}, nil}, {"ids", "INT8", []int64{4}, nil}, {"h", "FP16", []int64{2}, nil}},
		raw:  []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		outs: []tOut{{"flag", nil}, {"logits", i64Param(4)}},
		rows: 1, outputs: []int{1, 0},
		classes:  map[int]int{0: 4},
		inputs:   []string{"000000000000803e0000003f0000403f0000803f0000a03f", "01fe03fc", "003e00b4"},
		results:  map[string]string{"logits": "cdcccc3d6666663f6666663f000080bf9a99993ecdcc4c3ecdcccc3d00000000", "flag": "0001", "count": "0c00000000000000"},
		response: "0a036d6c701201332a0f0a04666c61671204424f4f4c1a01022a120a066c6f67697473120542595445531a010432020001323c0a000000302e3930303030303a310e000000302e3930303030303a323a646f670a000000302e3330303030303a340a000000302e3230303030303a35",
	},
	{name: "batched disagree", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{2, 2}, nil}, {"b", "INT32", []int64{3}, nil}, {"c", "FP32", []int64{3}, nil}},
		raw: []string{"000000000000803f0000004000004040", "010000000200000003000000", "0000803f0000004000004040"},
		msg: "batched inputs ['a', 'b'] disagree on the batch size: [2, 3]"},
	{name: "batched exceeds", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{9, 2}, nil}, {"b", "INT32", []int64{9}, nil}, {"c", "FP32", []int64{3}, nil}},
		raw: []string{"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000000000000000000000000000000000000000000000000000", "0000803f0000004000004040"},
		msg: "batch size 9 exceeds max_batch_size 8 of model 'rows' (version 1) (exported batch sizes [1, 4, 8]); split the request"},
	{name: "batched zero rows", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{0, 2}, nil}, {"b", "INT32", []int64{0}, nil}, {"c", "FP32", []int64{3}, nil}},
		raw: []string{"", "", "0000803f0000004000004040"},
		msg: "input 'a': expected shape [-1, 2], got [0, 2]"},
	{name: "batched unbatched input shape", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{2, 2}, nil}, {"b", "INT32", []int64{2}, nil}, {"c", "FP32", []int64{2}, nil}},
		raw: []string{"000000000000803f0000004000004040", "07000000f8ffffff", "0000803f00000040"},
		msg: "input 'c': expected shape [3], got [2]"},
	{name: "batched huge raw", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{4611686018427387904, 2}, nil}, {"b", "INT32", []int64{2}, nil}, {"c", "FP32", []int64{3}, nil}},
		raw: []string{"", "07000000f8ffffff", "0000803f0000004000004040"},
		msg: "input 'a': raw contents hold 0 bytes; expected 36893488147419103232 (shape [4611686018427387904, 2] x 4 bytes per FP32 element)"},
	{name: "batched huge typed", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{4611686018427387904, 2}, nil}},
		msg: "input 'a': no data; expected raw_input_contents or contents.fp32_contents with 9223372036854775808 elements (shape [4611686018427387904, 2])"},
	{name: "batched huge typed count", model: "rows",
		ins: []tIn{{"a", "FP32", []int64{4611686018427387904, 2}, &inferencepb.InferTensorContents{Fp32Contents: []float32{1.0}}}},
		msg: "input 'a': contents.fp32_contents holds 1 elements; expected 9223372036854775808 (shape [4611686018427387904, 2])"},
	{name: "ok batched", model: "rows",
		ins:  []tIn{{"c", "FP32", []int64{3}, nil}, {"b", "INT32", []int64{2}, nil}, {"a", "FP32", []int64{2, 2}, nil}},
		raw:  []string{"0000803f0000004000004040", "07000000f8ffffff", "000000000000803f0000004000004040"},
		rows: 2, outputs: []int{0, 1},
		inputs: []string{"000000000000803f0000004000004040", "07000000f8ffffff", "0000803f0000004000004040"},
	},
	{name: "ok batched max", model: "rows",
		ins:  []tIn{{"a", "FP32", []int64{8, 2}, nil}, {"b", "INT32", []int64{8}, nil}, {"c", "FP32", []int64{3}, nil}},
		raw:  []string{"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "0000000000000000000000000000000000000000000000000000000000000000", "0000803f0000004000004040"},
		rows: 8, outputs: []int{0, 1},
		inputs: []string{"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "0000000000000000000000000000000000000000000000000000000000000000", "0000803f0000004000004040"},
	},
	{name: "batcher disagree", model: "dyn",
		ins: []tIn{{"a", "FP32", []int64{2, 2}, nil}, {"b", "INT32", []int64{3}, nil}},
		raw: []string{"000000000000803f0000004000004040", "010000000200000003000000"},
		msg: "model 'dyn/2': inputs disagree on the batch dimension: 'a' has 2 rows, 'b' has 3"},
	{name: "batcher exceeds", model: "dyn",
		ins: []tIn{{"a", "FP32", []int64{9, 2}, nil}, {"b", "INT32", []int64{9}, nil}},
		raw: []string{"000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000000000000000000000000000000000000000000000000000"},
		msg: "model 'dyn/2': request batch size 9 exceeds the model's max_batch_size 8 (exported batch sizes [1, 4, 8]); split the request"},
	{name: "batcher scalar", model: "dynscalar",
		ins: []tIn{{"a", "FP32", []int64{1, 2}, nil}, {"t", "FP32", []int64{}, nil}},
		raw: []string{"0000803f00000040", "0000803f"},
		msg: "model 'dynscalar/1': input 't' is a scalar but needs a leading batch dimension"},
	{name: "batched none declared", model: "nobatched",
		ins:  []tIn{{"z", "INT32", []int64{2}, nil}},
		raw:  []string{"0100000002000000"},
		rows: 1, outputs: []int{0},
		inputs: []string{"0100000002000000"},
	},
	{name: "response batched per row labels", model: "rows",
		ins:  []tIn{{"c", "FP32", []int64{3}, nil}, {"b", "INT32", []int64{2}, nil}, {"a", "FP32", []int64{2, 2}, nil}},
		raw:  []string{"0000803f0000004000004040", "07000000f8ffffff", "000000000000803f0000004000004040"},
		outs: []tOut{{"y", i64Param(2)}, {"s", nil}},
		id:   "b",
		rows: 2, outputs: []int{0, 1},
		classes:  map[int]int{0: 2},
		inputs:   []string{"000000000000803f0000004000004040", "07000000f8ffffff", "0000803f0000004000004040"},
		results:  map[string]string{"y": "0000803f00000040000040400000c0400000a04000008040", "s": "000000000000e03f"},
		response: "0a04726f77731201311a01622a0e0a0179120542595445531a0202022a090a017312044650363432440d000000332e3030303030303a323a72320d000000322e3030303030303a313a72310d000000362e3030303030303a303a72300d000000352e3030303030303a313a72313208000000000000e03f",
	},
	{name: "response batched all", model: "rows",
		ins:  []tIn{{"c", "FP32", []int64{3}, nil}, {"b", "INT32", []int64{2}, nil}, {"a", "FP32", []int64{2, 2}, nil}},
		raw:  []string{"0000803f0000004000004040", "07000000f8ffffff", "000000000000803f0000004000004040"},
		rows: 2, outputs: []int{0, 1},
		inputs:   []string{"000000000000803f0000004000004040", "07000000f8ffffff", "0000803f0000004000004040"},
		results:  map[string]string{"y": "0000803f00000040000040400000c0400000a04000008040", "s": "000000000000e03f"},
		response: "0a04726f77731201312a0d0a01791204465033321a0202032a090a017312044650363432180000803f00000040000040400000c0400000a040000080403208000000000000e03f",
	},
	{name: "batcher disagree quoted names", model: "quoted",
		ins: []tIn{{"it's", "FP32", []int64{1}, nil}, {"x\"y'z", "FP32", []int64{2}, nil}},
		raw: []string{"0000803f", "0000803f00000040"},
		msg: "model 'quoted/1': inputs disagree on the batch dimension: \"it's\" has 1 rows, 'x\"y\\'z' has 2"},
	{name: "ok batcher", model: "dyn",
		ins:  []tIn{{"a", "FP32", []int64{2, 2}, nil}, {"b", "INT32", []int64{2}, nil}},
		raw:  []string{"000000000000803f0000004000004040", "07000000f8ffffff"},
		rows: 2, outputs: []int{0},
		inputs: []string{"000000000000803f0000004000004040", "07000000f8ffffff"},
	},
}

func TestPrepareAnswers(t *testing.T) {
	for _, c := range prepareCases {
		t.Run(c.name, func(t *testing.T) {
			s := testSignature(t, c.model)
			req := c.request(t)
			p, err := s.Prepare(req, nil)
			if c.msg != "" {
				st := status.Convert(err)
				if err == nil || st.Code() != codes.InvalidArgument || st.Message() != c.msg {
					t.Fatalf("prepare: %v\nwant INVALID_ARGUMENT %q", err, c.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("prepare: %v", err)
			}
			if p.Rows != c.rows || !slices.Equal(p.Outputs, c.outputs) {
				t.Errorf("rows %d outputs %v; want %d %v", p.Rows, p.Outputs, c.rows, c.outputs)
			}
			if len(p.Classes) != len(c.classes) {
				t.Errorf("classes %v; want %v", p.Classes, c.classes)
			}
			for i, k := range c.classes {
				if p.Classes[i] != k {
					t.Errorf("classes %v; want %v", p.Classes, c.classes)
				}
			}
			for i, want := range c.inputs {
				if got := hex.EncodeToString(p.Inputs[i]); got != want {
					t.Errorf("input %s: %s; want %s", s.inputs[i].name, got, want)
				}
			}
			if c.response == "" {
				return
			}
			results := make([]Tensor, len(s.outputs))
			for name, h := range c.results {
				i := s.outputIndex[name]
				results[i] = Tensor{Shape: s.OutputShape(p, i), Data: unhex(t, h)}
			}
			resp, err := s.Response(req, p, results)
			if err != nil {
				t.Fatalf("response: %v", err)
			}
			var wire []byte
			for _, piece := range resp.Marshal() {
				wire = append(wire, piece...)
			}
			if got := hex.EncodeToString(wire); got != c.response {
				want := &inferencepb.ModelInferResponse{}
				if err := proto.Unmarshal(unhex(t, c.response), want); err != nil {
					t.Fatal(err)
				}
				t.Fatalf("response\n got %x\nwant %v", wire, want)
			}
			// the generated message says the same
			same, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp.ToProto())
			if err != nil || hex.EncodeToString(same) != c.response {
				t.Fatalf("ToProto marshals to %x (%v)", same, err)
			}
		})
	}
}
