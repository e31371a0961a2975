package main

// The REST codec: Open Inference Protocol (KServe v2) JSON and Triton's binary tensor data
// extension <-> the protobuf messages of inference.GRPCInferenceService. Pure functions, no
// I/O. The codec only translates: what a request means (names, shapes, datatypes against the
// model, element counts, byte counts) is judged by the worker's servicer exactly as for a gRPC
// call. The codec refuses only what it cannot translate: JSON that is not JSON, fields of the
// wrong JSON type, a data element that the datatype cannot hold, binary data that does not
// add up, FP16/BF16 as JSON.

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// httpStatusOf is THE table from a gRPC status code to the HTTP status of a REST answer:
// google.rpc.Code's documented HTTP mapping, which agrees with Triton's HTTP front for every
// code Triton answers with (INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503, UNIMPLEMENTED 501,
// INVALID_ARGUMENT 400) and with KServe's (404 unknown model, 400 invalid input, 503 not ready).
var httpStatusOf = map[codes.Code]int{
	codes.OK:                 http.StatusOK,
	codes.Canceled:           499, // client closed request
	codes.Unknown:            http.StatusInternalServerError,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted:            http.StatusConflict,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Internal:           http.StatusInternalServerError,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DataLoss:           http.StatusInternalServerError,
	codes.Unauthenticated:    http.StatusUnauthorized,
}

func httpStatus(c codes.Code) int {
	if s, ok := httpStatusOf[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// restError is a request the codec cannot translate: HTTP status and one line.
type restError struct {
	status int
	msg    string
}

func (e *restError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &restError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// Parameters of the binary tensor data extension (consumed by the codec, never forwarded).
const (
	paramBinaryDataSize   = "binary_data_size"
	paramBinaryData       = "binary_data"
	paramBinaryDataOutput = "binary_data_output"
	paramShmRegion        = "shared_memory_region"
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
		return nil, badRequest("%s: expected a JSON object, got %s", path, describe(v))
	}
	return o, nil
}

func stringField(o *jsonObject, key, path string, required bool) (string, error) {
	v, ok := o.get(key)
	if !ok {
		if required {
			return "", badRequest("%s: %q is required", path, key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", badRequest("%s.%s: expected a string, got %s", path, key, describe(v))
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
			return nil, badRequest("%s: %s is not a number this server can hold", path, s)
		}
		return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_DoubleParam{DoubleParam: f}}, nil
	}
	return nil, badRequest("%s: a parameter must be a boolean, number or string, got %s", path, describe(v))
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
		return false, false, badRequest("%s.%s: expected true or false, got %s", path, key, describe(v))
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

// tensorBuilder writes JSON elements either as raw little-endian bytes or as typed contents.
type tensorBuilder struct {
	name     string
	datatype string
	raw      []byte
	asRaw    bool
	contents *inferencepb.InferTensorContents
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
			return badRequest("%s: expected true or false for BOOL, got %s", where(), describe(v))
		}
		if t.asRaw {
			var x byte
			if b {
				x = 1
			}
			t.raw = append(t.raw, x)
		} else {
			t.contents.BoolContents = append(t.contents.BoolContents, b)
		}
	case "FP32", "FP64":
		n, ok := v.(jsonNumber)
		if !ok {
			return badRequest("%s: expected a number for %s, got %s", where(), t.datatype, describe(v))
		}
		bits := 32
		if t.datatype == "FP64" {
			bits = 64
		}
		f, err := parseFloat(n, bits)
		if err != nil {
			return badRequest("%s: %s does not fit %s", where(), string(n), t.datatype)
		}
		switch {
		case bits == 32 && t.asRaw:
			t.raw = binary.LittleEndian.AppendUint32(t.raw, math.Float32bits(float32(f)))
		case bits == 32:
			t.contents.Fp32Contents = append(t.contents.Fp32Contents, float32(f))
		case t.asRaw:
			t.raw = binary.LittleEndian.AppendUint64(t.raw, math.Float64bits(f))
		default:
			t.contents.Fp64Contents = append(t.contents.Fp64Contents, f)
		}
	case "BYTES":
		s, ok := v.(string)
		if !ok {
			return badRequest("%s: expected a string for BYTES, got %s", where(), describe(v))
		}
		if t.asRaw {
			t.raw = binary.LittleEndian.AppendUint32(t.raw, uint32(len(s)))
			t.raw = append(t.raw, s...)
		} else {
			t.contents.BytesContents = append(t.contents.BytesContents, []byte(s))
		}
	default:
		bits, signed := intRange(t.datatype)
		if bits == 0 {
			// Unknown datatype: nothing to write the element as. The bridge names the
			// datatype problem; hand it the request with no elements only if there are none.
			return badRequest("input '%s': datatype %q cannot be given as JSON data (known: BOOL, "+
				"UINT8..UINT64, INT8..INT64, FP32, FP64, BYTES; FP16 and BF16 as binary data)",
				t.name, t.datatype)
		}
		n, ok := v.(jsonNumber)
		if !ok {
			return badRequest("%s: expected an integer for %s, got %s", where(), t.datatype, describe(v))
		}
		if signed {
			x, err := strconv.ParseInt(string(n), 10, bits)
			if err != nil {
				return badRequest("%s: %s is not an integer that fits %s", where(), string(n), t.datatype)
			}
			switch {
			case t.asRaw:
				for i := 0; i < bits/8; i++ {
					t.raw = append(t.raw, byte(uint64(x)>>(8*i)))
				}
			case bits == 64:
				t.contents.Int64Contents = append(t.contents.Int64Contents, x)
			default:
				t.contents.IntContents = append(t.contents.IntContents, int32(x))
			}
		} else {
			x, err := strconv.ParseUint(string(n), 10, bits)
			if err != nil {
				return badRequest("%s: %s is not an integer that fits %s", where(), string(n), t.datatype)
			}
			switch {
			case t.asRaw:
				for i := 0; i < bits/8; i++ {
					t.raw = append(t.raw, byte(x>>(8*i)))
				}
			case bits == 64:
				t.contents.Uint64Contents = append(t.contents.Uint64Contents, x)
			default:
				t.contents.UintContents = append(t.contents.UintContents, uint32(x))
			}
		}
	}
	return nil
}

// restInput is one input of the JSON request before its data is written.
type restInput struct {
	tensor     *inferencepb.ModelInferRequest_InferInputTensor
	data       any    // JSON data, when given
	hasData    bool   // "data" present
	binarySize int64  // binary_data_size, or -1
	binary     []byte // its bytes, cut from the body
	shm        bool   // shared_memory_region parameter: the bytes are in a registered region
}

// decodeInferRequest translates a REST infer body into a ModelInferRequest. jsonLength is the
// Inference-Header-Content-Length header (-1 when absent: the whole body is JSON). Inputs go
// as typed contents when every input is JSON, else every input as raw_input_contents (the
// protocol allows one form per request).
func decodeInferRequest(body []byte, jsonLength int64, model, version string) (*inferencepb.ModelInferRequest, *outputPlan, error) {
	header, rest := body, []byte(nil)
	if jsonLength >= 0 {
		if jsonLength > int64(len(body)) {
			return nil, nil, badRequest("Inference-Header-Content-Length %d exceeds the body (%d bytes)", jsonLength, len(body))
		}
		header, rest = body[:jsonLength], body[jsonLength:]
	}
	doc, err := parseJSON(header)
	if err != nil {
		msg := err.Error()
		if se, ok := err.(*jsonSyntaxError); ok && jsonLength < 0 && se.msg == trailingData {
			msg += " (binary tensor data after the JSON needs the Inference-Header-Content-Length header)"
		}
		return nil, nil, badRequest("request body: %s", msg)
	}
	top, err := asObject(doc, "request body")
	if err != nil {
		return nil, nil, err
	}
	req := &inferencepb.ModelInferRequest{ModelName: model, ModelVersion: version}
	if req.Id, err = stringField(top, "id", "request", false); err != nil {
		return nil, nil, err
	}
	plan := &outputPlan{binary: map[string]bool{}}
	if v, ok := top.get("parameters"); ok {
		var o *jsonObject
		if req.Parameters, o, err = parameters(v, "parameters", paramBinaryDataOutput); err != nil {
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
	anyBinary := false
	for _, in := range rawInputs {
		anyBinary = anyBinary || in.binarySize >= 0
	}
	for _, in := range rawInputs {
		req.Inputs = append(req.Inputs, in.tensor)
		switch {
		case in.binarySize >= 0:
			req.RawInputContents = append(req.RawInputContents, in.binary)
		case in.hasData:
			elements := flatten(in.data, nil)
			if in.tensor.Datatype == "FP16" || in.tensor.Datatype == "BF16" {
				return nil, nil, badRequest("input '%s': %s data cannot be sent as JSON; send it as "+
					"binary data (parameters.binary_data_size, Triton's binary tensor data extension)",
					in.tensor.Name, in.tensor.Datatype)
			}
			t := &tensorBuilder{name: in.tensor.Name, datatype: in.tensor.Datatype, asRaw: anyBinary}
			if anyBinary {
				t.raw = make([]byte, 0, len(elements)*max(1, itemSizes[t.datatype]))
			} else {
				t.contents = &inferencepb.InferTensorContents{}
			}
			for i, e := range elements {
				if err := t.add(e, i); err != nil {
					return nil, nil, err
				}
			}
			if anyBinary {
				req.RawInputContents = append(req.RawInputContents, t.raw)
			} else if len(elements) > 0 {
				in.tensor.Contents = t.contents
			}
		}
	}
	if v, ok := top.get("outputs"); ok {
		list, ok := v.([]any)
		if !ok {
			return nil, nil, badRequest("outputs: expected an array of objects, got %s", describe(v))
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
			out := &inferencepb.ModelInferRequest_InferRequestedOutputTensor{Name: name}
			if pv, ok := o.get("parameters"); ok {
				var po *jsonObject
				ppath := fmt.Sprintf("output '%s' parameters", name)
				if out.Parameters, po, err = parameters(pv, ppath, paramBinaryData); err != nil {
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
		return nil, badRequest("request: \"inputs\" is required")
	}
	list, ok := v.([]any)
	if !ok {
		return nil, badRequest("inputs: expected an array of objects, got %s", describe(v))
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
		tensor := &inferencepb.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype}
		sv, ok := o.get("shape")
		if !ok {
			return nil, badRequest("%s: \"shape\" is required", path)
		}
		dims, ok := sv.([]any)
		if !ok {
			return nil, badRequest("input '%s': shape: expected an array of integers, got %s", name, describe(sv))
		}
		for j, d := range dims {
			n, ok := d.(jsonNumber)
			x, err := strconv.ParseInt(string(n), 10, 64)
			if !ok || err != nil {
				return nil, badRequest("input '%s': shape[%d]: expected an integer, got %s", name, j, describe(d))
			}
			tensor.Shape = append(tensor.Shape, x)
		}
		in := &restInput{tensor: tensor, binarySize: -1}
		if pv, ok := o.get("parameters"); ok {
			ppath := fmt.Sprintf("input '%s' parameters", name)
			params, po, err := parameters(pv, ppath, paramBinaryDataSize)
			if err != nil {
				return nil, err
			}
			tensor.Parameters = params
			_, in.shm = params[paramShmRegion]
			if bv, ok := po.get(paramBinaryDataSize); ok {
				n, isNum := bv.(jsonNumber)
				size, err := strconv.ParseInt(string(n), 10, 64)
				if !isNum || err != nil || size < 0 {
					return nil, badRequest("%s.%s: expected an integer >= 0, got %s", ppath, paramBinaryDataSize, describe(bv))
				}
				in.binarySize = size
			}
		}
		in.data, in.hasData = o.get("data")
		switch {
		case in.hasData && in.binarySize >= 0:
			return nil, badRequest("input '%s': has both \"data\" and parameters.binary_data_size; send its data one way", name)
		case in.binarySize >= 0:
			if int64(len(rest)-offset) < in.binarySize {
				return nil, badRequest("input '%s': binary_data_size %d goes past the end of the binary data "+
					"(%d bytes after the JSON, %d of them left for this input)", name, in.binarySize, len(rest), len(rest)-offset)
			}
			in.binary = rest[offset : offset+int(in.binarySize)]
			offset += int(in.binarySize)
		case !in.hasData && !in.shm:
			return nil, badRequest("input '%s': no \"data\" and no parameters.binary_data_size (or shared memory parameters)", name)
		}
		out = append(out, in)
	}
	if offset != len(rest) {
		return nil, badRequest("%d bytes of binary data after the JSON are not claimed by any input's "+
			"binary_data_size (the inputs claim %d)", len(rest), offset)
	}
	return out, nil
}

// --- responses -----------------------------------------------------------------------------

// parametersJSON converts protobuf parameters to a JSON object (keys sorted for stable output).
func parametersJSON(params map[string]*inferencepb.InferParameter) *jsonObject {
	o := newObject()
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		switch p := params[k].GetParameterChoice().(type) {
		case *inferencepb.InferParameter_BoolParam:
			o.set(k, p.BoolParam)
		case *inferencepb.InferParameter_Int64Param:
			o.set(k, p.Int64Param)
		case *inferencepb.InferParameter_StringParam:
			o.set(k, p.StringParam)
		case *inferencepb.InferParameter_DoubleParam:
			o.set(k, p.DoubleParam)
		case *inferencepb.InferParameter_Uint64Param:
			o.set(k, p.Uint64Param)
		}
	}
	return o
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// jsonData writes one output's raw little-endian bytes as a flat JSON array.
func jsonData(b []byte, name, datatype string, raw []byte, count int64) ([]byte, error) {
	size := itemSizes[datatype]
	if datatype == "BYTES" {
		b = append(b, '[')
		off := 0
		for i := int64(0); i < count; i++ {
			if off+4 > len(raw) || off+4+int(binary.LittleEndian.Uint32(raw[off:])) > len(raw) {
				return nil, &restError{http.StatusInternalServerError, fmt.Sprintf("output '%s': BYTES contents do not hold %d elements", name, count)}
			}
			n := int(binary.LittleEndian.Uint32(raw[off:]))
			e := raw[off+4 : off+4+n]
			if !utf8.Valid(e) {
				return nil, badRequest("output '%s': element %d is not UTF-8 text, which JSON cannot carry; "+
					"request the output with parameters.binary_data=true", name, i)
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, string(e))
			off += 4 + n
		}
		return append(b, ']'), nil
	}
	if datatype == "FP16" || datatype == "BF16" {
		return nil, badRequest("output '%s': %s data cannot be sent as JSON; request it with "+
			"parameters.binary_data=true (or the request parameter binary_data_output=true)", name, datatype)
	}
	if size == 0 || int64(len(raw)) != count*int64(size) {
		return nil, &restError{http.StatusInternalServerError, fmt.Sprintf(
			"output '%s': %d bytes of %s do not match its shape (%d elements)", name, len(raw), datatype, count)}
	}
	b = append(b, '[')
	for i := 0; i < int(count); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		e := raw[i*size : (i+1)*size]
		switch datatype {
		case "BOOL":
			b = strconv.AppendBool(b, e[0] != 0)
		case "UINT8":
			b = strconv.AppendUint(b, uint64(e[0]), 10)
		case "UINT16":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint16(e)), 10)
		case "UINT32":
			b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(e)), 10)
		case "UINT64":
			b = strconv.AppendUint(b, binary.LittleEndian.Uint64(e), 10)
		case "INT8":
			b = strconv.AppendInt(b, int64(int8(e[0])), 10)
		case "INT16":
			b = strconv.AppendInt(b, int64(int16(binary.LittleEndian.Uint16(e))), 10)
		case "INT32":
			b = strconv.AppendInt(b, int64(int32(binary.LittleEndian.Uint32(e))), 10)
		case "INT64":
			b = strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(e)), 10)
		case "FP32":
			b = appendJSONFloat(b, float64(math.Float32frombits(binary.LittleEndian.Uint32(e))), 32)
		case "FP64":
			b = appendJSONFloat(b, math.Float64frombits(binary.LittleEndian.Uint64(e)), 64)
		}
	}
	return append(b, ']'), nil
}

// typedRaw turns an output's typed contents (a server may answer that way; jaxport's workers
// answer raw) into the raw form.
func typedRaw(datatype string, c *inferencepb.InferTensorContents) []byte {
	var b []byte
	switch datatype {
	case "BOOL":
		for _, v := range c.GetBoolContents() {
			if v {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case "INT8", "INT16", "INT32":
		n := itemSizes[datatype]
		for _, v := range c.GetIntContents() {
			for i := 0; i < n; i++ {
				b = append(b, byte(uint32(v)>>(8*i)))
			}
		}
	case "UINT8", "UINT16", "UINT32":
		n := itemSizes[datatype]
		for _, v := range c.GetUintContents() {
			for i := 0; i < n; i++ {
				b = append(b, byte(v>>(8*i)))
			}
		}
	case "INT64":
		for _, v := range c.GetInt64Contents() {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	case "UINT64":
		for _, v := range c.GetUint64Contents() {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	case "FP32":
		for _, v := range c.GetFp32Contents() {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	case "FP64":
		for _, v := range c.GetFp64Contents() {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
		}
	case "BYTES":
		for _, v := range c.GetBytesContents() {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// encodeInferResponse translates a ModelInferResponse into the REST JSON header and the binary
// tensor data that follows it (outputs the plan asks for as binary, in output order).
func encodeInferResponse(resp *inferencepb.ModelInferResponse, plan *outputPlan) ([]byte, [][]byte, error) {
	b := []byte(`{"model_name":`)
	b = appendJSONString(b, resp.GetModelName())
	if resp.GetModelVersion() != "" {
		b = append(b, `,"model_version":`...)
		b = appendJSONString(b, resp.GetModelVersion())
	}
	if resp.GetId() != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, resp.GetId())
	}
	if len(resp.GetParameters()) > 0 {
		b = append(b, `,"parameters":`...)
		b = appendJSONValue(b, parametersJSON(resp.GetParameters()))
	}
	b = append(b, `,"outputs":[`...)
	var blobs [][]byte
	raws := resp.GetRawOutputContents()
	for i, out := range resp.GetOutputs() {
		var raw []byte
		if len(raws) > 0 {
			if i >= len(raws) {
				return nil, nil, &restError{http.StatusInternalServerError, fmt.Sprintf(
					"response has %d outputs but %d raw_output_contents", len(resp.GetOutputs()), len(raws))}
			}
			raw = raws[i]
		} else {
			raw = typedRaw(out.GetDatatype(), out.GetContents())
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, out.GetName())
		b = append(b, `,"datatype":`...)
		b = appendJSONString(b, out.GetDatatype())
		b = append(b, `,"shape":[`...)
		count := int64(1)
		for j, d := range out.GetShape() {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
			count *= d
		}
		b = append(b, ']')
		params := parametersJSON(out.GetParameters())
		_, inShm := out.GetParameters()[paramShmRegion]
		binaryOut := !inShm && plan.isBinary(out.GetName())
		if binaryOut {
			params.set(paramBinaryDataSize, int64(len(raw)))
			blobs = append(blobs, raw)
		}
		if len(params.keys) > 0 {
			b = append(b, `,"parameters":`...)
			b = appendJSONValue(b, params)
		}
		if !binaryOut && !inShm {
			b = append(b, `,"data":`...)
			var err error
			if b, err = jsonData(b, out.GetName(), out.GetDatatype(), raw, count); err != nil {
				return nil, nil, err
			}
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	return b, blobs, nil
}

// protoJSON writes any response message as JSON with the proto field names (Triton's REST
// field names for metadata, config and statistics): every scalar, list and map field (zero
// values included, as Triton's JSON does), set message fields, the set member of a oneof;
// 64-bit integers as JSON numbers (Triton writes numbers where protojson writes strings);
// enums by name.
func protoJSON(m protoreflect.Message) *jsonObject {
	o := newObject()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if (fd.ContainingOneof() != nil || fd.Message() != nil && !fd.IsList() && !fd.IsMap()) && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			a := make([]any, 0, l.Len())
			for j := 0; j < l.Len(); j++ {
				a = append(a, protoValueJSON(fd, l.Get(j)))
			}
			o.set(string(fd.Name()), a)
		case fd.IsMap():
			mo := newObject()
			var keys []string
			vals := map[string]protoreflect.Value{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				keys = append(keys, k.String())
				vals[k.String()] = mv
				return true
			})
			sortStrings(keys)
			for _, k := range keys {
				mo.set(k, protoValueJSON(fd.MapValue(), vals[k]))
			}
			o.set(string(fd.Name()), mo)
		default:
			o.set(string(fd.Name()), protoValueJSON(fd, v))
		}
	}
	return o
}

func protoValueJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoJSON(v.Message())
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BytesKind:
		if utf8.Valid(v.Bytes()) {
			return string(v.Bytes())
		}
		return fmt.Sprintf("%x", v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int64(v.Enum())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return v.Float()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	default:
		return v.Int()
	}
}

// decodeRepositoryRequest translates the (optional) JSON body of Triton's repository endpoints:
// index {"ready": bool}; load/unload {"parameters": {key: bool | integer | string}}, a "file:"
// key's string being base64 content (Triton's rule), sent as bytes.
func decodeRepositoryRequest(rpc, model string, body []byte) (proto.Message, error) {
	top := newObject()
	if len(strings.TrimSpace(string(body))) > 0 {
		doc, err := parseJSON(body)
		if err != nil {
			return nil, badRequest("request body: %v", err)
		}
		if top, err = asObject(doc, "request body"); err != nil {
			return nil, err
		}
	}
	if rpc == "RepositoryIndex" {
		ready, _, err := boolParam(top, "ready", "request")
		if err != nil {
			return nil, err
		}
		return &inferencepb.RepositoryIndexRequest{Ready: ready}, nil
	}
	params := map[string]*inferencepb.ModelRepositoryParameter{}
	if v, ok := top.get("parameters"); ok {
		o, err := asObject(v, "parameters")
		if err != nil {
			return nil, err
		}
		for _, k := range o.keys {
			path := "parameters." + k
			switch x := o.values[k].(type) {
			case bool:
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_BoolParam{BoolParam: x}}
			case jsonNumber:
				n, err := strconv.ParseInt(string(x), 10, 64)
				if err != nil {
					return nil, badRequest("%s: expected an integer, got %s", path, string(x))
				}
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_Int64Param{Int64Param: n}}
			case string:
				if strings.HasPrefix(k, "file:") {
					b, err := base64.StdEncoding.DecodeString(x)
					if err != nil {
						return nil, badRequest("%s: a file: parameter is base64 content: %v", path, err)
					}
					params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_BytesParam{BytesParam: b}}
					continue
				}
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_StringParam{StringParam: x}}
			default:
				return nil, badRequest("%s: a parameter must be a boolean, integer or string, got %s", path, describe(x))
			}
		}
	}
	if len(params) == 0 {
		params = nil
	}
	if rpc == "RepositoryModelLoad" {
		return &inferencepb.RepositoryModelLoadRequest{ModelName: model, Parameters: params}, nil
	}
	return &inferencepb.RepositoryModelUnloadRequest{ModelName: model, Parameters: params}, nil
}
