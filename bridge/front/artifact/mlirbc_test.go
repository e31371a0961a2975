package artifact_test

// @main's signature read from the committed artifact's model.mlirbc (a real jax.export), and
// the rule that a manifest describes its programs (artifact.Open applies it): an edited shape,
// dtype or result list is refused in one line naming the manifest entry and both types;
// bytecode the reader cannot read is left to the compiler (never a refusal, never a panic).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

func types(ts []artifact.TensorType) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return strings.Join(out, ", ")
}

func TestMainSignatureIsReadFromTheBytecode(t *testing.T) {
	a, err := openDir(t, artifacttest.Backcompat())
	must(t, err)
	code, err := a.ReadListed(ctx, "model.mlirbc")
	must(t, err)
	sig, err := artifact.MainSignature(code)
	must(t, err)
	// model.mlir's @main, as jax lowered it: six parameters, then x, scale (a scalar), ids.
	wantIn := "tensor<4x2xf32>, tensor<10x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, " +
		"tensor<3x4xf32>, tensor<f32>, tensor<3xi32>"
	if got := types(sig.Inputs); got != wantIn {
		t.Fatalf("inputs %s\nwant   %s", got, wantIn)
	}
	if got, want := types(sig.Results), "tensor<3xi32>, tensor<3xf32>, tensor<3x2xf32>"; got != want {
		t.Fatalf("results %s, want %s", got, want)
	}
}

func TestAManifestThatIsNotItsProgramIsRefused(t *testing.T) {
	int64Dtype := &jaxportv1.DType{Numpy: "int64", Mlir: "i64", Datatype: "INT64", Itemsize: 8}
	for _, tc := range []struct {
		name string
		edit func(m *jaxportv1.Manifest)
		want string
	}{
		{"input shape", func(m *jaxportv1.Manifest) {
			x := m.GetPrograms()[0].GetArguments()[6]
			x.Shape, x.ByteSize = []int64{4, 4}, 64
		}, "programs[0].arguments[6] ('x'): shape differs from the program's: the manifest says tensor<4x4xf32>, " +
			"@main of model.mlirbc takes tensor<3x4xf32> (was the manifest edited?)"},
		{"input dtype", func(m *jaxportv1.Manifest) {
			ids := m.GetPrograms()[0].GetArguments()[8]
			ids.Dtype, ids.ByteSize = int64Dtype, 24
		}, "programs[0].arguments[8] ('ids'): dtype differs from the program's: the manifest says tensor<3xi64>, " +
			"@main of model.mlirbc takes tensor<3xi32> (was the manifest edited?)"},
		{"parameter shape and dtype", func(m *jaxportv1.Manifest) {
			w := m.GetPrograms()[0].GetArguments()[0]
			w.Shape, w.Dtype, w.ByteSize = []int64{2, 4}, int64Dtype, 64
		}, "programs[0].arguments[0] ('params.a_head.0.w'): shape and dtype differ from the program's: the manifest " +
			"says tensor<2x4xi64>, @main of model.mlirbc takes tensor<4x2xf32> (was the manifest edited?)"},
		{"result shape", func(m *jaxportv1.Manifest) {
			head := m.GetPrograms()[0].GetResults()[2]
			head.Shape, head.ByteSize = []int64{3, 3}, 36
		}, "programs[0].results[2] ('head'): shape differs from the program's: the manifest says tensor<3x3xf32>, " +
			"@main of model.mlirbc returns tensor<3x2xf32> (was the manifest edited?)"},
		{"a result fewer", func(m *jaxportv1.Manifest) {
			p := m.GetPrograms()[0]
			p.Results = p.Results[:2]
		}, "programs[0] lists 9 arguments and 2 results but @main of model.mlirbc takes 9 and returns 3 " +
			"(was the manifest edited?)"},
		// The model's inputs and outputs (what requests are checked against) are the program's.
		{"model input shape", func(m *jaxportv1.Manifest) {
			m.GetInputs()[0].Shape = []int64{4, 4}
		}, "inputs['x'] is tensor<4x4xf32> but programs[0].arguments[6] ('x') is tensor<3x4xf32> (was the manifest edited?)"},
		{"model output dtype", func(m *jaxportv1.Manifest) {
			for _, out := range m.GetOutputs() {
				if out.GetName() == "aux.norm" {
					out.Dtype = int64Dtype
				}
			}
		}, "outputs['aux.norm'] is tensor<3xi64> but programs[0].results[1] ('aux.norm') is tensor<3xf32> (was the manifest edited?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copied(t)
			editManifest(t, dir, tc.edit)
			// A consistent lie: the manifest alone is valid (ParseManifest), its program is not it.
			raw, err := os.ReadFile(filepath.Join(dir, artifact.ManifestFile))
			must(t, err)
			_, err = artifact.ParseManifest(raw, "manifest.json")
			must(t, err)
			a, err := openDir(t, dir)
			var ae *artifact.Error
			if a != nil || !errors.As(err, &ae) || ae.Checksum {
				t.Fatalf("%T %v; want an *artifact.Error that is no checksum error", err, err)
			}
			want := filepath.Join(dir, "manifest.json") + ": " + tc.want
			if err.Error() != want {
				t.Fatalf("got  %s\nwant %s", err, want)
			}
			if reason := artifact.LoadReason(err); reason != "manifest.json: "+want {
				t.Fatalf("load reason %q", reason)
			}
		})
	}
}

// Every truncation of real bytecode, and bytes that are none, is unreadable: an error wrapping
// ErrUnreadableBytecode (no panic); an artifact whose manifest lists such a program (sha256
// and size its own) opens: the compiler is the one to refuse it.
func TestUnreadableBytecodeIsLeftToTheCompiler(t *testing.T) {
	code, err := os.ReadFile(filepath.Join(artifacttest.Backcompat(), "model.mlirbc"))
	must(t, err)
	cases := [][]byte{nil, []byte("not bytecode"), []byte("ML\xefR")}
	for n := 4; n < len(code); n++ {
		cases = append(cases, code[:n])
	}
	for _, c := range cases {
		if _, err := artifact.MainSignature(c); !errors.Is(err, artifact.ErrUnreadableBytecode) {
			t.Fatalf("%d bytes: %v", len(c), err)
		}
	}
	dir := copied(t)
	cut := code[:len(code)/2]
	must(t, os.WriteFile(filepath.Join(dir, "model.mlirbc"), cut, 0o644))
	sum := sha256.Sum256(cut)
	editManifest(t, dir, func(m *jaxportv1.Manifest) {
		for _, f := range m.GetFiles() {
			if f.GetPath() == "model.mlirbc" {
				f.Sha256, f.SizeBytes = hex.EncodeToString(sum[:]), uint64(len(cut))
			}
		}
	})
	_, err = openDir(t, dir)
	must(t, err)
}

func FuzzMainSignature(f *testing.F) {
	code, err := os.ReadFile(filepath.Join(artifacttest.Backcompat(), "model.mlirbc"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(code)
	f.Fuzz(func(t *testing.T, b []byte) {
		sig, err := artifact.MainSignature(b)
		if err != nil && !errors.Is(err, artifact.ErrUnreadableBytecode) {
			t.Fatalf("an error that is not ErrUnreadableBytecode: %v", err)
		}
		if err == nil && sig == nil {
			t.Fatal("no signature and no error")
		}
	})
}
