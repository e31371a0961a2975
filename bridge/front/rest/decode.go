package rest

// The REST codec, inference requests: Open Inference Protocol (KServe v2) JSON and Triton's
// binary tensor data extension, decoded straight into the request.Request a gRPC call is
// parsed into (no protobuf in between): every input's bytes raw, JSON data written as
// little-endian elements, binary data cut from the body (a view). Pure functions, no I/O. The
// codec only translates: what a request means (names, shapes, datatypes against the model,
// byte counts) is judged by request.Signature.Prepare exactly as for a gRPC call. It refuses
// only what it cannot translate: JSON that is not JSON, fields of the wrong JSON type, a data
// element that the datatype cannot hold, binary data that does not add up, FP16/BF16 as JSON.

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// Parameters of the binary tensor data extension (consumed by the codec, never forwarded).
const (
	paramBinaryDataSize   = "binary_data_size"
	paramBinaryData       = "binary_data"
	paramBinaryDataOutput = "binary_data_output"
	paramShmRegion        = request.ParamShmRegion
)

// outputPlan says which outputs the response carries as binary data.
type outputPlan struct {
	allBinary bool            // request parameter binary_data_output
	binary    map[string]bool // per requested output: parameters.binary_data
}

func (p *outputPlan) isBinary(name string) bool {
	if b, ok := p.binary[name]; ok {
		return b
	}
	return p.allBinary
}

// itemSizes of the fixed-size datatypes (BYTES is length-prefixed).
var itemSizes = map[string]int{
	"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8,
	"INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
	"FP16": 2, "BF16": 2, "FP32": 4, "FP64": 8,
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case jsonNumber:
		return string(x)
	case []any:
		return "an array"
	case *jsonObject:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func asObject(v any, path string) (*jsonObject, error) {
	o, ok := v.(*jsonObject)
	if !ok {
		return nil, status.BadRequest("%s: expected a JSON object, got %s", path, describe(v))
	}
	return o, nil
}

func stringField(o *jsonObject, key, path string, required bool) (string, error) {
	v, ok := o.get(key)
	if !ok {
		if required {
			return "", status.BadRequest("%s: %q is required", path, key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", status.BadRequest("%s.%s: expected a string, got %s", path, key, describe(v))
	}
	return s, nil
}

// parameterOf converts one JSON parameter value to the protobuf InferParameter.
func parameterOf(v any, path string) (*inferencepb.InferParameter, error) {
	switch x := v.(type) {
	case bool:
		return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: x}}, nil
	case string:
		return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: x}}, nil
	case jsonNumber:
		s := string(x)
		if !strings.ContainsAny(s, ".eEIN") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: n}}, nil
			}
			if n, err := strconv.ParseUint(s, 10, 64); err == nil {
				return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Uint64Param{Uint64Param: n}}, nil
			}
		}
		f, err := parseFloat(x, 64)
		if err != nil {
			return nil, status.BadRequest("%s: %s is not a number this server can hold", path, s)
		}
		return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_DoubleParam{DoubleParam: f}}, nil
	}
	return nil, status.BadRequest("%s: a parameter must be a boolean, number or string, got %s", path, describe(v))
}

// parameters converts a JSON parameters object, leaving out the binary-extension keys in skip.
func parameters(v any, path string, skip ...string) (map[string]*inferencepb.InferParameter, *jsonObject, error) {
	o, err := asObject(v, path)
	if err != nil {
		return nil, nil, err
	}
	var out map[string]*inferencepb.InferParameter
	for _, k := range o.keys {
		skipped := false
		for _, s := range skip {
			skipped = skipped || k == s
		}
		if skipped {
			continue
		}
		p, err := parameterOf(o.values[k], path+"."+k)
		if err != nil {
			return nil, nil, err
		}
		if out == nil {
			out = map[string]*inferencepb.InferParameter{}
		}
		out[k] = p
	}
	return out, o, nil
}

func boolParam(o *jsonObject, key, path string) (value, given bool, err error) {
	v, ok := o.get(key)
	if !ok {
		return false, false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, false, status.BadRequest("%s.%s: expected true or false, got %s", path, key, describe(v))
	}
	return b, true, nil
}

func parseFloat(n jsonNumber, bits int) (float64, error) {
	switch n {
	case "NaN": // the quiet NaN numpy and JAX write (Go's math.NaN() has another payload)
		return math.Float64frombits(0x7ff8000000000000), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	f, err := strconv.ParseFloat(string(n), bits)
	if err != nil {
		return 0, err
	}
	return f, nil
}

// shapeElements is the element count of a shape; false when a dimension is negative or the
// count overflows (the worker judges such a shape).
func shapeElements(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || d != 0 && n > math.MaxInt64/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// shapeText writes a shape as the workers do: [2, 3].
func shapeText(shape []int64) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// flatten appends the leaves of nested arrays in row-major order.
func flatten(v any, out []any) []any {
	if a, ok := v.([]any); ok {
		for _, e := range a {
			out = flatten(e, out)
		}
		return out
	}
	return append(out, v)
}

// tensorBuilder writes JSON elements as raw little-endian bytes.
type tensorBuilder struct {
	name     string
	datatype string
	raw      []byte
}

func intRange(datatype string) (int, bool) { // bits, signed
	switch datatype {
	case "INT8":
		return 8, true
	case "INT16":
		return 16, true
	case "INT32":
		return 32, true
	case "INT64":
		return 64, true
	case "UINT8":
		return 8, false
	case "UINT16":
		return 16, false
	case "UINT32":
		return 32, false
	case "UINT64":
		return 64, false
	}
	return 0, false
}

func (t *tensorBuilder) add(v any, index int) error {
	where := func() string { return fmt.Sprintf("input '%s': data element %d", t.name, index) }
	switch t.datatype {
	case "BOOL":
		b, ok := v.(bool)
		if !ok {
			return status.BadRequest("%s: expected true or false for BOOL, got %s", where(), describe(v))
		}
		var x byte
		if b {
			x = 1
		}
		t.raw = append(t.raw, x)
	case "FP32", "FP64":
		n, ok := v.(jsonNumber)
		if !ok {
			return status.BadRequest("%s: expected a number for %s, got %s", where(), t.datatype, describe(v))
		}
		bits := 32
		if t.datatype == "FP64" {
			bits = 64
		}
		f, err := parseFloat(n, bits)
		if err != nil {
			return status.BadRequest("%s: %s does not fit %s", where(), string(n), t.datatype)
		}
		if bits == 32 {
			t.raw = binary.LittleEndian.AppendUint32(t.raw, math.Float32bits(float32(f)))
		} else {
			t.raw = binary.LittleEndian.AppendUint64(t.raw, math.Float64bits(f))
		}
	case "BYTES":
		s, ok := v.(string)
		if !ok {
			return status.BadRequest("%s: expected a string for BYTES, got %s", where(), describe(v))
		}
		t.raw = binary.LittleEndian.AppendUint32(t.raw, uint32(len(s)))
		t.raw = append(t.raw, s...)
	default:
		bits, signed := intRange(t.datatype)
		if bits == 0 {
			// Unknown datatype: nothing to write the element as.
			return status.BadRequest("input '%s': datatype %q cannot be given as JSON data (known: BOOL, "+
				"UINT8..UINT64, INT8..INT64, FP32, FP64, BYTES; FP16 and BF16 as binary data)",
				t.name, t.datatype)
		}
		n, ok := v.(jsonNumber)
		if !ok {
			return status.BadRequest("%s: expected an integer for %s, got %s", where(), t.datatype, describe(v))
		}
		if signed {
			x, err := strconv.ParseInt(string(n), 10, bits)
			if err != nil {
				return status.BadRequest("%s: %s is not an integer that fits %s", where(), string(n), t.datatype)
			}
			for i := 0; i < bits/8; i++ {
				t.raw = append(t.raw, byte(uint64(x)>>(8*i)))
			}
		} else {
			x, err := strconv.ParseUint(string(n), 10, bits)
			if err != nil {
				return status.BadRequest("%s: %s is not an integer that fits %s", where(), string(n), t.datatype)
			}
			for i := 0; i < bits/8; i++ {
				t.raw = append(t.raw, byte(x>>(8*i)))
			}
		}
	}
	return nil
}

// restInput is one input of the JSON request before its data is written.
type restInput struct {
	tensor     request.Input
	data       any    // JSON data, when given
	hasData    bool   // "data" present
	binarySize int64  // binary_data_size, or -1
	binary     []byte // its bytes, cut from the body
	shm        bool   // shared_memory_region parameter: the bytes are in a registered region
}

// decodeInferRequest translates a REST infer body into the Request of model/version.
// jsonLength is the Inference-Header-Content-Length header (-1 when absent: the whole body
// is JSON). Every input not in shared memory is raw: binary data as a view of the body, JSON
// data written as elements.
func decodeInferRequest(body []byte, jsonLength int64, model, version string) (*request.Request, *outputPlan, error) {
	header, rest := body, []byte(nil)
	if jsonLength >= 0 {
		if jsonLength > int64(len(body)) {
			return nil, nil, status.BadRequest("Inference-Header-Content-Length %d exceeds the body (%d bytes)", jsonLength, len(body))
		}
		header, rest = body[:jsonLength], body[jsonLength:]
	}
	doc, err := parseJSON(header)
	if err != nil {
		msg := err.Error()
		if se, ok := err.(*jsonSyntaxError); ok && jsonLength < 0 && se.msg == trailingData {
			msg += " (binary tensor data after the JSON needs the Inference-Header-Content-Length header)"
		}
		return nil, nil, status.BadRequest("request body: %s", msg)
	}
	top, err := asObject(doc, "request body")
	if err != nil {
		return nil, nil, err
	}
	req := &request.Request{Model: model, Version: version}
	if req.ID, err = stringField(top, "id", "request", false); err != nil {
		return nil, nil, err
	}
	plan := &outputPlan{binary: map[string]bool{}}
	if v, ok := top.get("parameters"); ok {
		var o *jsonObject
		if req.Params, o, err = parameters(v, "parameters", paramBinaryDataOutput); err != nil {
			return nil, nil, err
		}
		if plan.allBinary, _, err = boolParam(o, paramBinaryDataOutput, "parameters"); err != nil {
			return nil, nil, err
		}
	}
	rawInputs, err := decodeInputs(top, rest)
	if err != nil {
		return nil, nil, err
	}
	for _, in := range rawInputs {
		req.Inputs = append(req.Inputs, in.tensor)
		switch {
		case in.binarySize >= 0:
			req.Raw = append(req.Raw, in.binary)
		case in.hasData:
			elements := flatten(in.data, nil)
			if in.tensor.Datatype == "FP16" || in.tensor.Datatype == "BF16" {
				return nil, nil, status.BadRequest("input '%s': %s data cannot be sent as JSON; send it as "+
					"binary data (parameters.binary_data_size, Triton's binary tensor data extension)",
					in.tensor.Name, in.tensor.Datatype)
			}
			t := &tensorBuilder{name: in.tensor.Name, datatype: in.tensor.Datatype}
			t.raw = make([]byte, 0, len(elements)*max(1, itemSizes[t.datatype]))
			for i, e := range elements {
				if err := t.add(e, i); err != nil {
					return nil, nil, err
				}
			}
			if want, ok := shapeElements(in.tensor.Shape); ok && want != int64(len(elements)) {
				return nil, nil, status.BadRequest("input '%s': \"data\" holds %d elements; expected %d (shape %s)",
					in.tensor.Name, len(elements), want, shapeText(in.tensor.Shape))
			}
			req.Raw = append(req.Raw, t.raw)
		}
	}
	if v, ok := top.get("outputs"); ok {
		list, ok := v.([]any)
		if !ok {
			return nil, nil, status.BadRequest("outputs: expected an array of objects, got %s", describe(v))
		}
		for i, e := range list {
			path := fmt.Sprintf("outputs[%d]", i)
			o, err := asObject(e, path)
			if err != nil {
				return nil, nil, err
			}
			name, err := stringField(o, "name", path, true)
			if err != nil {
				return nil, nil, err
			}
			out := request.Output{Name: name}
			if pv, ok := o.get("parameters"); ok {
				var po *jsonObject
				ppath := fmt.Sprintf("output '%s' parameters", name)
				if out.Params, po, err = parameters(pv, ppath, paramBinaryData); err != nil {
					return nil, nil, err
				}
				b, given, err := boolParam(po, paramBinaryData, ppath)
				if err != nil {
					return nil, nil, err
				}
				if given {
					plan.binary[name] = b
				}
			}
			req.Outputs = append(req.Outputs, out)
		}
	}
	return req, plan, nil
}

// decodeInputs reads "inputs" and cuts each binary input's bytes from rest, in order.
func decodeInputs(top *jsonObject, rest []byte) ([]*restInput, error) {
	v, ok := top.get("inputs")
	if !ok {
		return nil, status.BadRequest("request: \"inputs\" is required")
	}
	list, ok := v.([]any)
	if !ok {
		return nil, status.BadRequest("inputs: expected an array of objects, got %s", describe(v))
	}
	var out []*restInput
	offset := 0
	for i, e := range list {
		path := fmt.Sprintf("inputs[%d]", i)
		o, err := asObject(e, path)
		if err != nil {
			return nil, err
		}
		name, err := stringField(o, "name", path, true)
		if err != nil {
			return nil, err
		}
		datatype, err := stringField(o, "datatype", path, true)
		if err != nil {
			return nil, err
		}
		tensor := request.Input{Name: name, Datatype: datatype}
		sv, ok := o.get("shape")
		if !ok {
			return nil, status.BadRequest("%s: \"shape\" is required", path)
		}
		dims, ok := sv.([]any)
		if !ok {
			return nil, status.BadRequest("input '%s': shape: expected an array of integers, got %s", name, describe(sv))
		}
		for j, d := range dims {
			n, ok := d.(jsonNumber)
			x, err := strconv.ParseInt(string(n), 10, 64)
			if !ok || err != nil {
				return nil, status.BadRequest("input '%s': shape[%d]: expected an integer, got %s", name, j, describe(d))
			}
			tensor.Shape = append(tensor.Shape, x)
		}
		in := &restInput{binarySize: -1}
		if pv, ok := o.get("parameters"); ok {
			ppath := fmt.Sprintf("input '%s' parameters", name)
			params, po, err := parameters(pv, ppath, paramBinaryDataSize)
			if err != nil {
				return nil, err
			}
			tensor.Params = params
			_, in.shm = params[paramShmRegion]
			if bv, ok := po.get(paramBinaryDataSize); ok {
				n, isNum := bv.(jsonNumber)
				size, err := strconv.ParseInt(string(n), 10, 64)
				if !isNum || err != nil || size < 0 {
					return nil, status.BadRequest("%s.%s: expected an integer >= 0, got %s", ppath, paramBinaryDataSize, describe(bv))
				}
				in.binarySize = size
			}
		}
		in.tensor = tensor
		in.data, in.hasData = o.get("data")
		switch {
		case in.hasData && in.binarySize >= 0:
			return nil, status.BadRequest("input '%s': has both \"data\" and parameters.binary_data_size; send its data one way", name)
		case in.binarySize >= 0:
			if int64(len(rest)-offset) < in.binarySize {
				return nil, status.BadRequest("input '%s': binary_data_size %d goes past the end of the binary data "+
					"(%d bytes after the JSON, %d of them left for this input)", name, in.binarySize, len(rest), len(rest)-offset)
			}
			in.binary = rest[offset : offset+int(in.binarySize)]
			offset += int(in.binarySize)
		case !in.hasData && !in.shm:
			return nil, status.BadRequest("input '%s': no \"data\" and no parameters.binary_data_size (or shared memory parameters)", name)
		}
		out = append(out, in)
	}
	if offset != len(rest) {
		return nil, status.BadRequest("%d bytes of binary data after the JSON are not claimed by any input's "+
			"binary_data_size (the inputs claim %d)", len(rest), offset)
	}
	return out, nil
}
