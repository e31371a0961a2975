package artifact

import (
	"testing"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Tokens and dynamic dimensions, which the committed artifact has none of.
func TestTokensAndDynamicDimensionsAreCompared(t *testing.T) {
	f32 := &jaxportv1.DType{Numpy: "float32", Mlir: "f32", Datatype: "FP32", Itemsize: 4}
	program := &jaxportv1.Program{MlirbcFile: "model.mlirbc",
		Arguments: []*jaxportv1.Argument{{Name: "token", Role: roleArgToken}, {Name: "x", Role: jaxportv1.ArgumentRole_ARGUMENT_ROLE_INPUT,
			Shape: []int64{-1, 4}, Dtype: f32, DimNames: []string{"B", ""}}},
		Results: []*jaxportv1.Result{{Name: "token", Role: roleResToken}}}
	token := TensorType{Token: true}
	x := TensorType{Shape: []int64{-1, 4}, Elem: "f32"}
	if err := checkSignature("m/manifest.json", 0, program, &Signature{Inputs: []TensorType{token, x}, Results: []TensorType{token}}); err != nil {
		t.Fatal(err)
	}
	err := checkSignature("m/manifest.json", 0, program, &Signature{Inputs: []TensorType{x, x}, Results: []TensorType{token}})
	want := "m/manifest.json: programs[0].arguments[0] ('token'): type differs from the program's: the manifest says " +
		"!stablehlo.token, @main of model.mlirbc takes tensor<?x4xf32> (was the manifest edited?)"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}
