package jaxport

import (
	"bytes"
	"math"
	"testing"
)

func TestTypedRoundTrips(t *testing.T) {
	shape := []int64{2, 2}
	f32, err := Float32("a", shape, []float32{1.5, -2, 0, float32(math.Inf(1))}).AsFloat32()
	if err != nil || f32[0] != 1.5 || f32[1] != -2 || !math.IsInf(float64(f32[3]), 1) {
		t.Fatalf("FP32 round trip: %v %v", f32, err)
	}
	i64, err := Int64("b", shape, []int64{-1, 1 << 40, math.MaxInt64, math.MinInt64}).AsInt64()
	if err != nil || i64[1] != 1<<40 || i64[2] != math.MaxInt64 || i64[3] != math.MinInt64 {
		t.Fatalf("INT64 round trip: %v %v", i64, err)
	}
	b, err := Bool("c", shape, []bool{true, false, false, true}).AsBool()
	if err != nil || !b[0] || b[1] || !b[3] {
		t.Fatalf("BOOL round trip: %v %v", b, err)
	}
	i8, err := Int8("d", shape, []int8{-128, 127, 0, -1}).AsInt8()
	if err != nil || i8[0] != -128 || i8[3] != -1 {
		t.Fatalf("INT8 round trip: %v %v", i8, err)
	}
}

func TestLittleEndianWireBytes(t *testing.T) {
	// 1.0f is 0x3f800000: little-endian puts the low byte first.
	if got := Float32("x", []int64{1}, []float32{1}).Raw; !bytes.Equal(got, []byte{0, 0, 0x80, 0x3f}) {
		t.Fatalf("FP32 bytes %x", got)
	}
	if got := Int32("x", []int64{1}, []int32{-2}).Raw; !bytes.Equal(got, []byte{0xfe, 0xff, 0xff, 0xff}) {
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
	if _, err := Float32("x", []int64{1}, []float32{1}).AsInt64(); err == nil {
		t.Fatal("AsInt64 on FP32 must fail")
	}
}

func TestTypedContentsRoundTrip(t *testing.T) {
	for _, in := range []Tensor{
		Float32("a", []int64{3}, []float32{1, -2.5, 3}),
		Float64("a", []int64{2}, []float64{1e300, -1}),
		Int8("a", []int64{2}, []int8{-128, 5}),
		Int32("a", []int64{2}, []int32{-7, 1 << 30}),
		Int64("a", []int64{2}, []int64{-7, 1 << 50}),
		Uint8("a", []int64{2}, []uint8{0, 255}),
		Bool("a", []int64{2}, []bool{true, false}),
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
	if _, err := BFloat16("a", []int64{1}, []float32{1}).TypedContents(); err == nil {
		t.Fatal("BF16 has no typed contents field; TypedContents must refuse it")
	}
}
