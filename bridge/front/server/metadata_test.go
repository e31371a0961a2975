package server

// ModelConfig from the manifest in Go: the fields and parameters bridge/servicer.py gave
// (max_batch_size, dims without the batch dimension, label_filename, dynamic_batching,
// engine/schema_version, dims/buckets/padding) plus `reason` when the model is not native.

import (
	"slices"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/request"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

func spec(name, datatype string, itemsize uint32, shape []int64, dims ...string) *jaxportv1.TensorSpec {
	return &jaxportv1.TensorSpec{Name: name, Shape: shape, DimNames: dims,
		Dtype: &jaxportv1.DType{Datatype: datatype, Itemsize: itemsize}}
}

func model(t *testing.T, m *jaxportv1.Manifest, engine, reason string, labels map[string][]string, b *dispatch.Batching) *dispatch.Model {
	t.Helper()
	sig, err := request.NewSignature("m", "2", m, labels, request.Plan{Engine: engine,
		Buckets: engine != dispatch.EngineExported, DynamicBatching: b != nil})
	if err != nil {
		t.Fatal(err)
	}
	return &dispatch.Model{Name: "m", Version: "2", Manifest: m, Sig: sig, Engine: engine, Reason: reason, Batching: b}
}

func params(cfg *inferencepb.ModelConfig) map[string]string {
	out := map[string]string{}
	for k, v := range cfg.GetParameters() {
		out[k] = v.GetStringValue()
	}
	return out
}

func TestConfigOfABatchedModel(t *testing.T) {
	m := &jaxportv1.Manifest{SchemaVersion: 1,
		Inputs:   []*jaxportv1.TensorSpec{spec("x", "FP32", 4, []int64{-1, 5}), spec("k", "INT64", 8, []int64{3})},
		Outputs:  []*jaxportv1.TensorSpec{{Name: "logits", Shape: []int64{-1, 3}, LabelsFile: "labels/logits.txt", Dtype: &jaxportv1.DType{Datatype: "BF16", Itemsize: 2}}},
		Batching: &jaxportv1.Batching{BatchSizes: []uint32{1, 4, 8}, BatchedInputs: []string{"x"}, BatchedOutputs: []string{"logits"}},
		Programs: []*jaxportv1.Program{{BatchSize: 1}, {BatchSize: 4}, {BatchSize: 8}}}
	b := &dispatch.Batching{MaxQueueDelay: 1500 * time.Microsecond, Preferred: []int{4, 8}}
	cfg := Config(model(t, m, dispatch.EngineNative, "", map[string][]string{"logits": {"a", "b", "c"}}, b))
	if cfg.GetName() != "m" || cfg.GetPlatform() != "jax" || cfg.GetBackend() != "jaxport-native" || cfg.GetMaxBatchSize() != 8 {
		t.Fatalf("header %v", cfg)
	}
	in := cfg.GetInput()
	if len(in) != 2 || !slices.Equal(in[0].GetDims(), []int64{5}) || in[0].GetDataType() != inferencepb.DataType_TYPE_FP32 ||
		!slices.Equal(in[1].GetDims(), []int64{3}) || in[1].GetDataType() != inferencepb.DataType_TYPE_INT64 {
		t.Fatalf("inputs %v", in)
	}
	out := cfg.GetOutput()[0]
	if out.GetDataType() != inferencepb.DataType_TYPE_BF16 || !slices.Equal(out.GetDims(), []int64{3}) || out.GetLabelFilename() != "labels/logits.txt" {
		t.Fatalf("output %v", out)
	}
	if got := params(cfg); len(got) != 2 || got["engine"] != "native" || got["schema_version"] != "1" {
		t.Fatalf("parameters %v", got)
	}
	db := cfg.GetDynamicBatching()
	if db == nil || !slices.Equal(db.GetPreferredBatchSize(), []int32{4, 8}) || db.GetMaxQueueDelayMicroseconds() != 1500 {
		t.Fatalf("dynamic_batching %v", db)
	}
	// Labels not read: no label_filename.
	if got := Config(model(t, m, dispatch.EngineNative, "", nil, nil)).GetOutput()[0].GetLabelFilename(); got != "" {
		t.Fatalf("label_filename without labels: %q", got)
	}
}

func TestConfigOfASymbolicModelPerEngine(t *testing.T) {
	m := &jaxportv1.Manifest{SchemaVersion: 2,
		Dimensions: []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 8}, {Name: "T", Min: 8, Max: 64, MultipleOf: 8}},
		Inputs:     []*jaxportv1.TensorSpec{spec("ids", "INT32", 4, []int64{-1, -1}, "B", "T"), spec("mask", "INT32", 4, []int64{-1, -1}, "B", "T")},
		Outputs:    []*jaxportv1.TensorSpec{spec("h", "FP32", 4, []int64{-1, -1, 4}, "B", "T", "")},
		Programs: []*jaxportv1.Program{{Polymorphic: true}, {Dims: map[string]int64{"B": 2, "T": 32}},
			{Dims: map[string]int64{"B": 2, "T": 16}}},
		Padding: []*jaxportv1.Padding{{Dim: "T", MaskInput: "mask"}}}
	native := Config(model(t, m, dispatch.EngineNative, "", nil, nil))
	want := map[string]string{"engine": "native", "schema_version": "2", "dims": "B=1..8,T=8..64:8",
		"buckets": "B=2,T=16;B=2,T=32", "padding": "T=mask"}
	if got := params(native); !mapsEqual(got, want) || native.GetMaxBatchSize() != 0 ||
		!slices.Equal(native.GetInput()[0].GetDims(), []int64{-1, -1}) {
		t.Fatalf("native: %v %v", got, native.GetInput())
	}
	exported := Config(model(t, m, dispatch.EngineExported, "--engine exported was asked for", nil, nil))
	want = map[string]string{"engine": "exported", "schema_version": "2", "dims": "B=1..8,T=8..64:8",
		"reason": "--engine exported was asked for"}
	if got := params(exported); !mapsEqual(got, want) || exported.GetBackend() != "jaxport-exported" {
		t.Fatalf("exported: %v", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
