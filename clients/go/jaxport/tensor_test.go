package jaxport

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestTypedRoundTrips(t *testing.T) {
	shape := []int64{2, 2}
	f32, err := Must(Float32("a", shape, []float32{1.5, -2, 0, float32(math.Inf(1))})).AsFloat32()
	if err != nil || f32[0] != 1.5 || f32[1] != -2 || !math.IsInf(float64(f32[3]), 1) {
		t.Fatalf("FP32 round trip: %v %v", f32, err)
	}
	i64, err := Must(Int64("b", shape, []int64{-1, 1 << 40, math.MaxInt64, math.MinInt64})).AsInt64()
	if err != nil || i64[1] != 1<<40 || i64[2] != math.MaxInt64 || i64[3] != math.MinInt64 {
		t.Fatalf("INT64 round trip: %v %v", i64, err)
	}
	b, err := Must(Bool("c", shape, []bool{true, false, false, true})).AsBool()
	if err != nil || !b[0] || b[1] || !b[3] {
		t.Fatalf("BOOL round trip: %v %v", b, err)
	}
	i8, err := Must(Int8("d", shape, []int8{-128, 127, 0, -1})).AsInt8()
	if err != nil || i8[0] != -128 || i8[3] != -1 {
		t.Fatalf("INT8 round trip: %v %v", i8, err)
	}
}

func TestLittleEndianWireBytes(t *testing.T) {
	// 1.0f is 0x3f800000: little-endian puts the low byte first.
	if got := Must(Float32("x", []int64{1}, []float32{1})).Raw; !bytes.Equal(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Fatalf("FP32 bytes %x", got)
	}
	if got := Must(Int32("x", []int64{1}, []int32{-2})).Raw; !bytes.Equal(got, []byte{0xfe, 0xff, 0xff, 0xff}) {
		t.Fatalf("INT32 bytes %x", got)
	}
}

func TestHalfConversions(t *testing.T) {
	cases := []struct {
		f    float32
		bf16 uint16
		fp16 uint16
	}{
		{1, 0x3f80, 0x3c00},
		{-2, 0xc000, 0xc000},
		{0.5, 0x3f00, 0x3800},
		{65504, 0x4780, 0x7bff},                       // fp16 max
		{float32(math.Ldexp(1, -24)), 0x3380, 0x0001}, // fp16 smallest subnormal
		{1.00390625, 0x3f80, 0x3c04},                  // 1+2^-8: bf16 ties to even (down)
	}
	for _, c := range cases {
		if got := Float32ToBF16(c.f); got != c.bf16 {
			t.Errorf("Float32ToBF16(%v) = %#04x, want %#04x", c.f, got, c.bf16)
		}
		if got := Float32ToFP16(c.f); got != c.fp16 {
			t.Errorf("Float32ToFP16(%v) = %#04x, want %#04x", c.f, got, c.fp16)
		}
		if got := FP16ToFloat32(c.fp16); c.f != 1.00390625 && got != c.f {
			t.Errorf("FP16ToFloat32(%#04x) = %v, want %v", c.fp16, got, c.f)
		}
	}
	if !math.IsNaN(float64(BF16ToFloat32(Float32ToBF16(float32(math.NaN()))))) {
		t.Error("NaN must stay NaN through bf16")
	}
	if Float32ToFP16(1e6) != 0x7c00 {
		t.Error("fp16 overflow must give +inf")
	}
	// Every finite fp16 survives widening and narrowing.
	for h := uint16(0); h < 0x7c00; h++ {
		if back := Float32ToFP16(FP16ToFloat32(h)); back != h {
			t.Fatalf("fp16 %#04x -> %v -> %#04x", h, FP16ToFloat32(h), back)
		}
	}
}

func TestValidateNamesTheTensor(t *testing.T) {
	err := RawTensor("pixels", FP32, []int64{2, 3}, make([]byte, 20)).Validate()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("pixels")) || !bytes.Contains([]byte(err.Error()), []byte("24")) {
		t.Fatalf("want an error naming pixels and the 24 expected bytes, got %v", err)
	}
	if _, err := Must(Float32("x", []int64{1}, []float32{1})).AsInt64(); err == nil {
		t.Fatal("AsInt64 on FP32 must fail")
	}
}

func TestTypedContentsRoundTrip(t *testing.T) {
	for _, in := range []Tensor{
		Must(Float32("a", []int64{3}, []float32{1, -2.5, 3})),
		Must(Float64("a", []int64{2}, []float64{1e300, -1})),
		Must(Int8("a", []int64{2}, []int8{-128, 5})),
		Must(Int32("a", []int64{2}, []int32{-7, 1 << 30})),
		Must(Int64("a", []int64{2}, []int64{-7, 1 << 50})),
		Must(Uint8("a", []int64{2}, []uint8{0, 255})),
		Must(Bool("a", []int64{2}, []bool{true, false})),
		Must(Int16("a", []int64{2}, []int16{-32768, 7})),
		Must(Uint16("a", []int64{2}, []uint16{65535, 1})),
		Must(Uint32("a", []int64{2}, []uint32{1 << 31, 2})),
		Must(Uint64("a", []int64{2}, []uint64{1 << 63, 3})),
	} {
		c, err := in.TypedContents()
		if err != nil {
			t.Fatalf("%s: %v", in.Datatype, err)
		}
		back, err := fromContents(in.Name, in.Datatype, in.Shape, c)
		if err != nil || !bytes.Equal(back.Raw, in.Raw) {
			t.Fatalf("%s: typed contents round trip %x -> %x (%v)", in.Datatype, in.Raw, back.Raw, err)
		}
	}
	if _, err := Must(BFloat16("a", []int64{1}, []float32{1})).TypedContents(); err == nil {
		t.Fatal("BF16 has no typed contents field; TypedContents must refuse it")
	}
}

func TestEveryNumericTypeRoundTrips(t *testing.T) {
	i16, err := Must(Int16("a", []int64{2}, []int16{math.MinInt16, math.MaxInt16})).AsInt16()
	if err != nil || i16[0] != math.MinInt16 || i16[1] != math.MaxInt16 {
		t.Fatalf("INT16 round trip: %v %v", i16, err)
	}
	u16, err := Must(Uint16("a", []int64{2}, []uint16{0, math.MaxUint16})).AsUint16()
	if err != nil || u16[1] != math.MaxUint16 {
		t.Fatalf("UINT16 round trip: %v %v", u16, err)
	}
	u32, err := Must(Uint32("a", []int64{2}, []uint32{0, math.MaxUint32})).AsUint32()
	if err != nil || u32[1] != math.MaxUint32 {
		t.Fatalf("UINT32 round trip: %v %v", u32, err)
	}
	u64, err := Must(Uint64("a", []int64{2}, []uint64{0, math.MaxUint64})).AsUint64()
	if err != nil || u64[1] != math.MaxUint64 {
		t.Fatalf("UINT64 round trip: %v %v", u64, err)
	}
	f16, err := Must(Float16("a", []int64{1}, []float32{0.5})).AsFloat16()
	if err != nil || f16[0] != 0.5 {
		t.Fatalf("FP16 round trip: %v %v", f16, err)
	}
	if _, err := Must(Uint16("a", []int64{1}, []uint16{1})).AsInt16(); err == nil {
		t.Fatal("AsInt16 of a UINT16 tensor must fail")
	}
	for _, dt := range []Datatype{BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, BF16, FP32, FP64} {
		if !dt.Valid() {
			t.Fatalf("%s is not Valid", dt)
		}
	}
	if Datatype("BYTES").Valid() {
		t.Fatal("BYTES is not carried by jaxport")
	}
}

func TestConstructorsReturnShapeErrors(t *testing.T) {
	_, err := Float32("x", []int64{2, 3}, []float32{1, 2, 3})
	var se *ShapeError
	if !errors.As(err, &se) || se.Name != "x" || se.Elements != 3 {
		t.Fatalf("want a *ShapeError for 3 values in [2 3], got %v", err)
	}
	if want := `jaxport: tensor "x": shape [2 3] holds 6 elements, data has 3`; err.Error() != want {
		t.Fatalf("message %q, want %q", err.Error(), want)
	}
	if _, err := Uint64("y", []int64{-1}, nil); err == nil {
		t.Fatal("a negative dimension must be an error")
	}
	if tn, err := Bool("s", nil, []bool{true}); err != nil || tn.NumElements() != 1 {
		t.Fatalf("a scalar holds one element: %v %v", tn, err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Must must panic on a constructor error")
		}
	}()
	Must(Int8("z", []int64{2}, []int8{1}))
}
