package artifact

import (
	"fmt"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// DType is one row of the dtype table: the numpy name a manifest's DType carries, the Open
// Inference Protocol datatype, the MLIR element type and the item size in bytes (the Python
// table: clients/python/jaxport/protocol/dtypes.py, in its order).
type DType struct {
	Numpy, Datatype, MLIR string
	Itemsize              int
}

// DTypes is the table, in the Python table's order (the order "supported:" lists).
var DTypes = []DType{
	{"bool", "BOOL", "i1", 1},
	{"uint8", "UINT8", "ui8", 1},
	{"uint16", "UINT16", "ui16", 2},
	{"uint32", "UINT32", "ui32", 4},
	{"uint64", "UINT64", "ui64", 8},
	{"int8", "INT8", "i8", 1},
	{"int16", "INT16", "i16", 2},
	{"int32", "INT32", "i32", 4},
	{"int64", "INT64", "i64", 8},
	{"float16", "FP16", "f16", 2},
	{"bfloat16", "BF16", "bf16", 2},
	{"float32", "FP32", "f32", 4},
	{"float64", "FP64", "f64", 8},
}

// DTypeOf is the row of a manifest DType, checked: its numpy name is in the table and its
// mlir, datatype and itemsize agree with the row (manifest.numpy_dtype's messages).
func DTypeOf(dt *jaxportv1.DType) (DType, error) {
	for _, row := range DTypes {
		if row.Numpy != dt.GetNumpy() {
			continue
		}
		if row.MLIR != dt.GetMlir() || row.Datatype != dt.GetDatatype() || row.Itemsize != int(dt.GetItemsize()) {
			return row, errorf(fmt.Sprintf("manifest dtype %s is inconsistent: mlir=%s datatype=%s itemsize=%d "+
				"(expected %s, %s, %d)", pyRepr(dt.GetNumpy()), pyRepr(dt.GetMlir()), pyRepr(dt.GetDatatype()),
				dt.GetItemsize(), pyRepr(row.MLIR), pyRepr(row.Datatype), row.Itemsize))
		}
		return row, nil
	}
	names := make([]string, len(DTypes))
	for i, row := range DTypes {
		names[i] = row.Numpy
	}
	return DType{}, errorf(fmt.Sprintf("manifest names an unsupported dtype: unsupported dtype %s; supported: %s",
		pyRepr(dt.GetNumpy()), strings.Join(names, ", ")))
}
