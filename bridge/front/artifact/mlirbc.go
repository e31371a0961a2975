package artifact

// What a program's @main takes and returns, read from its portable StableHLO bytecode
// (model.mlirbc: MLIR bytecode of the VHLO dialect, as jax.export serializes it), so that a
// manifest can be checked against the program it describes before anything runs it.
//
// Only what that takes is read: the string, dialect and attribute/type tables, and the
// properties of each operation (VHLO keeps an op's attributes there since StableHLO 0.15,
// MLIR bytecode version 6). @main is the operation whose properties hold the symbol name
// "main" and a function type. The formats: mlir/docs/BytecodeFormat.md and StableHLO's
// VhloBytecode.cpp (type codes).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// TensorType is one argument or result type of @main.
type TensorType struct {
	Token bool    // !stablehlo.token
	Shape []int64 // -1: a dynamic dimension
	Elem  string  // MLIR element type: "f32", "i1", "ui8", "bf16", ... ("" for a token)
}

// String is the type as MLIR writes it: tensor<8x16xf32>, tensor<f32>, !stablehlo.token.
func (t TensorType) String() string {
	if t.Token {
		return "!stablehlo.token"
	}
	var b strings.Builder
	b.WriteString("tensor<")
	for _, d := range t.Shape {
		if d < 0 {
			b.WriteString("?")
		} else {
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString("x")
	}
	b.WriteString(t.Elem)
	b.WriteString(">")
	return b.String()
}

// Signature is @main's function type.
type Signature struct {
	Inputs, Results []TensorType
}

// ErrUnreadableBytecode: the bytecode cannot be read as this reader reads it (which need not
// be a fault of the artifact: a newer encoding, or a dialect other than VHLO).
var ErrUnreadableBytecode = errors.New("not readable as portable StableHLO bytecode")

func bytecodeError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnreadableBytecode, fmt.Sprintf(format, args...))
}

// MainSignature reads @main's argument and result types from portable StableHLO bytecode.
// Its error says why the bytecode could not be read (it wraps ErrUnreadableBytecode).
func MainSignature(code []byte) (*Signature, error) {
	bc, err := parseBytecode(code)
	if err != nil {
		return nil, err
	}
	return bc.main()
}

// Section IDs (BytecodeFormat.md).
const (
	secString         = 0
	secDialect        = 1
	secAttrType       = 2
	secAttrTypeOffset = 3
	secDialectVersion = 7
	secProperties     = 8
	numSections       = 9
)

// minVersion: properties (kNativePropertiesEncoding = 5; VHLO uses them from version 6).
const minVersion = 5

type entry struct {
	dialect string
	custom  bool
	data    []byte
}

type bytecode struct {
	strings    []string
	attrs      []entry
	types      []entry
	properties [][]byte
}

// bcReader reads MLIR bytecode's primitives from b; base is b's offset in the whole file
// (section alignment is relative to the file's start).
type bcReader struct {
	b    []byte
	off  int
	base int
}

func (r *bcReader) empty() bool { return r.off >= len(r.b) }

func (r *bcReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, bytecodeError("truncated")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *bcReader) bytes(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, bytecodeError("truncated")
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out, nil
}

// varint is a PrefixVarInt: the trailing zero bits of the first byte count the bytes that
// follow it (none set: eight, the value in them).
func (r *bcReader) varint() (uint64, error) {
	first, err := r.byte()
	if err != nil {
		return 0, err
	}
	if first&1 == 1 {
		return uint64(first >> 1), nil
	}
	if first == 0 {
		rest, err := r.bytes(8)
		if err != nil {
			return 0, err
		}
		return binary.LittleEndian.Uint64(rest), nil
	}
	n := bits.TrailingZeros8(first) // further bytes
	rest, err := r.bytes(uint64(n))
	if err != nil {
		return 0, err
	}
	v := uint64(first)
	for i, c := range rest {
		v |= uint64(c) << (8 * (i + 1))
	}
	return v >> (n + 1), nil
}

func (r *bcReader) svarint() (int64, error) {
	v, err := r.varint()
	return int64(v>>1) ^ -int64(v&1), err
}

// index is a varint that must be below n (a table index).
func (r *bcReader) index(n int, what string) (int, error) {
	v, err := r.varint()
	if err != nil {
		return 0, err
	}
	if v >= uint64(n) {
		return 0, bytecodeError("%s index %d out of range (%d)", what, v, n)
	}
	return int(v), nil
}

// section is one section's ID and data.
func (r *bcReader) section() (byte, []byte, error) {
	idAndAligned, err := r.byte()
	if err != nil {
		return 0, nil, err
	}
	length, err := r.varint()
	if err != nil {
		return 0, nil, err
	}
	if idAndAligned&0x80 != 0 {
		align, err := r.varint()
		if err != nil {
			return 0, nil, err
		}
		if align == 0 || align&(align-1) != 0 || align > 1<<16 {
			return 0, nil, bytecodeError("section alignment %d", align)
		}
		for uint64(r.base+r.off)%align != 0 {
			c, err := r.byte()
			if err != nil {
				return 0, nil, err
			}
			if c != 0xCB {
				return 0, nil, bytecodeError("section padding byte %#x", c)
			}
		}
	}
	data, err := r.bytes(length)
	if err != nil {
		return 0, nil, err
	}
	return idAndAligned & 0x7f, data, nil
}

func parseBytecode(code []byte) (*bytecode, error) {
	if len(code) < 4 || string(code[:4]) != "ML\xefR" {
		return nil, bytecodeError("no MLIR bytecode magic number")
	}
	r := &bcReader{b: code, off: 4}
	version, err := r.varint()
	if err != nil {
		return nil, err
	}
	if version < minVersion {
		return nil, bytecodeError("bytecode version %d keeps no properties", version)
	}
	for { // the producer: a NUL-terminated string
		c, err := r.byte()
		if err != nil {
			return nil, err
		}
		if c == 0 {
			break
		}
	}
	var sections [numSections][]byte
	var offsets [numSections]int
	for !r.empty() {
		id, data, err := r.section()
		if err != nil {
			return nil, err
		}
		if int(id) < numSections {
			sections[id] = data
			offsets[id] = r.off - len(data)
		}
	}
	bc := &bytecode{}
	if bc.strings, err = parseStrings(sections[secString]); err != nil {
		return nil, err
	}
	dialects, err := bc.parseDialects(&bcReader{b: sections[secDialect], base: offsets[secDialect]})
	if err != nil {
		return nil, err
	}
	if err := bc.parseAttrTypes(sections[secAttrTypeOffset], sections[secAttrType], dialects); err != nil {
		return nil, err
	}
	if sections[secProperties] == nil {
		return nil, bytecodeError("no properties section")
	}
	if bc.properties, err = parseProperties(sections[secProperties]); err != nil {
		return nil, err
	}
	return bc, nil
}

// parseStrings: the count, each string's size (its NUL included) in reverse order, then the
// strings' bytes, laid out from the section's end.
func parseStrings(data []byte) ([]string, error) {
	r := &bcReader{b: data}
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(data)) {
		return nil, bytecodeError("%d strings in %d bytes", n, len(data))
	}
	out := make([]string, n)
	end := len(data)
	for i := int(n) - 1; i >= 0; i-- {
		size, err := r.varint()
		if err != nil {
			return nil, err
		}
		if size == 0 || size > uint64(end-r.off) {
			return nil, bytecodeError("string size %d", size)
		}
		start := end - int(size)
		out[i] = string(data[start : end-1])
		end = start
	}
	return out, nil
}

// parseDialects reads the dialects' names (the op names that follow are not needed).
func (bc *bytecode) parseDialects(r *bcReader) ([]string, error) {
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, bytecodeError("%d dialects", n)
	}
	names := make([]string, n)
	for i := range names {
		v, err := r.varint()
		if err != nil {
			return nil, err
		}
		idx := v >> 1
		if idx >= uint64(len(bc.strings)) {
			return nil, bytecodeError("dialect name index %d", idx)
		}
		names[i] = bc.strings[idx]
		if v&1 == 1 { // its version, a nested section
			id, _, err := r.section()
			if err != nil {
				return nil, err
			}
			if id != secDialectVersion {
				return nil, bytecodeError("dialect %s: section %d where its version belongs", names[i], id)
			}
		}
	}
	return names, nil
}

// parseAttrTypes: the offset section gives, per dialect group, each entry's size and whether
// the dialect encoded it itself (else it is its assembly text); attributes first, then types,
// one after the other in the attr/type section.
func (bc *bytecode) parseAttrTypes(offsets, data []byte, dialects []string) error {
	r := &bcReader{b: offsets}
	numAttrs, err := r.varint()
	if err != nil {
		return err
	}
	numTypes, err := r.varint()
	if err != nil {
		return err
	}
	if numAttrs > uint64(len(data)) || numTypes > uint64(len(data)) {
		return bytecodeError("%d attributes and %d types in %d bytes", numAttrs, numTypes, len(data))
	}
	bc.attrs = make([]entry, numAttrs)
	bc.types = make([]entry, numTypes)
	at := 0
	fill := func(table []entry) error {
		for i := 0; i < len(table); {
			d, err := r.index(len(dialects), "dialect")
			if err != nil {
				return err
			}
			count, err := r.varint()
			if err != nil {
				return err
			}
			if count > uint64(len(table)-i) {
				return bytecodeError("attribute/type group of %d past the table's end", count)
			}
			for range count {
				v, err := r.varint()
				if err != nil {
					return err
				}
				size := v >> 1
				if size > uint64(len(data)-at) {
					return bytecodeError("attribute/type entry past the section's end")
				}
				table[i] = entry{dialect: dialects[d], custom: v&1 == 1, data: data[at : at+int(size)]}
				at += int(size)
				i++
			}
		}
		return nil
	}
	if err := fill(bc.attrs); err != nil {
		return err
	}
	return fill(bc.types)
}

// parseProperties: the count, then each op's properties as a size and its bytes.
func parseProperties(data []byte) ([][]byte, error) {
	r := &bcReader{b: data}
	n, err := r.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(data)) {
		return nil, bytecodeError("%d properties in %d bytes", n, len(data))
	}
	out := make([][]byte, n)
	for i := range out {
		size, err := r.varint()
		if err != nil {
			return nil, err
		}
		if out[i], err = r.bytes(size); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// VHLO's encodings (StableHLO's VhloBytecode.cpp; the codes never change).
const (
	vhloStringAttr = 14
	vhloTypeAttr   = 17

	vhloComplexType          = 1
	vhloFunctionType         = 8
	vhloRankedTensorType     = 20
	vhloRankedTensorEncoding = 21
	vhloTokenType            = 22

	maxTypeDepth = 8
	kDynamic     = math.MinInt64 // a dynamic dimension (ShapedType::kDynamic)
)

// vhloElements are the element types by their VHLO code, named as MLIR writes them.
var vhloElements = map[uint64]string{
	0: "i1", 2: "bf16", 3: "f16", 4: "f32", 5: "f64", 6: "f8E4M3FN", 7: "f8E5M2", 9: "index",
	10: "i4", 11: "i8", 12: "i16", 13: "i32", 14: "i64",
	15: "ui4", 16: "ui8", 17: "ui16", 18: "ui32", 19: "ui64",
	27: "f8E4M3FNUZ", 28: "f8E5M2FNUZ", 29: "f8E4M3B11FNUZ", 31: "i2", 32: "ui2", 34: "tf32",
	35: "f8E4M3", 36: "f8E3M4", 37: "f4E2M1FN", 38: "f6E2M3FN", 39: "f6E3M2FN", 40: "f8E8M0FNU",
}

// vhloEntry is the reader of a VHLO-encoded attribute or type and its code; ok is false for
// an entry of another dialect or in assembly form.
func vhloEntry(e entry) (*bcReader, uint64, bool) {
	if e.dialect != "vhlo" || !e.custom {
		return nil, 0, false
	}
	r := &bcReader{b: e.data}
	code, err := r.varint()
	if err != nil {
		return nil, 0, false
	}
	return r, code, true
}

// main finds @main: the op whose properties name the symbol "main" and hold a function type.
func (bc *bytecode) main() (*Signature, error) {
	var found []*Signature
	for _, props := range bc.properties {
		r := &bcReader{b: props}
		named, fn := false, -1
		for !r.empty() {
			v, err := r.varint()
			if err != nil || v >= uint64(len(bc.attrs)) {
				named, fn = false, -1 // not a list of attributes
				break
			}
			ar, code, ok := vhloEntry(bc.attrs[v])
			if !ok {
				continue
			}
			switch code {
			case vhloStringAttr:
				if s, err := ar.index(len(bc.strings), "string"); err == nil && bc.strings[s] == "main" {
					named = true
				}
			case vhloTypeAttr:
				if t, err := ar.index(len(bc.types), "type"); err == nil {
					if _, c, ok := vhloEntry(bc.types[t]); ok && c == vhloFunctionType {
						fn = t
					}
				}
			}
		}
		if named && fn >= 0 {
			sig, err := bc.function(fn)
			if err != nil {
				return nil, err
			}
			found = append(found, sig)
		}
	}
	switch len(found) {
	case 0:
		return nil, bytecodeError("no @main function found")
	case 1:
		return found[0], nil
	}
	return nil, bytecodeError("%d functions named main", len(found))
}

func (bc *bytecode) function(t int) (*Signature, error) {
	r, _, _ := vhloEntry(bc.types[t])
	list := func() ([]TensorType, error) {
		n, err := r.varint()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(r.b)) {
			return nil, bytecodeError("function type of %d types", n)
		}
		out := make([]TensorType, n)
		for i := range out {
			idx, err := r.index(len(bc.types), "type")
			if err != nil {
				return nil, err
			}
			if out[i], err = bc.tensor(idx); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var sig Signature
	var err error
	if sig.Inputs, err = list(); err != nil {
		return nil, err
	}
	if sig.Results, err = list(); err != nil {
		return nil, err
	}
	return &sig, nil
}

// tensor reads a ranked tensor or token type.
func (bc *bytecode) tensor(t int) (TensorType, error) {
	r, code, ok := vhloEntry(bc.types[t])
	if !ok {
		return TensorType{}, bytecodeError("@main has a type not in VHLO's encoding")
	}
	switch code {
	case vhloTokenType:
		return TensorType{Token: true}, nil
	case vhloRankedTensorType, vhloRankedTensorEncoding:
	default:
		return TensorType{}, bytecodeError("@main has a type of VHLO code %d, not a ranked tensor", code)
	}
	if code == vhloRankedTensorEncoding {
		if _, err := r.varint(); err != nil { // its encoding attribute
			return TensorType{}, err
		}
	}
	rank, err := r.varint()
	if err != nil {
		return TensorType{}, err
	}
	if rank > uint64(len(r.b)) {
		return TensorType{}, bytecodeError("rank %d", rank)
	}
	tt := TensorType{Shape: make([]int64, rank)}
	for i := range tt.Shape {
		d, err := r.svarint()
		if err != nil {
			return TensorType{}, err
		}
		if d == kDynamic {
			d = -1
		}
		tt.Shape[i] = d
	}
	elem, err := r.index(len(bc.types), "type")
	if err != nil {
		return TensorType{}, err
	}
	if tt.Elem, err = bc.element(elem, 0); err != nil {
		return TensorType{}, err
	}
	return tt, nil
}

func (bc *bytecode) element(t, depth int) (string, error) {
	r, code, ok := vhloEntry(bc.types[t])
	if !ok {
		return "", bytecodeError("an element type not in VHLO's encoding")
	}
	if name, ok := vhloElements[code]; ok {
		return name, nil
	}
	if code == vhloComplexType && depth < maxTypeDepth {
		inner, err := r.index(len(bc.types), "type")
		if err != nil {
			return "", err
		}
		name, err := bc.element(inner, depth+1)
		return "complex<" + name + ">", err
	}
	return "", bytecodeError("element type of VHLO code %d", code)
}

// checkPrograms is the one rule that a manifest describes its programs: each program lists
// as many arguments and results as @main of its bytecode has, each of the same shape and
// element type (-1 where @main has a dynamic dimension, a token where it has one). A manifest
// edited after export, or paired with other programs, is refused before any engine compiles
// or runs them: an *Error naming the manifest, the argument or result, and both types.
// Bytecode this reader cannot read (ErrUnreadableBytecode) is left to the compiler. Then the
// model's inputs and outputs are checked against each program's (checkSpecs).
func (a *Artifact) checkPrograms(ctx context.Context) error {
	source := a.Store.Display(ManifestFile)
	for p, program := range a.Manifest.GetPrograms() {
		code, err := a.ReadListed(ctx, program.GetMlirbcFile())
		if err != nil {
			return err
		}
		if sig, err := MainSignature(code); err == nil {
			if err := checkSignature(source, p, program, sig); err != nil {
				return err
			}
		}
		if err := checkSpecs(source, p, a.Manifest, program); err != nil {
			return err
		}
	}
	return nil
}

// checkSpecs: the model's inputs and outputs (what requests are checked against) are the
// program's input arguments and output results of the same name: the same dtype and rank,
// and the same size on every axis the model's spec fixes (-1 there, a batch or symbolic axis,
// takes any size). Inputs jax dropped from @main (unused) have no argument to compare.
func checkSpecs(source string, p int, m *jaxportv1.Manifest, program *jaxportv1.Program) error {
	args := map[string]*jaxportv1.Argument{}
	for _, arg := range program.GetArguments() {
		if arg.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_INPUT {
			args[arg.GetName()] = arg
		}
	}
	results := map[string]*jaxportv1.Result{}
	for _, res := range program.GetResults() {
		if res.GetRole() == jaxportv1.ResultRole_RESULT_ROLE_OUTPUT {
			results[res.GetName()] = res
		}
	}
	check := func(kind string, spec *jaxportv1.TensorSpec, what string, shape []int64, dt *jaxportv1.DType) error {
		fits := len(shape) == len(spec.GetShape()) && dt.GetMlir() == spec.GetDtype().GetMlir()
		for i, d := range spec.GetShape() {
			fits = fits && (d == -1 || d == shape[i])
		}
		if fits {
			return nil
		}
		return errorf(fmt.Sprintf("%s: %s[%s] is %s but programs[%d].%s is %s (was the manifest edited?)", source, kind,
			pyRepr(spec.GetName()), TensorType{Shape: spec.GetShape(), Elem: spec.GetDtype().GetMlir()}, p, what,
			TensorType{Shape: shape, Elem: dt.GetMlir()}))
	}
	for _, spec := range m.GetInputs() {
		if arg, ok := args[spec.GetName()]; ok {
			what := fmt.Sprintf("arguments[%d] (%s)", arg.GetIndex(), pyRepr(arg.GetName()))
			if err := check("inputs", spec, what, arg.GetShape(), arg.GetDtype()); err != nil {
				return err
			}
		}
	}
	for _, spec := range m.GetOutputs() {
		if res, ok := results[spec.GetName()]; ok {
			what := fmt.Sprintf("results[%d] (%s)", res.GetIndex(), pyRepr(res.GetName()))
			if err := check("outputs", spec, what, res.GetShape(), res.GetDtype()); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkSignature(source string, p int, program *jaxportv1.Program, sig *Signature) error {
	where := fmt.Sprintf("programs[%d]", p)
	file := program.GetMlirbcFile()
	args, results := program.GetArguments(), program.GetResults()
	if len(args) != len(sig.Inputs) || len(results) != len(sig.Results) {
		return errorf(fmt.Sprintf("%s: %s lists %d arguments and %d results but @main of %s takes %d and returns %d "+
			"(was the manifest edited?)", source, where, len(args), len(results), file, len(sig.Inputs), len(sig.Results)))
	}
	for i, arg := range args {
		what := fmt.Sprintf("%s.arguments[%d] (%s)", where, i, pyRepr(arg.GetName()))
		if err := sameType(source, what, file, "takes", arg.GetRole() == roleArgToken, arg.GetShape(), arg.GetDtype(), sig.Inputs[i]); err != nil {
			return err
		}
	}
	for i, res := range results {
		what := fmt.Sprintf("%s.results[%d] (%s)", where, i, pyRepr(res.GetName()))
		if err := sameType(source, what, file, "returns", res.GetRole() == roleResToken, res.GetShape(), res.GetDtype(), sig.Results[i]); err != nil {
			return err
		}
	}
	return nil
}

// sameType: the manifest's entry (token, or shape and dtype) is @main's type got.
func sameType(source, what, file, verb string, token bool, shape []int64, dt *jaxportv1.DType, got TensorType) error {
	want := TensorType{Token: token}
	if !token {
		want.Shape, want.Elem = shape, dt.GetMlir()
	}
	shapeDiffers := want.Token != got.Token || !slices.Equal(want.Shape, got.Shape)
	elemDiffers := want.Elem != got.Elem
	if !shapeDiffers && !elemDiffers {
		return nil
	}
	differs := "shape differs"
	switch {
	case want.Token || got.Token:
		differs = "type differs"
	case shapeDiffers && elemDiffers:
		differs = "shape and dtype differ"
	case elemDiffers:
		differs = "dtype differs"
	}
	return errorf(fmt.Sprintf("%s: %s: %s from the program's: the manifest says %s, @main of %s %s %s "+
		"(was the manifest edited?)", source, what, differs, want, file, verb, got))
}
