package request

import (
	"encoding/hex"
	"math"
	"slices"
	"testing"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/protobuf/proto"
)

// Raw contents are used in place; BOOL bytes other than 0/1 are normalised into a copy, and
// the request's bytes stay as they came.
func TestPrepareRawInPlace(t *testing.T) {
	c := prepareCases[slices.IndexFunc(prepareCases, func(c prepareCase) bool { return c.name == "ok raw bool normalised" })]
	s := testSignature(t, c.model)
	req := c.request(t)
	p, err := s.Prepare(req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if &p.Inputs[1][0] != &req.Raw[1][0] {
		t.Error("UINT8 input copied; want the request's bytes in place")
	}
	if &p.Inputs[0][0] == &req.Raw[0][0] || hex.EncodeToString(req.Raw[0]) != "0002ff" {
		t.Errorf("BOOL input %x aliases or changed the request's %x", p.Inputs[0], req.Raw[0])
	}
	c = prepareCases[slices.IndexFunc(prepareCases, func(c prepareCase) bool { return c.name == "ok raw all outputs" })]
	s = testSignature(t, c.model)
	req = c.request(t)
	if p, err = s.Prepare(req, nil); err != nil {
		t.Fatal(err)
	}
	if &p.Inputs[0][0] != &req.Raw[0][0] || p.Classes != nil {
		t.Errorf("FP32 input copied or classes %v allocated", p.Classes)
	}
}

func TestSignatureAccessors(t *testing.T) {
	rows := testSignature(t, "rows")
	if !slices.Equal(rows.BatchSizes(), []int{1, 4, 8}) {
		t.Errorf("batchSizes %v", rows.BatchSizes())
	}
	for i, want := range []struct {
		batched bool
		bytes   int
	}{{true, 8}, {true, 4}, {false, 12}} {
		if rows.BatchedInput(i) != want.batched || rows.RowBytes(i) != want.bytes {
			t.Errorf("input %d: batched %v rowBytes %d; want %v %d", i, rows.BatchedInput(i), rows.RowBytes(i), want.batched, want.bytes)
		}
	}
	if !rows.BatchedOutput(0) || rows.OutputRowBytes(0) != 12 || rows.BatchedOutput(1) || rows.OutputRowBytes(1) != 8 {
		t.Errorf("outputs: batched %v %v, rowBytes %d %d", rows.BatchedOutput(0), rows.BatchedOutput(1), rows.OutputRowBytes(0), rows.OutputRowBytes(1))
	}
	mlp := testSignature(t, "mlp")
	if mlp.BatchSizes() != nil || mlp.BatchedInput(0) || mlp.RowBytes(0) != 24 || mlp.OutputRowBytes(2) != 8 {
		t.Errorf("mlp: sizes %v batched %v rowBytes %d outputRowBytes %d", mlp.BatchSizes(), mlp.BatchedInput(0), mlp.RowBytes(0), mlp.OutputRowBytes(2))
	}
	// Batching without batched inputs is an unbatched model (bridge/model.py's batch_sizes).
	nb := testSignature(t, "nobatched")
	if nb.BatchSizes() != nil || nb.BatchedInput(0) || nb.RowBytes(0) != 8 {
		t.Errorf("nobatched: sizes %v batched %v rowBytes %d", nb.BatchSizes(), nb.BatchedInput(0), nb.RowBytes(0))
	}
}

func TestNewSignatureRefuses(t *testing.T) {
	base := func() *jaxportv1.Manifest {
		return testManifest([]*jaxportv1.TensorSpec{spec("a", "FP32", -1, 2)}, []*jaxportv1.TensorSpec{spec("y", "FP32", -1)},
			[]uint32{1, 2}, []string{"a"}, []string{"y"})
	}
	cases := []struct {
		name, want string
		edit       func(m *jaxportv1.Manifest) *jaxportv1.Manifest
	}{
		{"no manifest", "model m: no manifest", func(*jaxportv1.Manifest) *jaxportv1.Manifest { return nil }},
		{"dimensions without a polymorphic program", "model m: symbolic dimensions and no shape-polymorphic program", func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Dimensions = []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 8}}
			m.Batching = nil
			m.Inputs[0].DimNames = []string{"B", ""}
			m.Outputs[0].DimNames = []string{"B"}
			return m
		}},
		{"datatype", `model m: input "a": datatype "BYTES" (itemsize 0) is not served`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Inputs[0].Dtype = &jaxportv1.DType{Datatype: "BYTES"}
			return m
		}},
		{"itemsize", `model m: output "y": datatype "FP32" (itemsize 0) is not served`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Outputs[0].Dtype = &jaxportv1.DType{Datatype: "FP32"}
			return m
		}},
		{"input twice", `model m: input "a" listed twice`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Inputs = append(m.Inputs, spec("a", "FP32", -1, 2))
			return m
		}},
		{"output twice", `model m: output "y" listed twice`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Outputs = append(m.Outputs, spec("y", "FP32", -1))
			return m
		}},
		{"no program", "model m: the manifest lists no program", func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Programs = nil
			return m
		}},
		{"batched unknown", `model m: batched input "b" is not an input`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Batching.BatchedInputs = []string{"a", "b"}
			return m
		}},
		{"batched scalar", `model m: batched input "s" is a scalar`, func(m *jaxportv1.Manifest) *jaxportv1.Manifest {
			m.Inputs = append(m.Inputs, spec("s", "FP32"))
			m.Batching.BatchedInputs = []string{"a", "s"}
			return m
		}},
	}
	for _, c := range cases {
		if _, err := NewSignature("m", "1", c.edit(base()), nil, Plan{Engine: "native"}); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
	if _, err := NewSignature("m", "1", base(), nil, Plan{Engine: "native"}); err != nil {
		t.Errorf("base manifest: %v", err)
	}
}

func TestResponseRejectsOutputsThatDoNotFit(t *testing.T) {
	s := testSignature(t, "rows")
	p := &Prepared{Rows: 2, Outputs: []int{0, 1}}
	req := &Request{}
	if _, err := s.Response(req, p, []Tensor{{Shape: []int64{2, 3}, Data: make([]byte, 24)}}); err == nil || err.Error() != "model rows: 1 outputs for 2" {
		t.Errorf("output count: %v", err)
	}
	_, err := s.Response(req, p, []Tensor{{Shape: []int64{2, 3}, Data: make([]byte, 12)}, {Data: make([]byte, 8)}})
	if err == nil || err.Error() != "model rows: output y holds 12 bytes; shape [2 3] needs 24" {
		t.Errorf("batched output bytes: %v", err)
	}
	// 4 rows of a padded batch cut back to the request's 2: a prefix, not a copy.
	y := make([]byte, 48)
	resp, err := s.Response(req, p, []Tensor{{Shape: []int64{4, 3}, Data: y}, {Data: make([]byte, 8)}})
	if err != nil || resp.Version != "1" || !slices.Equal(resp.Outputs[0].Shape, []int64{2, 3}) ||
		len(resp.Outputs[0].Data) != 24 || &resp.Outputs[0].Data[0] != &y[0] || len(resp.Outputs[1].Shape) != 0 {
		t.Errorf("response %v, %v", resp, err)
	}
}

// Python's "%f" (C's printf) rounds an exact tie to even; numpy sorts NaN last, so top-k puts
// it first; std::to_string spells non-finite values as Python does.
func TestResponseClassValueFormatting(t *testing.T) {
	sig := &tensorSig{Datatype: Datatype{Name: "FP64", Itemsize: 8, kind: kindFloat}}
	for _, c := range []struct {
		v    float64
		want string
	}{{0.0078125, "0.007812"}, {0.0234375, "0.023438"}, {-0.0, "0.000000"}, {math.Copysign(0, -1), "-0.000000"},
		{math.NaN(), "nan"}, {math.Inf(1), "inf"}, {math.Inf(-1), "-inf"}, {1e20, "100000000000000000000.000000"}} {
		row := make([]byte, 8)
		row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7] = byte(math.Float64bits(c.v)), byte(math.Float64bits(c.v)>>8),
			byte(math.Float64bits(c.v)>>16), byte(math.Float64bits(c.v)>>24), byte(math.Float64bits(c.v)>>32),
			byte(math.Float64bits(c.v)>>40), byte(math.Float64bits(c.v)>>48), byte(math.Float64bits(c.v)>>56)
		if got := string(appendClassValue(nil, sig, row, 0)); got != c.want {
			t.Errorf("%v: %q; want %q", c.v, got, c.want)
		}
	}
	if got := halfToFloat(0x0001); got != math.Ldexp(1, -24) {
		t.Errorf("smallest FP16 subnormal: %v", got)
	}
	if got := halfToFloat(0x7e00); !math.IsNaN(got) {
		t.Errorf("FP16 NaN: %v", got)
	}
}

// BenchmarkPrepareResponse: one request's parse, validation, response and marshalling (the
// demo MLP's shape: one FP32 input, two outputs).
func BenchmarkPrepareResponse(b *testing.B) {
	m := testManifest([]*jaxportv1.TensorSpec{spec("x", "FP32", 4, 16)},
		[]*jaxportv1.TensorSpec{spec("logits", "FP32", 4, 10), spec("probs", "FP32", 4, 10)}, nil, nil, nil)
	s, err := NewSignature("demo", "1", m, nil, Plan{Engine: "native"})
	if err != nil {
		b.Fatal(err)
	}
	body, _ := proto.Marshal(&inferencepb.ModelInferRequest{ModelName: "demo", Id: "1",
		Inputs:           []*inferencepb.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{4, 16}}},
		RawInputContents: [][]byte{make([]byte, 4*16*4)}})
	outputs := []Tensor{{Shape: []int64{4, 10}, Data: make([]byte, 160)}, {Shape: []int64{4, 10}, Data: make([]byte, 160)}}
	b.ReportAllocs()
	for b.Loop() {
		req, err := Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		p, err := s.Prepare(req, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := s.Response(req, p, outputs)
		if err != nil {
			b.Fatal(err)
		}
		_ = resp.Marshal()
	}
}
