package request

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// Response is one ModelInferResponse: what gRPC marshals (Marshal) and REST writes as JSON.
type Response struct {
	Model, Version, ID string
	Params             Params
	Outputs            []OutputTensor
}

// OutputTensor is one output of a response: raw little-endian C-order bytes (empty for an
// output written into shared memory, whose reference is in Params).
type OutputTensor struct {
	Name, Datatype string
	Shape          []int64
	Params         Params
	Data           []byte
}

// Response builds the answer of a prepared request from outputs[i], manifest output i as the
// program produced it (its shape and bytes; only those p.Outputs names are read): cut back to
// the request's rows and sizes, classified (top-k, BYTES) when asked, written into shared
// memory when requested there (then answered with an empty entry and the reference), in the
// requested order (manifest order when none is requested). Output bytes are referenced, not
// copied, where no cut or classification changes them. An error is a status naming the output
// (a shared-memory region too small for its shape) or a program that broke its signature.
func (s *Signature) Response(req *Request, p *Prepared, outputs []Tensor) (*Response, error) {
	if len(outputs) != len(s.outputs) {
		return nil, fmt.Errorf("model %s: %d outputs for %d", s.Name, len(outputs), len(s.outputs))
	}
	resp := &Response{Model: s.Name, Version: s.Version, ID: req.ID, Outputs: make([]OutputTensor, len(p.Outputs))}
	for n, i := range p.Outputs {
		sig := &s.outputs[i]
		shape, data, err := s.cut(p, i, outputs[i])
		if err != nil {
			return nil, fmt.Errorf("model %s: %v", s.Name, err)
		}
		t := OutputTensor{Name: sig.name, Datatype: sig.Name, Shape: shape, Data: data}
		if k := p.Classes[i]; k > 0 {
			t.Datatype = "BYTES"
			t.Shape, t.Data = topk(sig, shape, data, k)
		} else if out, ok := p.Shm[i]; ok {
			if err := checkOutputFits(sig, shape, out.Ref); err != nil {
				return nil, err
			}
			copy(out.Data, data)
			t.Params, t.Data = RefParams(out.Ref), []byte{}
		}
		resp.Outputs[n] = t
	}
	return resp, nil
}

// ToProto is r as the generated message (tests, REST's typed-contents readers).
func (r *Response) ToProto() *inferencepb.ModelInferResponse {
	out := &inferencepb.ModelInferResponse{ModelName: r.Model, ModelVersion: r.Version, Id: r.ID, Parameters: r.Params}
	for _, t := range r.Outputs {
		out.Outputs = append(out.Outputs, &inferencepb.ModelInferResponse_InferOutputTensor{
			Name: t.Name, Datatype: t.Datatype, Shape: t.Shape, Parameters: t.Params})
		out.RawOutputContents = append(out.RawOutputContents, t.Data)
	}
	return out
}

// TypedRaw turns typed contents into the raw form (little-endian, BYTES length-prefixed).
func TypedRaw(datatype string, c *inferencepb.InferTensorContents) []byte {
	var b []byte
	row, _ := DatatypeOf(datatype)
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
		for _, v := range c.GetIntContents() {
			for i := 0; i < row.Itemsize; i++ {
				b = append(b, byte(uint32(v)>>(8*i)))
			}
		}
	case "UINT8", "UINT16", "UINT32":
		for _, v := range c.GetUintContents() {
			for i := 0; i < row.Itemsize; i++ {
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

// topk: messages.topk_classification over one output's bytes: per batch row when dimension 0
// of the output is the batch (classRows), else over the whole tensor; the k largest values
// descending (ties: lower index first; NaN above every number, as numpy sorts it), each
// "<value>:<index>[:<label>]" with the value as C++ std::to_string writes it (%f for floating
// point, the integer otherwise). The BYTES result's shape and raw (length-prefixed) contents.
func topk(sig *tensorSig, shape []int64, data []byte, k int) ([]int64, []byte) {
	count := len(data) / sig.Itemsize
	byRow := sig.classRows && len(shape) > 0
	rows := 1
	if byRow {
		rows = int(shape[0])
	}
	width := 0
	if rows > 0 {
		width = count / rows
	}
	k = min(k, width)
	out := []int64{int64(k)}
	if byRow {
		out = []int64{int64(rows), int64(k)}
	}
	order := make([]int, width)
	var raw []byte
	var text []byte
	for r := range rows {
		row := data[r*width*sig.Itemsize : (r+1)*width*sig.Itemsize]
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return compareDesc(sig, row, a, b) })
		for _, i := range order[:k] {
			text = appendClassValue(text[:0], sig, row, i)
			text = append(text, ':')
			text = strconv.AppendInt(text, int64(i), 10)
			if i < len(sig.labels) && sig.labels[i] != "" {
				text = append(text, ':')
				text = append(text, sig.labels[i]...)
			}
			raw = binary.LittleEndian.AppendUint32(raw, uint32(len(text)))
			raw = append(raw, text...)
		}
	}
	if raw == nil {
		raw = []byte{}
	}
	return out, raw
}

// compareDesc orders element indices a, b of a row: the larger value first (NaN largest,
// NaNs equal); equal values keep index order (the caller's sort is stable).
func compareDesc(sig *tensorSig, row []byte, a, b int) int {
	switch sig.kind {
	case kindInt:
		return -cmpOrdered(intAt(sig, row, a), intAt(sig, row, b))
	case kindUint:
		return -cmpOrdered(uintAt(sig, row, a), uintAt(sig, row, b))
	}
	x, y := floatAt(sig, row, a), floatAt(sig, row, b)
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn && yn:
		return 0
	case xn:
		return -1
	case yn:
		return 1
	}
	return -cmpOrdered(x, y)
}

func cmpOrdered[T int64 | uint64 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func appendClassValue(b []byte, sig *tensorSig, row []byte, i int) []byte {
	switch sig.kind {
	case kindInt:
		return strconv.AppendInt(b, intAt(sig, row, i), 10)
	case kindUint:
		return strconv.AppendUint(b, uintAt(sig, row, i), 10)
	}
	v := floatAt(sig, row, i)
	switch { // Python's "%f" spelling of the non-finite values
	case math.IsNaN(v):
		return append(b, "nan"...)
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	}
	return strconv.AppendFloat(b, v, 'f', 6, 64)
}

func intAt(sig *tensorSig, row []byte, i int) int64 {
	e := row[i*sig.Itemsize:]
	switch sig.Itemsize {
	case 1:
		return int64(int8(e[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(e)))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(e)))
	}
	return int64(binary.LittleEndian.Uint64(e))
}

func uintAt(sig *tensorSig, row []byte, i int) uint64 {
	e := row[i*sig.Itemsize:]
	switch sig.Itemsize {
	case 1:
		return uint64(e[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(e))
	case 4:
		return uint64(binary.LittleEndian.Uint32(e))
	}
	return binary.LittleEndian.Uint64(e)
}

func floatAt(sig *tensorSig, row []byte, i int) float64 {
	e := row[i*sig.Itemsize:]
	switch sig.Name {
	case "BF16":
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(e)) << 16))
	case "FP16":
		return halfToFloat(binary.LittleEndian.Uint16(e))
	case "FP32":
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(e))
}

// halfToFloat: an IEEE binary16 value, exactly.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}
