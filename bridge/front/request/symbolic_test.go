package request

// Symbolic dimensions: each size checked against its rule, inputs agreeing, the bucket chosen
// (exact, else the smallest one the request pads up to along the --pad dimensions), inputs
// padded with zeros, outputs cut back, and the refusal that names the input, the dimension,
// the size, the buckets and the engine serving every admissible size.

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

// seqManifest: tokens, mask INT32 [B, T]; outputs per_token FP32 [B, T, 2] and pooled FP32
// [B, 2]; B=1..8, T=8..64:8; programs: the polymorphic one, buckets (B=2, T=16) and (B=2, T=32);
// --pad T=mask.
func seqManifest() *jaxportv1.Manifest {
	named := func(name, dt string, shape []int64, dims ...string) *jaxportv1.TensorSpec {
		s := spec(name, dt, shape...)
		s.DimNames = dims
		return s
	}
	return &jaxportv1.Manifest{SchemaVersion: 2,
		Dimensions: []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 8, MultipleOf: 1}, {Name: "T", Min: 8, Max: 64, MultipleOf: 8}},
		Inputs: []*jaxportv1.TensorSpec{named("tokens", "INT32", []int64{-1, -1}, "B", "T"),
			named("mask", "INT32", []int64{-1, -1}, "B", "T")},
		Outputs: []*jaxportv1.TensorSpec{named("per_token", "FP32", []int64{-1, -1, 2}, "B", "T", ""),
			named("pooled", "FP32", []int64{-1, 2}, "B", "")},
		Programs: []*jaxportv1.Program{{MlirbcFile: "model.mlirbc", Polymorphic: true},
			{MlirbcFile: "model.B2.T16.mlirbc", Dims: map[string]int64{"B": 2, "T": 16}},
			{MlirbcFile: "model.B2.T32.mlirbc", Dims: map[string]int64{"B": 2, "T": 32}}},
		Padding: []*jaxportv1.Padding{{Dim: "T", MaskInput: "mask"}},
	}
}

func seqSignature(t *testing.T, engine string) *Signature {
	t.Helper()
	s, err := NewSignature("seq", "1", seqManifest(), nil, Plan{Engine: engine, Buckets: engine != "exported"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func i32(vs ...int32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// seqRequest: b x tT tokens 1..n and a mask of ones (mask sized mt when given).
func seqRequest(b, tT int64, mt ...int64) *Request {
	maskT := tT
	if len(mt) > 0 {
		maskT = mt[0]
	}
	tokens := make([]int32, b*tT)
	for i := range tokens {
		tokens[i] = int32(i + 1)
	}
	mask := make([]int32, b*maskT)
	for i := range mask {
		mask[i] = 1
	}
	return &Request{Model: "seq", Inputs: []Input{{Name: "tokens", Datatype: "INT32", Shape: []int64{b, tT}},
		{Name: "mask", Datatype: "INT32", Shape: []int64{b, maskT}}}, Raw: [][]byte{i32(tokens...), i32(mask...)}}
}

func wantInvalid(t *testing.T, err error, parts ...string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("got %v, want INVALID_ARGUMENT", err)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Errorf("%q does not say %q", status.Convert(err).Message(), p)
		}
	}
}

func TestBucketPaddedAlongTheMaskedDimensionAndCutBack(t *testing.T) {
	s := seqSignature(t, "native")
	req := seqRequest(2, 8)
	p, err := s.Prepare(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Program != 1 || !p.Padded || p.Sizes["B"] != 2 || p.Sizes["T"] != 8 {
		t.Fatalf("program %d padded %v sizes %v", p.Program, p.Padded, p.Sizes)
	}
	in := s.ProgramInputs(p, 0)
	if !slices.Equal(in[0].Shape, []int64{2, 16}) || len(in[0].Data) != 2*16*4 {
		t.Fatalf("tokens as the bucket takes them: %v, %d bytes", in[0].Shape, len(in[0].Data))
	}
	row := func(data []byte, r int) []int32 {
		out := make([]int32, 16)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(data[(r*16+i)*4:]))
		}
		return out
	}
	// Row 1: the request's 9..16, then zeros (mask 0 = padding).
	if got := row(in[0].Data, 1); !slices.Equal(got, []int32{9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("padded tokens row 1: %v", got)
	}
	if got := row(in[1].Data, 0); !slices.Equal(got, []int32{1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("padded mask row 0: %v", got)
	}
	// The bucket's per_token [2, 16, 2] (value = 1000*b + 10*t + c) cut back to [2, 8, 2].
	var perToken []byte
	for b := 0; b < 2; b++ {
		for tt := 0; tt < 16; tt++ {
			for c := 0; c < 2; c++ {
				perToken = binary.LittleEndian.AppendUint32(perToken, uint32(1000*b+10*tt+c))
			}
		}
	}
	pooled := make([]byte, 2*2*4)
	resp, err := s.Response(req, p, []Tensor{{Shape: []int64{2, 16, 2}, Data: perToken}, {Shape: []int64{2, 2}, Data: pooled}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Outputs[0]
	if !slices.Equal(got.Shape, []int64{2, 8, 2}) || len(got.Data) != 2*8*2*4 {
		t.Fatalf("per_token %v, %d bytes", got.Shape, len(got.Data))
	}
	for b := 0; b < 2; b++ {
		for tt := 0; tt < 8; tt++ {
			for c := 0; c < 2; c++ {
				if v := binary.LittleEndian.Uint32(got.Data[((b*8+tt)*2+c)*4:]); v != uint32(1000*b+10*tt+c) {
					t.Fatalf("per_token[%d, %d, %d] = %d", b, tt, c, v)
				}
			}
		}
	}
	if !slices.Equal(resp.Outputs[1].Shape, []int64{2, 2}) || &resp.Outputs[1].Data[0] != &pooled[0] {
		t.Fatal("pooled: not cut, not copied")
	}
	// Exactly a bucket: its program, nothing padded; 24 pads to 32.
	if p, err := s.Prepare(seqRequest(2, 16), nil); err != nil || p.Program != 1 || p.Padded {
		t.Fatalf("T=16: program %v padded %v (%v)", p.Program, p.Padded, err)
	}
	if p, err := s.Prepare(seqRequest(2, 24), nil); err != nil || p.Program != 2 || !p.Padded {
		t.Fatalf("T=24: %+v %v", p, err)
	}
}

func TestASizeNoBucketHoldsNamesTheInputTheBucketsAndTheEngine(t *testing.T) {
	_, err := seqSignature(t, "native").Prepare(seqRequest(3, 16), nil)
	wantInvalid(t, err, "input 'tokens' dimension 0 (B) is 3: ", "sizes B=3, T=16 have no bucket program",
		"model 'seq' (version 1) is served by the native engine", "(B=2, T=16; B=2, T=32, T padded up to them)",
		"--engine exported for every admissible size")
	_, err = seqSignature(t, "pjrt").Prepare(seqRequest(2, 40), nil)
	wantInvalid(t, err, "input 'tokens' dimension 1 (T) is 40: ", "sizes B=2, T=40 have no bucket program", "--engine pjrt")
}

func TestSymbolicRulesComeFirst(t *testing.T) {
	for _, engine := range []string{"native", "exported"} {
		s := seqSignature(t, engine)
		_, err := s.Prepare(seqRequest(2, 12), nil)
		wantInvalid(t, err, "input 'tokens' dimension 1 (T) is 12: T must be a multiple of 8 in 8..64 (model 'seq' (version 1))")
		_, err = s.Prepare(seqRequest(9, 8), nil)
		wantInvalid(t, err, "input 'tokens' dimension 0 (B) is 9: B must be in 1..8")
		_, err = s.Prepare(seqRequest(2, 16, 24), nil)
		wantInvalid(t, err, "input 'mask' dimension 1 (T) is 24 but input 'tokens' has T = 16: inputs must agree on T")
	}
}

func TestPolymorphicRunsAtTheRequestsSizes(t *testing.T) {
	s := seqSignature(t, "exported")
	p, err := s.Prepare(seqRequest(3, 40), nil)
	if err != nil || p.Program != 0 || p.Padded || p.Bucket != nil {
		t.Fatalf("%+v %v", p, err)
	}
	if in := s.ProgramInputs(p, 0); !slices.Equal(in[0].Shape, []int64{3, 40}) {
		t.Fatalf("inputs %v", in[0].Shape)
	}
	if got := s.OutputShape(p, 0); !slices.Equal(got, []int64{3, 40, 2}) {
		t.Fatalf("per_token shape %v", got)
	}
}

func TestSizesAsModelConfigGivesThem(t *testing.T) {
	s := seqSignature(t, "native")
	if got := DimsText(s.Dimensions()); got != "B=1..8,T=8..64:8" {
		t.Errorf("dims %q", got)
	}
	if got := s.BucketsText(); got != "B=2,T=16;B=2,T=32" {
		t.Errorf("buckets %q", got)
	}
	if got := s.PaddingText(); got != "T=mask" {
		t.Errorf("padding %q", got)
	}
	m := seqManifest()
	m.Programs = m.Programs[:1]
	if _, err := NewSignature("seq", "1", m, nil, Plan{Engine: "native", Buckets: true}); err == nil ||
		err.Error() != "model seq: symbolic dimensions and no bucket program (--buckets)" {
		t.Errorf("no bucket: %v", err)
	}
}
