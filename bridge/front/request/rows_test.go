package request

// Tests of classRows and topk: which outputs are classified per batch row, and the strings
// that follow (the rule clients/python/artifact/dims.py row_outputs states for the exporter's
// --labels check).

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

var (
	rowsScores = [][]float32{{0.5, 2.25, -1.0, 3.0, 0.125}, {7.0, 6.0, 5.0, 4.0, 3.0}}
	rowsLabels = []string{"cat", "dog", "", "fish", "owl"}
	rowsPerRow = `["3.000000:3:fish","2.250000:1:dog","0.500000:0:cat","7.000000:0:cat","6.000000:1:dog","5.000000:2"]`
	rowsWhole  = `["7.000000:5","6.000000:6","5.000000:7"]` // rows mixed: no label past index 4
)

func namedSpec(name string, shape []int64, dimNames ...string) *jaxportv1.TensorSpec {
	s := spec(name, "FP32", shape...)
	s.DimNames = dimNames
	return s
}

// rowsManifest: the Python test's _manifest(case).
func rowsManifest(c string) *jaxportv1.Manifest {
	m := &jaxportv1.Manifest{}
	switch c {
	case "batch-sizes":
		m.Inputs = []*jaxportv1.TensorSpec{namedSpec("x", []int64{-1, 5})}
		m.Outputs = []*jaxportv1.TensorSpec{namedSpec("logits", []int64{-1, 5})}
		m.Batching = &jaxportv1.Batching{BatchSizes: []uint32{1, 4}, BatchedInputs: []string{"x"}, BatchedOutputs: []string{"logits"}}
	case "dim-B":
		m.Dimensions = []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 8}}
		m.Inputs = []*jaxportv1.TensorSpec{namedSpec("x", []int64{-1, 5}, "B", "")}
		m.Outputs = []*jaxportv1.TensorSpec{namedSpec("logits", []int64{-1, 5}, "B", "")}
	case "dim-T-not-first":
		m.Dimensions = []*jaxportv1.Dimension{{Name: "T", Min: 1, Max: 8}}
		m.Inputs = []*jaxportv1.TensorSpec{namedSpec("x", []int64{2, -1}, "", "T")}
		m.Outputs = []*jaxportv1.TensorSpec{namedSpec("logits", []int64{2, 5})}
	case "dim-B-not-on-every-output":
		m.Dimensions = []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 8}}
		m.Inputs = []*jaxportv1.TensorSpec{namedSpec("x", []int64{-1, 5}, "B", "")}
		m.Outputs = []*jaxportv1.TensorSpec{namedSpec("logits", []int64{-1, 5}, "B", ""), namedSpec("bias", []int64{2, 5})}
	case "fixed":
		m.Inputs = []*jaxportv1.TensorSpec{namedSpec("x", []int64{2, 5})}
		m.Outputs = []*jaxportv1.TensorSpec{namedSpec("logits", []int64{2, 5})}
	}
	return m
}

func rowsBytes() []byte {
	var b []byte
	for _, row := range rowsScores {
		for _, v := range row {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

func TestClassRows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rows  []string
		shape []int64 // the BYTES result's
		want  string
	}{
		{"batch-sizes", []string{"logits"}, []int64{2, 3}, rowsPerRow},
		{"dim-B", []string{"logits"}, []int64{2, 3}, rowsPerRow},
		{"dim-T-not-first", nil, []int64{3}, rowsWhole},
		{"dim-B-not-on-every-output", nil, []int64{3}, rowsWhole},
		{"fixed", nil, []int64{3}, rowsWhole},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := classRows(rowsManifest(tc.name))
			var got []string
			for n, ok := range rows {
				if ok {
					got = append(got, n)
				}
			}
			if !slices.Equal(got, tc.rows) {
				t.Fatalf("classRows = %v; want %v", got, tc.rows)
			}
			sig, err := newTensorSig("m", "output", namedSpec("logits", []int64{2, 5}), false)
			if err != nil {
				t.Fatal(err)
			}
			sig.labels, sig.classRows = rowsLabels, rows["logits"]
			shape, raw := topk(&sig, []int64{2, 5}, rowsBytes(), 3)
			if !slices.Equal(shape, tc.shape) {
				t.Fatalf("shape %v; want %v", shape, tc.shape)
			}
			if got := bytesText(raw); got != tc.want {
				t.Fatalf("topk = %s; want %s", got, tc.want)
			}
		})
	}
}

// TestNewSignatureSetsClassRows: the signature a served model gets classifies per row exactly
// the outputs classRows names (a batched model's batched outputs; none for fixed shapes).
func TestNewSignatureSetsClassRows(t *testing.T) {
	for c, want := range map[string]bool{"batch-sizes": true, "fixed": false} {
		m := rowsManifest(c)
		size := uint32(0)
		if m.Batching != nil {
			size = 4
		}
		m.Programs = []*jaxportv1.Program{{BatchSize: size}}
		s, err := NewSignature("m", "1", m, nil, Plan{Engine: "native"})
		if err != nil {
			t.Fatal(err)
		}
		if s.outputs[0].classRows != want {
			t.Errorf("%s: classRows %v; want %v", c, s.outputs[0].classRows, want)
		}
	}
}

// bytesText: BYTES raw contents as a JSON list of strings.
func bytesText(raw []byte) string {
	var parts []string
	for len(raw) >= 4 {
		n := int(binary.LittleEndian.Uint32(raw))
		parts = append(parts, `"`+string(raw[4:4+n])+`"`)
		raw = raw[4+n:]
	}
	return "[" + strings.Join(parts, ",") + "]"
}
