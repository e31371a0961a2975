package jaxport

import (
	"encoding/binary"
	"fmt"
	"math"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// Datatype is an Open Inference Protocol tensor datatype ("FP32", "INT64", ...). The
// constants below are every numeric type of the protocol plus BOOL (BYTES, variable-length
// strings, is not carried by jaxport). Datatype(s) converts any wire string; Valid reports
// whether it is one of them.
type Datatype string

// The Open Inference Protocol datatypes jaxport carries.
const (
	BOOL   Datatype = "BOOL"
	UINT8  Datatype = "UINT8"
	UINT16 Datatype = "UINT16"
	UINT32 Datatype = "UINT32"
	UINT64 Datatype = "UINT64"
	INT8   Datatype = "INT8"
	INT16  Datatype = "INT16"
	INT32  Datatype = "INT32"
	INT64  Datatype = "INT64"
	FP16   Datatype = "FP16"
	BF16   Datatype = "BF16"
	FP32   Datatype = "FP32"
	FP64   Datatype = "FP64"
)

// itemSizes is the wire width (bytes per element) of every datatype above.
var itemSizes = map[Datatype]int{
	BOOL: 1, UINT8: 1, INT8: 1, INT16: 2, INT32: 4, INT64: 8, UINT16: 2, UINT32: 4, UINT64: 8,
	FP16: 2, BF16: 2, FP32: 4, FP64: 8,
}

// String is the wire spelling.
func (d Datatype) String() string { return string(d) }

// Valid reports whether d is one of the datatypes above.
func (d Datatype) Valid() bool { _, ok := itemSizes[d]; return ok }

// ItemSize returns the bytes per element of an Open Inference Protocol datatype.
func ItemSize(datatype Datatype) (int, error) {
	n, ok := itemSizes[datatype]
	if !ok {
		return 0, fmt.Errorf("jaxport: unsupported datatype %q", string(datatype))
	}
	return n, nil
}

// Tensor is one named input or output: a datatype, a shape and the flattened row-major
// elements as little-endian bytes, exactly as they travel in raw_input_contents /
// raw_output_contents. Build one with the typed constructors (Float32, Int64, Bool, ...) and
// read one with the typed accessors (AsFloat32, AsInt64, ...).
type Tensor struct {
	Name     string
	Datatype Datatype
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

// ShapeError is returned by the tensor constructors when the data does not fill the shape.
type ShapeError struct {
	Name     string
	Shape    []int64
	Elements int
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("jaxport: tensor %q: shape %v holds %d elements, data has %d", e.Name, e.Shape, numElements(e.Shape), e.Elements)
}

func checkShape(name string, shape []int64, n int) error {
	for _, d := range shape {
		if d < 0 {
			return &ShapeError{Name: name, Shape: cloneShape(shape), Elements: n}
		}
	}
	if numElements(shape) != int64(n) {
		return &ShapeError{Name: name, Shape: cloneShape(shape), Elements: n}
	}
	return nil
}

func cloneShape(shape []int64) []int64 { return append([]int64(nil), shape...) }

// Must returns the tensor of a constructor and panics on its error; for literals whose shape
// is known to be right: jaxport.Must(jaxport.Float32("x", []int64{2}, []float32{1, 2})).
func Must(t Tensor, err error) Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// RawTensor wraps bytes already in wire form (little-endian, row-major) without checking them;
// use it for bytes you already have or to send deliberately odd requests (Validate checks).
func RawTensor(name string, datatype Datatype, shape []int64, raw []byte) Tensor {
	return Tensor{Name: name, Datatype: datatype, Shape: cloneShape(shape), Raw: raw}
}

// encode builds a tensor of fixed-width elements; put writes element i at b.
func encode[T any](name string, dt Datatype, shape []int64, data []T, put func(b []byte, v T)) (Tensor, error) {
	if err := checkShape(name, shape, len(data)); err != nil {
		return Tensor{}, err
	}
	size := itemSizes[dt]
	raw := make([]byte, size*len(data))
	for i, v := range data {
		put(raw[size*i:], v)
	}
	return Tensor{Name: name, Datatype: dt, Shape: cloneShape(shape), Raw: raw}, nil
}

var le = binary.LittleEndian

// Float32 builds an FP32 tensor; a *ShapeError if len(data) does not fill the shape (as for
// every constructor below).
func Float32(name string, shape []int64, data []float32) (Tensor, error) {
	return encode(name, FP32, shape, data, func(b []byte, v float32) { le.PutUint32(b, math.Float32bits(v)) })
}

// Float64 builds an FP64 tensor.
func Float64(name string, shape []int64, data []float64) (Tensor, error) {
	return encode(name, FP64, shape, data, func(b []byte, v float64) { le.PutUint64(b, math.Float64bits(v)) })
}

// BFloat16 builds a BF16 tensor from float32 values, rounding each to nearest-even bfloat16.
func BFloat16(name string, shape []int64, data []float32) (Tensor, error) {
	return encode(name, BF16, shape, data, func(b []byte, v float32) { le.PutUint16(b, Float32ToBF16(v)) })
}

// Float16 builds an FP16 tensor from float32 values, rounding each to nearest-even IEEE half.
func Float16(name string, shape []int64, data []float32) (Tensor, error) {
	return encode(name, FP16, shape, data, func(b []byte, v float32) { le.PutUint16(b, Float32ToFP16(v)) })
}

// Int8 builds an INT8 tensor.
func Int8(name string, shape []int64, data []int8) (Tensor, error) {
	return encode(name, INT8, shape, data, func(b []byte, v int8) { b[0] = byte(v) })
}

// Int16 builds an INT16 tensor.
func Int16(name string, shape []int64, data []int16) (Tensor, error) {
	return encode(name, INT16, shape, data, func(b []byte, v int16) { le.PutUint16(b, uint16(v)) })
}

// Int32 builds an INT32 tensor.
func Int32(name string, shape []int64, data []int32) (Tensor, error) {
	return encode(name, INT32, shape, data, func(b []byte, v int32) { le.PutUint32(b, uint32(v)) })
}

// Int64 builds an INT64 tensor.
func Int64(name string, shape []int64, data []int64) (Tensor, error) {
	return encode(name, INT64, shape, data, func(b []byte, v int64) { le.PutUint64(b, uint64(v)) })
}

// Uint8 builds a UINT8 tensor.
func Uint8(name string, shape []int64, data []uint8) (Tensor, error) {
	return encode(name, UINT8, shape, data, func(b []byte, v uint8) { b[0] = v })
}

// Uint16 builds a UINT16 tensor.
func Uint16(name string, shape []int64, data []uint16) (Tensor, error) {
	return encode(name, UINT16, shape, data, func(b []byte, v uint16) { le.PutUint16(b, v) })
}

// Uint32 builds a UINT32 tensor.
func Uint32(name string, shape []int64, data []uint32) (Tensor, error) {
	return encode(name, UINT32, shape, data, func(b []byte, v uint32) { le.PutUint32(b, v) })
}

// Uint64 builds a UINT64 tensor.
func Uint64(name string, shape []int64, data []uint64) (Tensor, error) {
	return encode(name, UINT64, shape, data, func(b []byte, v uint64) { le.PutUint64(b, v) })
}

// Bool builds a BOOL tensor (one byte per element, 0 or 1).
func Bool(name string, shape []int64, data []bool) (Tensor, error) {
	return encode(name, BOOL, shape, data, func(b []byte, v bool) {
		if v {
			b[0] = 1
		}
	})
}

// decode reads a tensor of datatype dt element by element.
func decode[T any](t Tensor, dt Datatype, get func(b []byte) T) ([]T, error) {
	if err := t.expect(dt); err != nil {
		return nil, err
	}
	size := itemSizes[dt]
	out := make([]T, len(t.Raw)/size)
	for i := range out {
		out[i] = get(t.Raw[size*i:])
	}
	return out, nil
}

func (t Tensor) expect(datatype Datatype) error {
	if t.Datatype != datatype {
		return fmt.Errorf("jaxport: tensor %q is %s, not %s", t.Name, t.Datatype, datatype)
	}
	return t.Validate()
}

// AsFloat32 decodes an FP32 tensor (an error for any other datatype, as for every accessor).
func (t Tensor) AsFloat32() ([]float32, error) {
	return decode(t, FP32, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
}

// AsFloat64 decodes an FP64 tensor.
func (t Tensor) AsFloat64() ([]float64, error) {
	return decode(t, FP64, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
}

// AsBFloat16 decodes a BF16 tensor to float32 (exact: every bfloat16 is a float32).
func (t Tensor) AsBFloat16() ([]float32, error) {
	return decode(t, BF16, func(b []byte) float32 { return BF16ToFloat32(le.Uint16(b)) })
}

// AsFloat16 decodes an FP16 tensor to float32 (exact).
func (t Tensor) AsFloat16() ([]float32, error) {
	return decode(t, FP16, func(b []byte) float32 { return FP16ToFloat32(le.Uint16(b)) })
}

// AsInt8 decodes an INT8 tensor.
func (t Tensor) AsInt8() ([]int8, error) {
	return decode(t, INT8, func(b []byte) int8 { return int8(b[0]) })
}

// AsInt16 decodes an INT16 tensor.
func (t Tensor) AsInt16() ([]int16, error) {
	return decode(t, INT16, func(b []byte) int16 { return int16(le.Uint16(b)) })
}

// AsInt32 decodes an INT32 tensor.
func (t Tensor) AsInt32() ([]int32, error) {
	return decode(t, INT32, func(b []byte) int32 { return int32(le.Uint32(b)) })
}

// AsInt64 decodes an INT64 tensor.
func (t Tensor) AsInt64() ([]int64, error) {
	return decode(t, INT64, func(b []byte) int64 { return int64(le.Uint64(b)) })
}

// AsUint8 decodes a UINT8 tensor.
func (t Tensor) AsUint8() ([]uint8, error) {
	return decode(t, UINT8, func(b []byte) uint8 { return b[0] })
}

// AsUint16 decodes a UINT16 tensor.
func (t Tensor) AsUint16() ([]uint16, error) {
	return decode(t, UINT16, func(b []byte) uint16 { return le.Uint16(b) })
}

// AsUint32 decodes a UINT32 tensor.
func (t Tensor) AsUint32() ([]uint32, error) {
	return decode(t, UINT32, func(b []byte) uint32 { return le.Uint32(b) })
}

// AsUint64 decodes a UINT64 tensor.
func (t Tensor) AsUint64() ([]uint64, error) {
	return decode(t, UINT64, func(b []byte) uint64 { return le.Uint64(b) })
}

// AsBool decodes a BOOL tensor (any non-zero byte is true).
func (t Tensor) AsBool() ([]bool, error) {
	return decode(t, BOOL, func(b []byte) bool { return b[0] != 0 })
}

// AsFloat64Any decodes any numeric or BOOL tensor to float64, for comparisons and printing.
func (t Tensor) AsFloat64Any() ([]float64, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	size := itemSizes[t.Datatype]
	out := make([]float64, len(t.Raw)/size)
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
	return &pb.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: string(t.Datatype), Shape: cloneShape(t.Shape)}
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
func fromContents(name string, datatype Datatype, shape []int64, c *pb.InferTensorContents) (Tensor, error) {
	size, err := ItemSize(datatype)
	if err != nil {
		return Tensor{}, fmt.Errorf("output %q: %w", name, err)
	}
	n := int(numElements(shape))
	raw := make([]byte, 0, n*size)
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
