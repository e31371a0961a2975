package engine

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

// Every expected message in this file was produced by running Python (.venv/bin/python) on the
// same values: clients/python/artifact/checks.py format_failure over a one-code table with
// the template and the payload's bytes (numpy/ml_dtypes scalars), i.e. the Python path's text.

var parityFile = flag.String("check-parity", "testdata/check_parity.json",
	"JSON cases {dtype, shape, data (hex), template, message (Python's, null: Python raises), must_accept}")

func res(name, part string, effect uint32, dtype string, shape ...int64) *jaxportv1.Result {
	size := uint64(itemSize(dtype))
	for _, d := range shape {
		size *= uint64(d)
	}
	return &jaxportv1.Result{Name: name, Role: jaxportv1.ResultRole_RESULT_ROLE_CHECK, Shape: shape,
		Dtype: &jaxportv1.DType{Numpy: dtype}, ByteSize: size,
		Check: &jaxportv1.CheckLeaf{Part: part, Effect: effect}}
}

// oneCode is a table with one user code whose effect has one payload leaf of dtype/shape, and
// the program's results (an output, then the effect's predicate, code and payload).
func oneCode(template, dtype string, shape ...int64) (*jaxportv1.Checks, []*jaxportv1.Result) {
	table := &jaxportv1.Checks{Enabled: []string{"user"}, Codes: []*jaxportv1.ErrorCode{
		{Code: 0, Kind: "user", Effect: 0, MessageTemplate: template, PayloadSize: 1, Location: "m.py:3 (f)"}}}
	return table, []*jaxportv1.Result{
		{Name: "y", Role: jaxportv1.ResultRole_RESULT_ROLE_OUTPUT, Dtype: &jaxportv1.DType{Numpy: "float32"}, ByteSize: 4},
		res("check.0.user.predicate", "predicate", 0, "bool"),
		res("check.0.user.code", "code", 0, "int32"),
		res("check.0.user.payload.0", "payload", 0, dtype, shape...),
	}
}

func fired(payload []byte) [][]byte {
	return [][]byte{make([]byte, 4), {1}, {0, 0, 0, 0}, payload}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func formatOne(t *testing.T, template, dtype string, data []byte, shape ...int64) string {
	t.Helper()
	table, results := oneCode(template, dtype, shape...)
	c, err := NewChecks(table, results)
	if err != nil {
		t.Fatalf("%s over %s%v refused: %v", template, dtype, shape, err)
	}
	f, err := c.Failure(fired(data))
	if err != nil || f == nil {
		t.Fatalf("%s over %s%v: failure %v, %v", template, dtype, shape, f, err)
	}
	if f.Kind != "user" || f.Code != codes.InvalidArgument {
		t.Errorf("kind %s code %s, want user InvalidArgument", f.Kind, f.Code)
	}
	return f.Message
}

func TestCheckMessageScalars(t *testing.T) {
	for _, tc := range []struct{ dtype, hex, template, want string }{
		{"float32", "cdcccc3d", "{0}", "0.10000000149011612"},
		{"float32", "cdcccc3d", "{0!s}", "0.1"},
		{"float32", "0000a03f", "x={0:.3f}", "x=1.250"},
		{"float32", "00000080", "{0}", "-0.0"},
		{"float32", "00000080", "{0!s}", "-0.0"},
		{"float32", "0000c0ff", "{0}", "nan"},
		{"float32", "0000c0ff", "{0:+.2f}", "+nan"},
		{"float32", "000080ff", "{0:>8}", "    -inf"},
		{"float64", "0080e03779c34143", "{0}", "1e+16"},
		{"float64", "00003426f56b0c43", "{0}", "1000000000000000.0"},
		{"float32", "acc52737", "{0!s}", "1e-05"},
		{"float32", "17b7d138", "{0!s}", "1e-04"},
		{"float32", "a379eb4c", "{0!s}", "1.2345679e+08"},
		{"float16", "ff7b", "{0!s}", "6.55e+04"},
		{"float16", "662e", "{0!s}", "0.1"},
		{"float16", "0024", "{0!s}", "0.01563"}, // 2^-6: the nearer 4-digit 0.01562 does not round back
		{"float32", "00102447", "{0!s}", "42000.0"},
		{"float32", "00247449", "{0!s}", "1e+06"},
		{"float16", "662e", "{0}", "0.0999755859375"},
		{"bfloat16", "cd3d", "{0!s}", "0.100098"},
		{"bfloat16", "cd3d", "{0}", "0.10009765625"},
		{"bfloat16", "4040", "{0!s}", "3"},
		{"bool", "01", "{0}", "True"},
		{"bool", "01", "{0:>3}", "  1"},
		{"bool", "00", "{0!s:^7}", " False "},
		{"int8", "80", "{0:x}", "-80"},
		{"uint64", "ffffffffffffffff", "{0:,}", "18,446,744,073,709,551,615"},
		{"int32", "c0bdf0ff", "{0:_b}", "-1111_0100_0010_0100_0000"},
		{"int32", "fbffffff", "{0:=+8}", "-      5"},
		{"int32", "fbffffff", "{0:*^9}", "***-5****"},
		{"int64", "0700000000000000", "{0:.2e}", "7.00e+00"},
		{"float32", "80d6fc3d", "{0:.2%}", "12.35%"},
		{"float64", "c642555f948bca7f", "{0:=9%}", "     inf%"}, // x*100 overflows: Python's "inf%"
		{"float64", "3374ac3c1f7bacff", "{0:+.1%}", "-inf%"},
		{"float64", "0000000000c05e40", "{0:.3}", "1.23e+02"},
		{"float64", "0000000000002840", "{0:.3}", "12.0"},
		{"float64", "f168e388b5f8e43e", "{0:g}", "1e-05"},
		{"float64", "0000000000000000", "{0:.1}", "0e+00"},
		{"float64", "7b14ae47e17aa4bf", "{0:z.1f}", "0.0"},
		{"float64", "0000008087d63241", "{0:,}", "1,234,567.5"},
		{"float64", "0000008087d63241", "{0:_.2f}", "1_234_567.50"},
		{"float32", "0000c03f", "{0:E}", "1.500000E+00"},
		{"float64", "000000000000f07f", "{0:F}", "INF"},
		{"float64", "000000000000e03f", "{0:!<6}", "0.5!!!"},
		{"float64", "0000000000000440", "{0:.0f}", "2"},
		{"float64", "0100000000000000", "{0}", "5e-324"},
		{"float64", "0100000000000000", "{0!s}", "5e-324"},
		{"float64", "000000000000f83f", "{0:010.3f}", "000001.500"},
		{"float64", "000000000000f8bf", "{0:010.3f}", "-00001.500"},
		{"float64", "fca9f1d24d62503f", "{0!s:.3}", "0.0"},
		{"float64", "000000000000f83f", "{0!s:07}", "1.50000"},
		{"int32", "feffffff", "index needs to be non-negative, got {0} (`check` failed)",
			"index needs to be non-negative, got -2 (`check` failed)"},
		{"int32", "07000000", "{{literal}} {0} }}", "{literal} 7 }"},
	} {
		if got := formatOne(t, tc.template, tc.dtype, mustHex(t, tc.hex)); got != tc.want {
			t.Errorf("%s over %s %s: got %q, want %q", tc.template, tc.dtype, tc.hex, got, tc.want)
		}
	}
}

func TestCheckMessageRankOne(t *testing.T) {
	for _, tc := range []struct {
		dtype          string
		n              int64
		hex, tmpl, out string
	}{
		{"int32", 3, "fbffffff6400000003000000", "{0}", "[ -5 100   3]"},
		{"bool", 2, "0100", "{0!s:>16}", "   [ True False]"},
		{"int32", 3, "fbffffff6400000003000000", "{0[1]:03d}", "100"},
		{"uint8", 1, "07", "{0}", "[7]"},
		{"float32", 2, "0000003f0000803e", "{0[1]}", "0.25"},
	} {
		if got := formatOne(t, tc.tmpl, tc.dtype, mustHex(t, tc.hex), tc.n); got != tc.out {
			t.Errorf("%s over %s[%d]: got %q, want %q", tc.tmpl, tc.dtype, tc.n, got, tc.out)
		}
	}
}

// checkedTable is tests/models/checked.py's table as the exporter writes it (every kind; the
// index effect's payload is int32[3]); checkedResults its program's check results.
func checkedTable() (*jaxportv1.Checks, []*jaxportv1.Result) {
	oob := "out-of-bounds indexing for array of shape (8,): index {0[0]} is out of bounds for axis {0[1]} with size {0[2]}. "
	table := &jaxportv1.Checks{Enabled: []string{"user", "index", "nan", "div"}, Codes: []*jaxportv1.ErrorCode{
		{Code: 0, Kind: "user", Effect: 1, PayloadSize: 1, MessageTemplate: "index needs to be non-negative, got {0} (`check` failed)"},
		{Code: 1, Kind: "index", Effect: 3, PayloadSize: 1, MessageTemplate: oob},
		{Code: 2, Kind: "nan", Effect: 2, MessageTemplate: "nan generated by primitive: log."},
		{Code: 8, Kind: "div", Effect: 0, MessageTemplate: "division by zero"},
	}}
	results := []*jaxportv1.Result{
		{Name: "picked", Role: jaxportv1.ResultRole_RESULT_ROLE_OUTPUT, ByteSize: 12},
		{Name: "y", Role: jaxportv1.ResultRole_RESULT_ROLE_OUTPUT, ByteSize: 4},
		res("check.0.div.predicate", "predicate", 0, "bool"),
		res("check.0.div.code", "code", 0, "int32"),
		res("check.1.user.predicate", "predicate", 1, "bool"),
		res("check.1.user.code", "code", 1, "int32"),
		res("check.1.user.payload.0", "payload", 1, "int32"),
		res("check.2.nan.predicate", "predicate", 2, "bool"),
		res("check.2.nan.code", "code", 2, "int32"),
		res("check.3.index.predicate", "predicate", 3, "bool"),
		res("check.3.index.code", "code", 3, "int32"),
		res("check.3.index.payload.0", "payload", 3, "int32", 3),
	}
	return table, results
}

// checkedValues: all results of the checked program with the given effects fired (code per
// effect), user payload -2 and index payload [100, 0, 8].
func checkedValues(firedCodes map[int]int32) [][]byte {
	le := func(v int32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	v := [][]byte{make([]byte, 12), make([]byte, 4)}
	payload := map[int][]byte{1: le(-2), 3: append(append(le(100), le(0)...), le(8)...)}
	for e := range 4 {
		pred, code := []byte{0}, le(-2) // checkify's inactive code
		if c, ok := firedCodes[e]; ok {
			pred, code = []byte{1}, le(c)
		}
		v = append(v, pred, code)
		if p, ok := payload[e]; ok {
			v = append(v, p)
		}
	}
	return v
}

func TestCheckFailureEveryKind(t *testing.T) {
	c, err := NewChecks(checkedTable())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fired map[int]int32
		kind  string
		code  codes.Code
		msg   string
	}{
		{map[int]int32{1: 0}, "user", codes.InvalidArgument, "index needs to be non-negative, got -2 (`check` failed)"},
		{map[int]int32{3: 1}, "index", codes.InvalidArgument,
			"out-of-bounds indexing for array of shape (8,): index 100 is out of bounds for axis 0 with size 8. "},
		{map[int]int32{2: 2}, "nan", codes.FailedPrecondition, "nan generated by primitive: log."},
		{map[int]int32{0: 8}, "div", codes.FailedPrecondition, "division by zero"},
		// Several fired: the smallest code wins, whatever the effect order.
		{map[int]int32{0: 8, 2: 2, 3: 1}, "index", codes.InvalidArgument,
			"out-of-bounds indexing for array of shape (8,): index 100 is out of bounds for axis 0 with size 8. "},
	} {
		f, err := c.Failure(checkedValues(tc.fired))
		if err != nil || f == nil {
			t.Fatalf("%v: %v, %v", tc.fired, f, err)
		}
		if f.Kind != tc.kind || f.Code != tc.code || f.Message != tc.msg {
			t.Errorf("%v: got %s %s %q, want %s %s %q", tc.fired, f.Kind, f.Code, f.Message, tc.kind, tc.code, tc.msg)
		}
	}
	if f, err := c.Failure(checkedValues(nil)); f != nil || err != nil {
		t.Errorf("nothing fired: got %v, %v", f, err)
	}
	var none *Checks
	if f, err := none.Failure(nil); f != nil || err != nil {
		t.Errorf("nil Checks: got %v, %v", f, err)
	}
}

func TestNewChecksWithoutTable(t *testing.T) {
	_, results := checkedTable()
	if c, err := NewChecks(nil, results[:2]); c != nil || err != nil {
		t.Errorf("no table, no check results: got %v, %v", c, err)
	}
	if _, err := NewChecks(&jaxportv1.Checks{}, results); err == nil || !strings.Contains(err.Error(), "10 check results") {
		t.Errorf("check results without a table: %v", err)
	}
}

func TestCheckFailureContradictingResults(t *testing.T) {
	c, err := NewChecks(checkedTable())
	if err != nil {
		t.Fatal(err)
	}
	short := checkedValues(map[int]int32{1: 0})[:5]
	badSize := checkedValues(map[int]int32{1: 0})
	badSize[6] = []byte{1, 2}
	for name, tc := range map[string]struct {
		values [][]byte
		want   string
	}{
		"count":        {short, "5 results, the program has 12"},
		"size":         {badSize, "check result 6: 2 bytes, the manifest says 4"},
		"unknown code": {checkedValues(map[int]int32{1: 5}), "code 5 for effect 1, which the error table does not list"},
		"other effect": {checkedValues(map[int]int32{1: 8}), "code 8 for effect 1, which the error table does not list"},
	} {
		f, err := c.Failure(tc.values)
		if f != nil || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, %v; want an error with %q", name, f, err, tc.want)
		}
	}
}

func TestNewChecksRefuses(t *testing.T) {
	layout := func(edit func(*jaxportv1.Checks, []*jaxportv1.Result) []*jaxportv1.Result) error {
		table, results := checkedTable()
		_, err := NewChecks(table, edit(table, results))
		return err
	}
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"payload sizes": {layout(func(c *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			c.Codes = append(c.Codes, &jaxportv1.ErrorCode{Code: 9, Kind: "nan", Effect: 2, PayloadSize: 1})
			return r
		}), "effect 2 has inconsistent payload sizes"},
		"order": {layout(func(_ *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			r[2], r[3] = r[3], r[2]
			return r
		}), "check result check.0.div.code is code of effect 0 where the check table's layout has predicate of effect 0"},
		"missing": {layout(func(_ *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result { return r[:11] }),
			"needs more check results than the program's 9"},
		"extra": {layout(func(_ *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			return append(r, res("check.4.x.predicate", "predicate", 4, "bool"))
		}), "the program has 11 check results, the check table's layout 10"},
		"predicate dtype": {layout(func(_ *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			r[2] = res("check.0.div.predicate", "predicate", 0, "int32")
			return r
		}), "check result check.0.div.predicate is int32[], a predicate must be bool[]"},
		"kind": {layout(func(c *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			c.Codes[3].Kind = "overflow"
			return r
		}), `check code 8 (): unknown kind "overflow"`},
		"duplicate": {layout(func(c *jaxportv1.Checks, r []*jaxportv1.Result) []*jaxportv1.Result {
			c.Codes[3].Code = 2
			return r
		}), "check code 2 (): listed twice"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, tc.err, tc.want)
		}
	}
}

func TestNewChecksRefusesTemplates(t *testing.T) {
	for _, tc := range []struct {
		template, dtype string
		shape           []int64
		want            string
	}{
		{"a } b", "int32", nil, "single '}' at offset 2"},
		{"a {0", "int32", nil, "unterminated field at offset 2"},
		{"{0:{1}}", "int32", nil, "nested fields"},
		{"{0!r}", "int32", nil, "field {0!r}: conversion !r is not supported"},
		{"{x}", "int32", nil, "field {x}: only numbered fields"},
		{"{}", "int32", nil, "field {}: only numbered fields"},
		{"{0.real}", "float32", nil, "field {0.real}: only numbered fields"},
		{"{1}", "int32", nil, "payload leaf 1 out of range (the effect has 1)"},
		{"{0[1]}", "int32", nil, "element index on payload leaf 0 of shape []"},
		{"{0[3]}", "int32", []int64{3}, "element 3 of payload leaf 0 of shape [3] is out of range"},
		{"{0[-1]}", "int32", []int64{3}, "only one integer element index"},
		{"{0}", "float32", []int64{3}, "payload leaf 0 is a float32 array"},
		{"{0}", "int32", []int64{2, 2}, "payload leaf 0 of shape [2 2]"},
		{"{0}", "int64", []int64{4}, "payload leaf 0 (int64[4]) may not fit"},
		{"{0:>9}", "int32", []int64{3}, `format spec ">9" on an array`},
		{"{0}", "complex64", nil, "payload dtype complex64 is not supported"},
		{"{0:.2d}", "int32", nil, `format spec ".2d": precision is not allowed for an integer`},
		{"{0:z}", "int32", nil, `format spec "z": 'z' is not allowed`},
		{"{0:,x}", "int32", nil, `format spec ",x": ',' with type 'x'`},
		{"{0:c}", "int32", nil, `format spec "c": type 'c' is not supported for an integer`},
		{"{0:n}", "float32", nil, `format spec "n": type 'n' is not supported for a float`},
		{"{0:d}", "float32", nil, `format spec "d": type 'd' is not supported for a float`},
		{"{0:#x}", "int32", nil, `format spec "#x": alternate form`},
		{"{0:010,}", "int32", nil, `format spec "010,": zero padding with grouping`},
		{"{0!s:+}", "int32", nil, `format spec "+" is not supported for a string`},
		{"{0:.}", "float32", nil, `format spec ".": missing precision`},
		{"{0:5000}", "float32", nil, `format spec "5000": 5000 over 1000`},
		{"{0:,_}", "float32", nil, `format spec ",_": type '_' is not supported`},
		{"{0:1.2f3}", "float32", nil, `invalid format spec "1.2f3"`},
		{"{0:é}", "float32", nil, `format spec "é": invalid type`},
	} {
		table, results := oneCode(tc.template, tc.dtype, tc.shape...)
		_, err := NewChecks(table, results)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "check code 0 (m.py:3 (f))") {
			t.Errorf("%q over %s%v: got %v, want an error with %q", tc.template, tc.dtype, tc.shape, err, tc.want)
		}
	}
}

func TestEligibleRefusesUnreproducibleCheckMessages(t *testing.T) {
	table, results := oneCode("bad x: {0}", "float32", 3)
	m := &jaxportv1.Manifest{NrDevices: 1, Platforms: []string{"cpu"}, Checks: table,
		Programs: []*jaxportv1.Program{{MlirbcFile: "model.mlirbc", Results: results}}}
	want := "model.mlirbc: check table: check code 0 (m.py:3 (f)): message \"bad x: {0}\": field {0}: " +
		"payload leaf 0 is a float32 array: numpy's float array printing is not reproduced"
	if why := Eligible(m, "cpu"); why != want {
		t.Errorf("got %q, want %q", why, want)
	}
	table, results = checkedTable()
	m.Checks, m.Programs[0].Results = table, results
	if why := Eligible(m, "cpu"); why != "" {
		t.Errorf("checked.py's table refused: %s", why)
	}
}

type parityCase struct {
	Dtype      string  `json:"dtype"`
	Shape      []int64 `json:"shape"`
	Data       string  `json:"data"`
	Template   string  `json:"template"`
	Message    *string `json:"message"` // nil: Python raises
	MustAccept bool    `json:"must_accept"`
}

// TestCheckParity formats every case of -check-parity (default: testdata/check_parity.json,
// written by `python tests/front/test_native_checks.py`; tests/front/test_native_checks.py
// passes fresh random ones) and compares with Python's text. A refused template is fine where
// Python raises or the case is outside the promised subset (must_accept false); a text that
// differs, or a template accepted where Python raises, fails.
func TestCheckParity(t *testing.T) {
	raw, err := os.ReadFile(*parityFile)
	if err != nil {
		t.Fatal(err)
	}
	var cases []parityCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	compared, refused := 0, 0
	for i, pc := range cases {
		name := fmt.Sprintf("case %d: %q over %s%v %s", i, pc.Template, pc.Dtype, pc.Shape, pc.Data)
		table, results := oneCode(pc.Template, pc.Dtype, pc.Shape...)
		c, err := NewChecks(table, results)
		if err != nil {
			if pc.MustAccept {
				t.Errorf("%s: refused: %v", name, err)
			}
			refused++
			continue
		}
		if pc.Message == nil {
			t.Errorf("%s: accepted, but Python raises on it", name)
			continue
		}
		f, err := c.Failure(fired(mustHex(t, pc.Data)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		compared++
		if f.Message != *pc.Message {
			t.Errorf("%s: got %q, Python %q", name, f.Message, *pc.Message)
		}
	}
	stats, _ := json.Marshal(map[string]int{"cases": len(cases), "compared": compared, "refused": refused})
	fmt.Printf("check parity: %s\n", stats)
	if compared == 0 {
		t.Error("no case compared")
	}
}
