package conformance

import (
	"bytes"
	"compress/zlib"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/clients/go/jaxport"
)

const caseDir = "../../../tests/conformance/cases"

// Every committed case parses and every tensor it names can be read by this runner.
func TestCommittedCasesLoad(t *testing.T) {
	cases, err := LoadCases(caseDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		var specs []TensorSpec
		specs = append(specs, c.Request.Inputs...)
		specs = append(specs, c.Expect.Outputs...)
		for _, r := range c.Request.Requests {
			specs = append(specs, r.Inputs...)
		}
		for _, r := range c.Expect.Responses {
			specs = append(specs, r.Outputs...)
		}
		for _, s := range specs {
			if s.Data == "" && s.Ramp == nil {
				continue // metadata signature entries
			}
			if _, err := TensorBytes(c, s); err != nil {
				t.Errorf("%s: %s: %v", c.Name, s.Name, err)
			}
		}
	}
}

func TestReadNpyRejectsGarbage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.npy")
	if err := os.WriteFile(p, []byte("not numpy at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadNpy(p); err == nil {
		t.Fatal("garbage must not parse")
	}
}

func TestCompareTensor(t *testing.T) {
	want := jaxport.Must(jaxport.Float32("y", []int64{2}, []float32{1, 2}))
	spec := TensorSpec{Name: "y", Datatype: "FP32", Shape: []int64{2}, Rtol: 1e-6, Atol: 1e-6}
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{2}, []float32{1, 2.000001})), want.Raw); err != nil {
		t.Fatalf("within tolerance: %v", err)
	}
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{2}, []float32{1, 2.1})), want.Raw); err == nil {
		t.Fatal("2.1 vs 2 must fail")
	}
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{1, 2}, []float32{1, 2})), want.Raw); err == nil {
		t.Fatal("shape [1 2] vs [2] must fail")
	}
	ints := TensorSpec{Name: "n", Datatype: "INT64", Shape: []int64{1}}
	big := jaxport.Must(jaxport.Int64("n", []int64{1}, []int64{1<<53 + 1}))
	if err := CompareTensor(ints, jaxport.Must(jaxport.Int64("n", []int64{1}, []int64{1 << 53})), big.Raw); err == nil {
		t.Fatal("INT64 must compare exactly, beyond float64 precision")
	}
}

func TestRamp(t *testing.T) {
	b, err := rampBytes(Ramp{Start: 1, Step: 0.5, Modulo: 3}, "FP32", 5)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := jaxport.RawTensor("r", "FP32", []int64{5}, b).AsFloat32()
	want := []float32{1, 1.5, 2, 1, 1.5}
	for i := range want {
		if v[i] != want[i] {
			t.Fatalf("ramp %v, want %v", v, want)
		}
	}
}

func TestCompareSpecialValues(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	spec := TensorSpec{Name: "y", Datatype: "FP32", Shape: []int64{3}, Rtol: 1e-6, Atol: 1e-6}
	want := jaxport.Must(jaxport.Float32("y", []int64{3}, []float32{inf, -inf, nan})).Raw
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{3}, []float32{inf, -inf, nan})), want); err != nil {
		t.Fatalf("equal specials: %v", err)
	}
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{3}, []float32{-inf, -inf, nan})), want); err == nil {
		t.Fatal("-inf vs +inf must fail")
	}
	if err := CompareTensor(spec, jaxport.Must(jaxport.Float32("y", []int64{3}, []float32{inf, -inf, 0})), want); err == nil {
		t.Fatal("0 vs NaN must fail")
	}
}

// The runner's "deflate" is a zlib stream both ways; an unknown algorithm is an error naming it.
func TestDeflateIsZlib(t *testing.T) {
	var buf bytes.Buffer
	w, _ := zlibCompressor{}.Compress(&buf)
	if _, err := w.Write([]byte("conformance payload")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("not a zlib stream: %v", err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || string(got) != "conformance payload" {
		t.Fatalf("zlib read %q, %v", got, err)
	}
	r, err := zlibCompressor{}.Decompress(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if back, _ := io.ReadAll(r); string(back) != "conformance payload" {
		t.Fatalf("decompressed %q", back)
	}
	_, err = callOptions(Case{Name: "c", GRPCCompression: "snappy"})
	if err == nil || !strings.Contains(err.Error(), `"snappy"`) {
		t.Fatalf("unknown algorithm: err %v, expected one naming it", err)
	}
	if opts, err := callOptions(Case{Name: "c"}); err != nil || len(opts) != 0 {
		t.Fatalf("no compression: %v %v", opts, err)
	}
}
