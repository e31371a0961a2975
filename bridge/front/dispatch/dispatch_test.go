package dispatch

// The engine choice and the load refusals that need no backend: every model on the workers
// when the native engine is off or --engine asks for them, and a model that needs the
// workers without a worker Python configured is UNAVAILABLE naming the flag and why it needs
// them; batching a model that cannot batch fails its load naming the model and the fix.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

func fp32(name string, shape ...int64) *jaxportv1.TensorSpec {
	return &jaxportv1.TensorSpec{Name: name, Shape: shape, Dtype: &jaxportv1.DType{Datatype: "FP32", Itemsize: 4, Numpy: "float32"}}
}

func artifactOf(m *jaxportv1.Manifest) Artifact {
	return Artifact{Model: "m", Version: "1", Manifest: m, Location: "/nowhere"}
}

func TestWithoutWorkersAModelThatNeedsThemIsUnavailableNamingTheFlag(t *testing.T) {
	m := &jaxportv1.Manifest{Inputs: []*jaxportv1.TensorSpec{fp32("x", 2)}, Outputs: []*jaxportv1.TensorSpec{fp32("y", 2)},
		Programs: []*jaxportv1.Program{{MlirbcFile: "model.mlirbc"}}}
	for _, c := range []struct {
		opts Options
		why  string
	}{
		{Options{NativeOff: "the native engine is off (--pjrt-plugin none)"}, "(the native engine is off (--pjrt-plugin none))"},
		{Options{Engine: EnginePJRT}, "(--engine pjrt was asked for)"},
	} {
		_, err := New(c.opts).Load(context.Background(), artifactOf(m))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), c.why) ||
			!strings.Contains(err.Error(), "--worker-python PATH (env JAXPORT_WORKER_PYTHON)") {
			t.Errorf("%+v: %v", c.opts, err)
		}
	}
}

func TestBatchingRefusals(t *testing.T) {
	symbolic := &jaxportv1.Manifest{Dimensions: []*jaxportv1.Dimension{{Name: "B", Min: 1, Max: 4}, {Name: "T", Min: 1, Max: 8}},
		Inputs: []*jaxportv1.TensorSpec{fp32("x", -1, -1)}, Outputs: []*jaxportv1.TensorSpec{fp32("y", -1)}}
	fixed := &jaxportv1.Manifest{Inputs: []*jaxportv1.TensorSpec{fp32("x", 2)}, Outputs: []*jaxportv1.TensorSpec{fp32("y", 2)},
		Programs: []*jaxportv1.Program{{MlirbcFile: "model.mlirbc"}}}
	listed := func(string) *Batching { return &Batching{MaxQueueDelay: time.Millisecond, Listed: true} }
	_, err := New(Options{Batching: listed}).Load(context.Background(), artifactOf(symbolic))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(),
		"model 'm' (version 1) has symbolic dimensions (B, T): dynamic batching of a shape-polymorphic model is not built") {
		t.Errorf("symbolic: %v", err)
	}
	_, err = New(Options{Batching: listed}).Load(context.Background(), artifactOf(fixed))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(),
		"model 'm' (version 1) is named in --batching-models but was exported without --batch-sizes") {
		t.Errorf("listed, no batch sizes: %v", err)
	}
	// --batching alone skips it: the load goes on (and here needs the workers).
	alone := func(string) *Batching { return &Batching{} }
	_, err = New(Options{Batching: alone, NativeOff: "off"}).Load(context.Background(), artifactOf(fixed))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("--batching alone: %v", err)
	}
}
