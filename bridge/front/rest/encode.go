package rest

// The REST codec, inference answers: the request.Response the handler returned -> the REST
// JSON header and the binary tensor data after it (as the request's outputPlan asks; output
// bytes referenced, not copied). Pure functions, no I/O.

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

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
				return nil, &status.HTTPError{Status: http.StatusInternalServerError, Msg: fmt.Sprintf("output '%s': BYTES contents do not hold %d elements", name, count)}
			}
			n := int(binary.LittleEndian.Uint32(raw[off:]))
			e := raw[off+4 : off+4+n]
			if !utf8.Valid(e) {
				return nil, status.BadRequest("output '%s': element %d is not UTF-8 text, which JSON cannot carry; "+
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
		return nil, status.BadRequest("output '%s': %s data cannot be sent as JSON; request it with "+
			"parameters.binary_data=true (or the request parameter binary_data_output=true)", name, datatype)
	}
	if size == 0 || int64(len(raw)) != count*int64(size) {
		return nil, &status.HTTPError{Status: http.StatusInternalServerError, Msg: fmt.Sprintf(
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

// encodeInferResponse writes a response as the REST JSON header and the binary tensor data
// that follows it (outputs the plan asks for as binary, in output order).
func encodeInferResponse(resp *request.Response, plan *outputPlan) ([]byte, [][]byte, error) {
	b := []byte(`{"model_name":`)
	b = appendJSONString(b, resp.Model)
	if resp.Version != "" {
		b = append(b, `,"model_version":`...)
		b = appendJSONString(b, resp.Version)
	}
	if resp.ID != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, resp.ID)
	}
	if len(resp.Params) > 0 {
		b = append(b, `,"parameters":`...)
		b = appendJSONValue(b, parametersJSON(resp.Params))
	}
	b = append(b, `,"outputs":[`...)
	var blobs [][]byte
	for i := range resp.Outputs {
		out := &resp.Outputs[i]
		raw := out.Data
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, out.Name)
		b = append(b, `,"datatype":`...)
		b = appendJSONString(b, out.Datatype)
		b = append(b, `,"shape":[`...)
		count := int64(1)
		for j, d := range out.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
			count *= d
		}
		b = append(b, ']')
		params := parametersJSON(out.Params)
		_, inShm := out.Params[paramShmRegion]
		if inShm { // Triton's HTTP answer names no shared-memory parameters (its C++ client
			// reads binary_data_size from any output that has parameters)
			params = params.without("shared_memory_")
		}
		binaryOut := !inShm && plan.isBinary(out.Name)
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
			if b, err = jsonData(b, out.Name, out.Datatype, raw, count); err != nil {
				return nil, nil, err
			}
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	return b, blobs, nil
}

// without returns o without the keys starting with prefix.
func (o *jsonObject) without(prefix string) *jsonObject {
	kept := newObject()
	for _, k := range o.keys {
		if !strings.HasPrefix(k, prefix) {
			kept.set(k, o.values[k])
		}
	}
	return kept
}
