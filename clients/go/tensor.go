package jaxport

import (
	"encoding/binary"
	"fmt"
	"math"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// Open Inference Protocol datatype strings carried by jaxport.
const (
	BOOL   = "BOOL"
	UINT8  = "UINT8"
	INT8   = "INT8"
	INT32  = "INT32"
	INT64  = "INT64"
	FP16   = "FP16"
	BF16   = "BF16"
	FP32   = "FP32"
	FP64   = "FP64"
	UINT16 = "UINT16"
	UINT32 = "UINT32"
	UINT64 = "UINT64"
	INT16  = "INT16"
)

// itemSizes is the wire width (bytes per element) of every datatype above.
var itemSizes = map[string]int{
	BOOL: 1, UINT8: 1, INT8: 1, INT16: 2, INT32: 4, INT64: 8, UINT16: 2, UINT32: 4, UINT64: 8,
	FP16: 2, BF16: 2, FP32: 4, FP64: 8,
}

// ItemSize returns the bytes per element of an Open Inference Protocol datatype.
func ItemSize(datatype string) (int, error) {
	n, ok := itemSizes[datatype]
	if !ok {
		return 0, fmt.Errorf("jaxport: unsupported datatype %q", datatype)
	}
	return n, nil
}

// Tensor is one named input or output: a datatype, a shape and the flattened row-major
// elements as little-endian bytes, exactly as they travel in raw_input_contents /
// raw_output_contents. Build one with the typed constructors (Float32, Int64, Bool, ...) and
// read one with the typed accessors (AsFloat32, AsInt64, ...).
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	Raw      []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int64 {
	return numElements(t.Shape)
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// Validate checks that the byte count equals shape x itemsize, as the protocol requires.
func (t Tensor) Validate() error {
	size, err := ItemSize(t.Datatype)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
	}
	if want := numElements(t.Shape) * int64(size); want != int64(len(t.Raw)) {
		return fmt.Errorf("tensor %q: %s%v needs %d bytes, have %d", t.Name, t.Datatype, t.Shape, want, len(t.Raw))
	}
	return nil
}

func checkLen(name string, shape []int64, n int) {
	if numElements(shape) != int64(n) {
		panic(fmt.Sprintf("jaxport: tensor %q: shape %v holds %d elements, data has %d", name, shape, numElements(shape), n))
	}
}

func cloneShape(shape []int64) []int64 { return append([]int64(nil), shape...) }

// RawTensor wraps bytes already in wire form (little-endian, row-major) without checking them;
// use it for datatypes without a Go type (FP16, BF16) or to send deliberately odd requests.
func RawTensor(name, datatype string, shape []int64, raw []byte) Tensor {
	return Tensor{Name: name, Datatype: datatype, Shape: cloneShape(shape), Raw: raw}
}

// Float32 builds an FP32 tensor. It panics if len(data) does not match the shape.
func Float32(name string, shape []int64, data []float32) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return Tensor{name, FP32, cloneShape(shape), raw}
}

// Float64 builds an FP64 tensor.
func Float64(name string, shape []int64, data []float64) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], math.Float64bits(v))
	}
	return Tensor{name, FP64, cloneShape(shape), raw}
}

// Int8 builds an INT8 tensor.
func Int8(name string, shape []int64, data []int8) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, len(data))
	for i, v := range data {
		raw[i] = byte(v)
	}
	return Tensor{name, INT8, cloneShape(shape), raw}
}

// Int32 builds an INT32 tensor.
func Int32(name string, shape []int64, data []int32) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return Tensor{name, INT32, cloneShape(shape), raw}
}

// Int64 builds an INT64 tensor.
func Int64(name string, shape []int64, data []int64) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 8*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	return Tensor{name, INT64, cloneShape(shape), raw}
}

// Uint8 builds a UINT8 tensor.
func Uint8(name string, shape []int64, data []uint8) Tensor {
	checkLen(name, shape, len(data))
	return Tensor{name, UINT8, cloneShape(shape), append([]byte(nil), data...)}
}

// Bool builds a BOOL tensor (one byte per element, 0 or 1).
func Bool(name string, shape []int64, data []bool) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, len(data))
	for i, v := range data {
		if v {
			raw[i] = 1
		}
	}
	return Tensor{name, BOOL, cloneShape(shape), raw}
}

// BFloat16 builds a BF16 tensor from float32 values, rounding each to nearest-even bfloat16.
func BFloat16(name string, shape []int64, data []float32) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(raw[2*i:], Float32ToBF16(v))
	}
	return Tensor{name, BF16, cloneShape(shape), raw}
}

// Float16 builds an FP16 tensor from float32 values, rounding each to nearest-even IEEE half.
func Float16(name string, shape []int64, data []float32) Tensor {
	checkLen(name, shape, len(data))
	raw := make([]byte, 2*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint16(raw[2*i:], Float32ToFP16(v))
	}
	return Tensor{name, FP16, cloneShape(shape), raw}
}

func (t Tensor) expect(datatype string) error {
	if t.Datatype != datatype {
		return fmt.Errorf("jaxport: tensor %q is %s, not %s", t.Name, t.Datatype, datatype)
	}
	return t.Validate()
}

// AsFloat32 decodes an FP32 tensor.
func (t Tensor) AsFloat32() ([]float32, error) {
	if err := t.expect(FP32); err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Raw[4*i:]))
	}
	return out, nil
}

// AsFloat64 decodes an FP64 tensor.
func (t Tensor) AsFloat64() ([]float64, error) {
	if err := t.expect(FP64); err != nil {
		return nil, err
	}
	out := make([]float64, len(t.Raw)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Raw[8*i:]))
	}
	return out, nil
}

// AsInt8 decodes an INT8 tensor.
func (t Tensor) AsInt8() ([]int8, error) {
	if err := t.expect(INT8); err != nil {
		return nil, err
	}
	out := make([]int8, len(t.Raw))
	for i, b := range t.Raw {
		out[i] = int8(b)
	}
	return out, nil
}

// AsInt32 decodes an INT32 tensor.
func (t Tensor) AsInt32() ([]int32, error) {
	if err := t.expect(INT32); err != nil {
		return nil, err
	}
	out := make([]int32, len(t.Raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.Raw[4*i:]))
	}
	return out, nil
}

// AsInt64 decodes an INT64 tensor.
func (t Tensor) AsInt64() ([]int64, error) {
	if err := t.expect(INT64); err != nil {
		return nil, err
	}
	out := make([]int64, len(t.Raw)/8)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(t.Raw[8*i:]))
	}
	return out, nil
}

// AsUint8 decodes a UINT8 tensor.
func (t Tensor) AsUint8() ([]uint8, error) {
	if err := t.expect(UINT8); err != nil {
		return nil, err
	}
	return append([]uint8(nil), t.Raw...), nil
}

// AsBool decodes a BOOL tensor (any non-zero byte is true).
func (t Tensor) AsBool() ([]bool, error) {
	if err := t.expect(BOOL); err != nil {
		return nil, err
	}
	out := make([]bool, len(t.Raw))
	for i, b := range t.Raw {
		out[i] = b != 0
	}
	return out, nil
}

// AsBFloat16 decodes a BF16 tensor to float32 (exact: every bfloat16 is a float32).
func (t Tensor) AsBFloat16() ([]float32, error) {
	if err := t.expect(BF16); err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Raw)/2)
	for i := range out {
		out[i] = BF16ToFloat32(binary.LittleEndian.Uint16(t.Raw[2*i:]))
	}
	return out, nil
}

// AsFloat16 decodes an FP16 tensor to float32 (exact).
func (t Tensor) AsFloat16() ([]float32, error) {
	if err := t.expect(FP16); err != nil {
		return nil, err
	}
	out := make([]float32, len(t.Raw)/2)
	for i := range out {
		out[i] = FP16ToFloat32(binary.LittleEndian.Uint16(t.Raw[2*i:]))
	}
	return out, nil
}

// AsFloat64Any decodes any numeric or BOOL tensor to float64, for comparisons and printing.
func (t Tensor) AsFloat64Any() ([]float64, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	size := itemSizes[t.Datatype]
	out := make([]float64, len(t.Raw)/size)
	le := binary.LittleEndian
	for i := range out {
		b := t.Raw[size*i:]
		switch t.Datatype {
		case BOOL, UINT8:
			out[i] = float64(b[0])
		case INT8:
			out[i] = float64(int8(b[0]))
		case INT16:
			out[i] = float64(int16(le.Uint16(b)))
		case UINT16:
			out[i] = float64(le.Uint16(b))
		case INT32:
			out[i] = float64(int32(le.Uint32(b)))
		case UINT32:
			out[i] = float64(le.Uint32(b))
		case INT64:
			out[i] = float64(int64(le.Uint64(b)))
		case UINT64:
			out[i] = float64(le.Uint64(b))
		case FP16:
			out[i] = float64(FP16ToFloat32(le.Uint16(b)))
		case BF16:
			out[i] = float64(BF16ToFloat32(le.Uint16(b)))
		case FP32:
			out[i] = float64(math.Float32frombits(le.Uint32(b)))
		case FP64:
			out[i] = math.Float64frombits(le.Uint64(b))
		}
	}
	return out, nil
}

// BF16ToFloat32 widens a bfloat16 bit pattern (the upper half of a float32).
func BF16ToFloat32(bits uint16) float32 {
	return math.Float32frombits(uint32(bits) << 16)
}

// Float32ToBF16 narrows to bfloat16 with round-to-nearest-even, keeping NaN a NaN.
func Float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + ((u >> 16) & 1)
	return uint16(u >> 16)
}

// FP16ToFloat32 widens an IEEE 754 half-precision bit pattern.
func FP16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: value = frac * 2^-24
		v := float32(frac) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			return -v
		}
		return v
	default:
		return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
	}
}

// Float32ToFP16 narrows to IEEE half with round-to-nearest-even (overflow -> inf).
func Float32ToFP16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	frac := u & 0x7fffff
	if exp == 0xff {
		if frac != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		m := frac | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & ((uint32(1) << shift) - 1)
		r := m >> shift
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | frac>>13
	rest := frac & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// toInputTensor converts to the wire message (without contents) and the raw bytes.
func (t Tensor) toInput() *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: t.Datatype, Shape: cloneShape(t.Shape)}
}

// TypedContents converts the raw bytes to the protocol's typed `contents` field for the
// datatypes that have one (FP16 and BF16 have none and travel only as raw bytes).
func (t Tensor) TypedContents() (*pb.InferTensorContents, error) {
	size, err := ItemSize(t.Datatype)
	if err != nil {
		return nil, err
	}
	if len(t.Raw)%size != 0 {
		return nil, fmt.Errorf("jaxport: tensor %q: %d bytes is not a whole number of %s elements", t.Name, len(t.Raw), t.Datatype)
	}
	n := len(t.Raw) / size
	le := binary.LittleEndian
	c := &pb.InferTensorContents{}
	for i := 0; i < n; i++ {
		b := t.Raw[size*i:]
		switch t.Datatype {
		case BOOL:
			c.BoolContents = append(c.BoolContents, b[0] != 0)
		case UINT8:
			c.UintContents = append(c.UintContents, uint32(b[0]))
		case UINT16:
			c.UintContents = append(c.UintContents, uint32(le.Uint16(b)))
		case UINT32:
			c.UintContents = append(c.UintContents, le.Uint32(b))
		case UINT64:
			c.Uint64Contents = append(c.Uint64Contents, le.Uint64(b))
		case INT8:
			c.IntContents = append(c.IntContents, int32(int8(b[0])))
		case INT16:
			c.IntContents = append(c.IntContents, int32(int16(le.Uint16(b))))
		case INT32:
			c.IntContents = append(c.IntContents, int32(le.Uint32(b)))
		case INT64:
			c.Int64Contents = append(c.Int64Contents, int64(le.Uint64(b)))
		case FP32:
			c.Fp32Contents = append(c.Fp32Contents, math.Float32frombits(le.Uint32(b)))
		case FP64:
			c.Fp64Contents = append(c.Fp64Contents, math.Float64frombits(le.Uint64(b)))
		default:
			return nil, fmt.Errorf("jaxport: tensor %q: %s has no typed contents field; send it raw", t.Name, t.Datatype)
		}
	}
	return c, nil
}

// fromContents rebuilds raw bytes from typed contents (servers may answer that way).
func fromContents(name, datatype string, shape []int64, c *pb.InferTensorContents) (Tensor, error) {
	size, err := ItemSize(datatype)
	if err != nil {
		return Tensor{}, fmt.Errorf("output %q: %w", name, err)
	}
	n := int(numElements(shape))
	raw := make([]byte, 0, n*size)
	le := binary.LittleEndian
	var got int
	switch datatype {
	case BOOL:
		got = len(c.GetBoolContents())
		for _, v := range c.GetBoolContents() {
			if v {
				raw = append(raw, 1)
			} else {
				raw = append(raw, 0)
			}
		}
	case UINT8, UINT16, UINT32:
		got = len(c.GetUintContents())
		for _, v := range c.GetUintContents() {
			switch size {
			case 1:
				raw = append(raw, byte(v))
			case 2:
				raw = le.AppendUint16(raw, uint16(v))
			default:
				raw = le.AppendUint32(raw, v)
			}
		}
	case UINT64:
		got = len(c.GetUint64Contents())
		for _, v := range c.GetUint64Contents() {
			raw = le.AppendUint64(raw, v)
		}
	case INT8, INT16, INT32:
		got = len(c.GetIntContents())
		for _, v := range c.GetIntContents() {
			switch size {
			case 1:
				raw = append(raw, byte(int8(v)))
			case 2:
				raw = le.AppendUint16(raw, uint16(int16(v)))
			default:
				raw = le.AppendUint32(raw, uint32(v))
			}
		}
	case INT64:
		got = len(c.GetInt64Contents())
		for _, v := range c.GetInt64Contents() {
			raw = le.AppendUint64(raw, uint64(v))
		}
	case FP32:
		got = len(c.GetFp32Contents())
		for _, v := range c.GetFp32Contents() {
			raw = le.AppendUint32(raw, math.Float32bits(v))
		}
	case FP64:
		got = len(c.GetFp64Contents())
		for _, v := range c.GetFp64Contents() {
			raw = le.AppendUint64(raw, math.Float64bits(v))
		}
	default:
		return Tensor{}, fmt.Errorf("output %q: %s cannot be carried in typed contents", name, datatype)
	}
	if got != n {
		return Tensor{}, fmt.Errorf("output %q: shape %v needs %d elements, typed contents hold %d", name, shape, n, got)
	}
	return Tensor{Name: name, Datatype: datatype, Shape: cloneShape(shape), Raw: raw}, nil
}
