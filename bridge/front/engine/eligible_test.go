package engine

import (
	"strings"
	"testing"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

func TestEligible(t *testing.T) {
	fixed := func() *jaxportv1.Manifest {
		return &jaxportv1.Manifest{NrDevices: 1, Platforms: []string{"cpu"}, Programs: []*jaxportv1.Program{
			{MlirbcFile: "model.mlirbc"}}}
	}
	if why := Eligible(fixed(), "cpu"); why != "" {
		t.Errorf("fixed-shape model refused: %s", why)
	}
	sharded := fixed()
	sharded.NrDevices = 4
	sharded.Mesh = &jaxportv1.Mesh{Axes: []*jaxportv1.MeshAxis{{Name: "data", Size: 2}, {Name: "model", Size: 2}}}
	poly := fixed()
	poly.Programs[0].Polymorphic = true
	buckets := fixed()
	buckets.Programs = []*jaxportv1.Program{{Polymorphic: true}, {MlirbcFile: "model.B2.T8.mlirbc"}}
	custom := fixed()
	custom.Programs[0].CustomCallTargets = []string{"my_kernel"}
	token := fixed()
	token.Programs[0].Arguments = []*jaxportv1.Argument{{Name: "token_0", Role: jaxportv1.ArgumentRole_ARGUMENT_ROLE_TOKEN}}
	for _, tc := range []struct {
		m        *jaxportv1.Manifest
		platform string
		want     string
	}{
		{sharded, "cpu", "sharded program for 4 devices (mesh data=2,model=2)"},
		{poly, "cpu", "shape-polymorphic program only"},
		{buckets, "cpu", ""},
		{custom, "cpu", "model.mlirbc has custom calls my_kernel"},
		{token, "cpu", "model.mlirbc takes token argument token_0"},
		{fixed(), "cuda", "lowered for [cpu], the PJRT plugin runs cuda"},
	} {
		why := Eligible(tc.m, tc.platform)
		if (tc.want == "") != (why == "") || !strings.HasPrefix(why, tc.want) {
			t.Errorf("want %q, got %q", tc.want, why)
		}
	}
}

func TestRefusedIsOneLine(t *testing.T) {
	r := &Refused{Model: "mlp", Reason: "compile failed: a\nb\nc"}
	if got := r.Error(); got != "native engine: model mlp: compile failed: a (+2 more lines)" {
		t.Errorf("got %q", got)
	}
}
