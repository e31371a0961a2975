package request

import (
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

// Ref is where a tensor's bytes live in system shared memory (package shm).
type Ref = shm.Ref

// RefParams are the tensor parameters carrying r (what tritonclient sends; the offset only
// when not 0).
func RefParams(r Ref) Params {
	p := Params{ParamShmRegion: {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: r.Region}},
		ParamShmByteSize: intParam(r.ByteSize)}
	if r.Offset != 0 {
		p[ParamShmOffset] = intParam(r.Offset)
	}
	return p
}

func intParam(v uint64) *inferencepb.InferParameter {
	if v > math.MaxInt64 {
		return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Uint64Param{Uint64Param: v}}
	}
	return &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: int64(v)}}
}

// SharedMemory resolves a tensor's shared-memory reference to the region's bytes (exactly
// ref.ByteSize of them, writable) and a release to call once the request no longer touches
// them; its errors are statuses naming the tensor (kind "input"/"output"): NOT_FOUND for an
// unknown region, INVALID_ARGUMENT for a range beyond it, FAILED_PRECONDITION when the
// extension is off or the object was truncated. Package shm implements it.
type SharedMemory interface {
	Resolve(kind, tensor string, ref Ref) (data []byte, release func(), err error)
}

// Prepared is a request validated by Signature.Prepare; later stages trust it.
type Prepared struct {
	// Inputs: one per manifest input (manifest order): raw little-endian C-order bytes at the
	// request's shape, Shapes[i]. Views into the request (or a shared-memory region) when
	// possible.
	Inputs [][]byte
	Shapes [][]int64
	// Rows: batch rows (1 for a model without a batch dimension).
	Rows int
	// Program: the manifest program to execute (-1: the dynamic batcher chooses).
	Program int
	// Sizes: each symbolic dimension's size in the request (nil without symbolic dimensions).
	Sizes map[string]int64
	// Bucket: the bucket program chosen (nil unless the model runs buckets); Padded: it is
	// larger than the request along a padded dimension (inputs are padded with zeros up to
	// it, outputs cut back).
	Bucket *Bucket
	Padded bool
	// Outputs: manifest output indices to return, in the requested order (all, in manifest
	// order, when none is requested; shared, read-only).
	Outputs []int
	// Classes: manifest output index -> top-k count (classification); nil if none.
	Classes map[int]int
	// Shm: manifest output index -> where it is to be written (outputs requested into shared
	// memory); nil if none.
	Shm     map[int]ShmOutput
	release []func()
}

// ShmOutput is an output requested into shared memory: its reference and the region's bytes.
type ShmOutput struct {
	Ref  Ref
	Data []byte
}

// Release lets go of the shared-memory regions the request resolved (after its response is
// built). Safe to call on nil and more than once.
func (p *Prepared) Release() {
	if p == nil {
		return
	}
	for _, r := range p.release {
		r()
	}
	p.release = nil
}

// Prepare validates one request, once, in the order the bridge always checked: requested
// outputs (names unique, classification parameters), each input's name/datatype/shape,
// symbolic dimensions' rules, input names unique, shared-memory references, raw vs typed
// contents and byte/element counts, requested outputs known, classifiable, every input
// present, then rows and program (exported batch size or bucket), shared-memory outputs. Every
// error is a status naming the input or output at fault; on error nothing stays resolved.
func (s *Signature) Prepare(req *Request, shm SharedMemory) (p *Prepared, err error) {
	if err := checkRequestedOutputs(req.Outputs); err != nil {
		return nil, err
	}
	for i := range req.Inputs {
		t := &req.Inputs[i]
		k, ok := s.inputIndex[t.Name]
		if !ok {
			return nil, status.Invalid("unexpected input '%s': %s has inputs %s", status.Clip(t.Name, true), s.label, s.knownInputs)
		}
		sig := &s.inputs[k]
		if t.Datatype != sig.Name {
			got := status.Clip(t.Datatype, true)
			if got == "" {
				got = "(empty)"
			}
			return nil, status.Invalid("input '%s': expected datatype %s, got %s", sig.name, sig.Name, got)
		}
		if !matchesShape(sig.shape, t.Shape) {
			return nil, status.Invalid("input '%s': expected shape %s, got %s", sig.name, sig.shapeText, status.ClipShape(t.Shape))
		}
	}
	p = &Prepared{Inputs: make([][]byte, len(s.inputs)), Shapes: make([][]int64, len(s.inputs)),
		Rows: s.unbatchedRows, Program: s.single, Outputs: s.allOutputs}
	defer func() {
		if err != nil {
			p.Release()
			p = nil
		}
	}()
	if len(s.dims) > 0 {
		if p.Sizes, err = s.bind(req); err != nil {
			return p, err
		}
	}
	if err := s.decode(req, p, shm); err != nil {
		return p, err
	}
	if err := s.outputsOf(req.Outputs, p); err != nil {
		return p, err
	}
	for i := range s.inputs {
		if p.Inputs[i] == nil {
			sig := &s.inputs[i]
			return p, status.Invalid("missing input '%s': %s expects %s %s", sig.name, s.label, sig.Name, sig.shapeText)
		}
	}
	switch {
	case len(s.dims) > 0 && s.Plan.Buckets:
		err = s.bucketFor(req, p)
	case len(s.dims) > 0:
		p.Rows, p.Program = 1, s.polymorphic
	case s.Plan.DynamicBatching:
		err = s.batcherRows(p)
	default:
		err = s.programRows(p)
	}
	if err != nil {
		return p, err
	}
	return p, s.shmOutputs(req, p, shm)
}

// checkRequestedOutputs: requested_output_names (check_unique) then requested_classifications'
// parameter rules, before any input is looked at.
func checkRequestedOutputs(outputs []Output) error {
	if len(outputs) == 0 {
		return nil
	}
	var seen map[string]bool
	if len(outputs) > smallRequest {
		seen = make(map[string]bool, len(outputs))
	}
	for i, o := range outputs {
		n := o.Name
		if n == "" {
			return status.Invalid("requested output with an empty name; every requested output needs a name")
		}
		dup := seen[n]
		if seen == nil {
			for _, before := range outputs[:i] {
				dup = dup || before.Name == n
			}
		} else {
			seen[n] = true
		}
		if dup {
			return status.Invalid("duplicate requested output '%s': each requested output may appear once", status.Clip(n, false))
		}
	}
	for _, o := range outputs {
		k, err := classCount(o)
		if err != nil {
			return err
		}
		if _, inShm := o.Params[ParamShmRegion]; k > 0 && inShm {
			return status.Invalid("requested output '%s': classification into shared memory is not supported; request it in the response",
				status.Clip(o.Name, false))
		}
	}
	return nil
}

// classCount: the requested output's top-k count (0: not classified), or its parameter's error.
func classCount(o Output) (int, error) {
	param, ok := o.Params[ParamClassification]
	if !ok {
		return 0, nil
	}
	var k int64
	switch v := param.GetParameterChoice().(type) {
	case *inferencepb.InferParameter_Int64Param:
		k = v.Int64Param
	case *inferencepb.InferParameter_Uint64Param:
		if v.Uint64Param > math.MaxInt64 {
			return math.MaxInt, nil // k beyond any tensor: every element, as min(k, width) gives
		}
		k = int64(v.Uint64Param)
	default:
		return 0, status.Invalid("requested output '%s': parameter '%s' must be an int64 class count", status.Clip(o.Name, false), ParamClassification)
	}
	if k < 1 {
		return 0, status.Invalid("requested output '%s': class count must be >= 1, got %d", status.Clip(o.Name, false), k)
	}
	if k > math.MaxInt {
		return math.MaxInt, nil
	}
	return int(k), nil
}

// shmRef: codecs.shared_memory_ref: the tensor's reference from its parameters, or nil.
func shmRef(kind, name string, params Params) (*Ref, error) {
	if len(params) == 0 {
		return nil, nil
	}
	region, ok := params[ParamShmRegion]
	if !ok {
		for _, k := range []string{ParamShmByteSize, ParamShmOffset} {
			if _, stray := params[k]; stray {
				return nil, status.Invalid("%s '%s': parameter '%s' given without '%s'; name the shared memory region too",
					kind, status.Clip(name, false), k, ParamShmRegion)
			}
		}
		return nil, nil
	}
	r, isStr := region.GetParameterChoice().(*inferencepb.InferParameter_StringParam)
	if !isStr || r.StringParam == "" {
		return nil, status.Invalid("%s '%s': parameter '%s' must be a non-empty string_param naming a registered region",
			kind, status.Clip(name, false), ParamShmRegion)
	}
	size, ok := params[ParamShmByteSize]
	if !ok {
		return nil, status.Invalid("%s '%s': shared memory region '%s' given without '%s'",
			kind, status.Clip(name, false), status.Clip(r.StringParam, false), ParamShmByteSize)
	}
	ref := &Ref{Region: r.StringParam}
	var err error
	if ref.ByteSize, err = sizeParam(kind, name, ParamShmByteSize, size); err != nil {
		return nil, err
	}
	if off, ok := params[ParamShmOffset]; ok {
		if ref.Offset, err = sizeParam(kind, name, ParamShmOffset, off); err != nil {
			return nil, err
		}
	}
	return ref, nil
}

// paramKind is the InferParameter oneof member's name (Python's WhichOneof).
func paramKind(p *inferencepb.InferParameter) string {
	switch p.GetParameterChoice().(type) {
	case *inferencepb.InferParameter_BoolParam:
		return "bool_param"
	case *inferencepb.InferParameter_Int64Param:
		return "int64_param"
	case *inferencepb.InferParameter_StringParam:
		return "string_param"
	case *inferencepb.InferParameter_DoubleParam:
		return "double_param"
	case *inferencepb.InferParameter_Uint64Param:
		return "uint64_param"
	}
	return "no value"
}

func sizeParam(kind, name, key string, p *inferencepb.InferParameter) (uint64, error) {
	switch v := p.GetParameterChoice().(type) {
	case *inferencepb.InferParameter_Int64Param:
		if v.Int64Param < 0 {
			return 0, status.Invalid("%s '%s': parameter '%s' is %d; expected >= 0", kind, status.Clip(name, false), key, v.Int64Param)
		}
		return uint64(v.Int64Param), nil
	case *inferencepb.InferParameter_Uint64Param:
		return v.Uint64Param, nil
	}
	return 0, status.Invalid("%s '%s': parameter '%s' must be an int64_param, got %s", kind, status.Clip(name, false), key, paramKind(p))
}

// resolve asks shm for a reference's bytes and keeps its release.
func resolve(shm SharedMemory, p *Prepared, kind, name string, ref Ref) ([]byte, error) {
	if shm == nil {
		return nil, status.Invalid("%s '%s': refers to shared memory region '%s' but no shared memory is available here",
			kind, status.Clip(name, false), status.Clip(ref.Region, false))
	}
	data, release, err := shm.Resolve(kind, name, ref)
	if err != nil {
		return nil, err
	}
	if release != nil {
		p.release = append(p.release, release)
	}
	return data, nil
}

// decode: messages.decode_request_inputs + codecs.decode_tensor for declared-valid inputs.
func (s *Signature) decode(req *Request, p *Prepared, shm SharedMemory) error {
	inputs := req.Inputs
	// check_unique("input"): every name is a model input by now, so "seen" is by index.
	var small [smallRequest]bool
	seen := small[:0]
	if len(s.inputs) <= smallRequest {
		seen = small[:len(s.inputs)]
	} else {
		seen = make([]bool, len(s.inputs))
	}
	for _, t := range inputs {
		i := s.inputIndex[t.Name]
		if seen[i] {
			return status.Invalid("duplicate input '%s': each input may appear once", status.Clip(t.Name, false))
		}
		seen[i] = true
	}
	var refs []*Ref
	inMessage := len(inputs)
	for n := range inputs {
		if len(inputs[n].Params) == 0 {
			continue
		}
		ref, err := shmRef("input", inputs[n].Name, inputs[n].Params)
		if err != nil {
			return err
		}
		if ref != nil {
			if refs == nil {
				refs = make([]*Ref, len(inputs))
			}
			refs[n] = ref
			inMessage--
		}
	}
	raw := req.Raw
	if len(raw) > 0 {
		if len(raw) != inMessage {
			return status.Invalid("raw_input_contents has %d entries; expected %d (one per input not in shared memory, in the order of `inputs`)", len(raw), inMessage)
		}
		for n, t := range inputs {
			if (refs == nil || refs[n] == nil) && usedFields(t.Contents) != 0 {
				return status.Invalid("input '%s': has typed contents but the request uses raw_input_contents; send every input one way, not both", status.Clip(t.Name, false))
			}
		}
	}
	next := 0
	for n := range inputs {
		t := &inputs[n]
		i := s.inputIndex[t.Name]
		sig := &s.inputs[i]
		var err error
		switch {
		case refs != nil && refs[n] != nil:
			p.Inputs[i], err = decodeShared(sig, t, *refs[n], shm, p)
		case len(raw) > 0:
			p.Inputs[i], err = decodeRaw(sig, t.Shape, raw[next])
			next++
		default:
			p.Inputs[i], err = decodeTyped(sig, t.Shape, t.Contents)
		}
		if err != nil {
			return err
		}
		p.Shapes[i] = t.Shape
	}
	return nil
}

func decodeShared(sig *tensorSig, t *Input, ref Ref, shm SharedMemory, p *Prepared) ([]byte, error) {
	name := status.Clip(t.Name, false)
	if usedFields(t.Contents) != 0 {
		return nil, status.Invalid("input '%s': has typed contents and shared memory parameters; send its data one way, not both", name)
	}
	count, _ := elementCount(t.Shape)
	hi, expected := bits.Mul64(count, uint64(sig.Itemsize))
	if hi != 0 || ref.ByteSize != expected {
		return nil, status.Invalid("input '%s': %s is %d; expected %s (shape %s x %d bytes per %s element)",
			name, ParamShmByteSize, ref.ByteSize, status.ExactProduct(t.Shape, sig.Itemsize), status.Ints(t.Shape), sig.Itemsize, sig.Name)
	}
	data, err := resolve(shm, p, "input", t.Name, ref)
	if err != nil {
		return nil, err
	}
	if sig.field == boolContents {
		data = normaliseBool(data)
	}
	if data == nil {
		data = nonNil
	}
	return data, nil
}

// nonNil: an input's bytes as Prepared holds them (nil marks a missing input).
var nonNil = []byte{}

func decodeRaw(sig *tensorSig, shape []int64, raw []byte) ([]byte, error) {
	count, ok := elementCount(shape)
	hi, expected := bits.Mul64(count, uint64(sig.Itemsize))
	if !ok || hi != 0 || expected != uint64(len(raw)) {
		return nil, status.Invalid("input '%s': raw contents hold %d bytes; expected %s (shape %s x %d bytes per %s element)",
			status.Clip(sig.name, false), len(raw), status.ExactProduct(shape, sig.Itemsize), status.Ints(shape), sig.Itemsize, sig.Name)
	}
	if raw == nil {
		return nonNil, nil
	}
	if sig.field == boolContents {
		return normaliseBool(raw), nil
	}
	return raw, nil
}

// normaliseBool: codecs.normalise_bool: any nonzero byte is true (a copy only when a byte
// other than 0/1 is there; the request's or a region's bytes are never written).
func normaliseBool(raw []byte) []byte {
	for j, b := range raw {
		if b > 1 {
			out := make([]byte, len(raw))
			copy(out, raw[:j])
			for k := j; k < len(raw); k++ {
				if raw[k] != 0 {
					out[k] = 1
				}
			}
			return out
		}
	}
	return raw
}

func decodeTyped(sig *tensorSig, shape []int64, c *inferencepb.InferTensorContents) ([]byte, error) {
	count, ok := elementCount(shape)
	used := usedFields(c)
	name := status.Clip(sig.name, false)
	if sig.field == noContents {
		if ok && count == 0 && used == 0 {
			return nonNil, nil
		}
		return nil, status.Invalid("input '%s': %s has no typed contents field; send it as raw bytes (raw_input_contents)", name, sig.Name)
	}
	field := contentsNames[sig.field]
	if used == 0 && (!ok || count != 0) {
		return nil, status.Invalid("input '%s': no data; expected raw_input_contents or contents.%s with %s elements (shape %s)",
			name, field, status.ExactProduct(shape, 1), status.Ints(shape))
	}
	if wrong := used &^ (1 << sig.field); wrong != 0 {
		var got []string
		for f := boolContents; f <= bytesContents; f++ {
			if wrong&(1<<f) != 0 {
				got = append(got, contentsNames[f])
			}
		}
		return nil, status.Invalid("input '%s': datatype %s uses contents.%s; got contents.%s", name, sig.Name, field, strings.Join(got, ", contents."))
	}
	values, low, high := contentsLen(c, sig.field)
	if !ok || uint64(values) != count {
		return nil, status.Invalid("input '%s': contents.%s holds %d elements; expected %s (shape %s)",
			name, field, values, status.ExactProduct(shape, 1), status.Ints(shape))
	}
	if sig.low != sig.high && values > 0 && (low < sig.low || high > sig.high) {
		return nil, status.Invalid("input '%s': %s values must lie in [%d, %d]; got values in [%d, %d]", name, sig.Name, sig.low, sig.high, low, high)
	}
	if values == 0 {
		return nonNil, nil
	}
	return TypedRaw(sig.Name, c), nil
}

// usedFields: the typed contents fields a tensor sets, as bits by field number.
func usedFields(c *inferencepb.InferTensorContents) uint16 {
	if c == nil {
		return 0
	}
	var used uint16
	for f, n := range []int{len(c.BoolContents), len(c.IntContents), len(c.Int64Contents), len(c.UintContents),
		len(c.Uint64Contents), len(c.Fp32Contents), len(c.Fp64Contents), len(c.BytesContents)} {
		if n > 0 {
			used |= 1 << (f + 1)
		}
	}
	return used
}

// contentsLen: how many values field holds, and for int/uint contents their range.
func contentsLen(c *inferencepb.InferTensorContents, field contents) (n int, low, high int64) {
	switch field {
	case boolContents:
		return len(c.GetBoolContents()), 0, 0
	case intContents:
		v := c.GetIntContents()
		if len(v) > 0 {
			low, high = int64(slices.Min(v)), int64(slices.Max(v))
		}
		return len(v), low, high
	case uintContents:
		v := c.GetUintContents()
		if len(v) > 0 {
			low, high = int64(slices.Min(v)), int64(slices.Max(v))
		}
		return len(v), low, high
	case int64Contents:
		return len(c.GetInt64Contents()), 0, 0
	case uint64Contents:
		return len(c.GetUint64Contents()), 0, 0
	case fp32Contents:
		return len(c.GetFp32Contents()), 0, 0
	case fp64Contents:
		return len(c.GetFp64Contents()), 0, 0
	}
	return 0, 0, 0
}

// outputsOf: Model._check_outputs and the classification checks (check_classifiable).
func (s *Signature) outputsOf(requested []Output, p *Prepared) error {
	if len(requested) == 0 {
		return nil
	}
	p.Outputs = make([]int, len(requested))
	for n, o := range requested {
		i, ok := s.outputIndex[o.Name]
		if !ok {
			return status.Invalid("unknown requested output '%s': %s has outputs %s", status.Clip(o.Name, true), s.label, s.knownOutputs)
		}
		p.Outputs[n] = i
	}
	for n, o := range requested {
		k, _ := classCount(o) // its parameter was checked by checkRequestedOutputs
		if k == 0 {
			continue
		}
		sig := &s.outputs[p.Outputs[n]]
		if sig.kind == kindBool {
			return status.Invalid("requested output '%s': class result not available for an output of type %s", status.Clip(sig.name, false), sig.Name)
		}
		if p.Classes == nil {
			p.Classes = map[int]int{}
		}
		p.Classes[p.Outputs[n]] = k
	}
	return nil
}

// programRows: Model._program_for's rows and program (the batched inputs agree, 1..max
// batch size; the smallest exported program holding them).
func (s *Signature) programRows(p *Prepared) error {
	if len(s.batched) == 0 {
		return nil
	}
	shapes := make([]int64, 0, 4)
	for _, i := range s.batched {
		shapes = append(shapes, p.Shapes[i][0])
	}
	slices.Sort(shapes)
	shapes = slices.Compact(shapes)
	if len(shapes) != 1 {
		return status.Invalid("batched inputs %s disagree on the batch size: %s", s.batchedNames, status.Ints(shapes))
	}
	rows := shapes[0]
	if last := s.sizes[len(s.sizes)-1]; rows > int64(last) {
		return status.Invalid("batch size %d exceeds max_batch_size %d of %s (exported batch sizes %s); split the request", rows, last, s.label, s.sizesText)
	}
	p.Rows = int(rows)
	for _, b := range s.sizes {
		if b >= p.Rows {
			p.Program = s.bySize[b]
			break
		}
	}
	return nil
}

// batcherRows: bridge/batcher.py DynamicBatcher.check_rows: every input (manifest order) has a
// leading batch dimension, all the same, at most max_batch_size (at least 1 row: a batched
// input's declared shape guarantees it). The batcher chooses the program.
func (s *Signature) batcherRows(p *Prepared) error {
	var rows int64
	for i, shape := range p.Shapes {
		name := s.inputs[i].name
		if len(shape) == 0 {
			return status.Invalid("model %s: input %s is a scalar but needs a leading batch dimension", s.batcherName, status.PyRepr(name))
		}
		if i == 0 {
			rows = shape[0]
		} else if shape[0] != rows {
			return status.Invalid("model %s: inputs disagree on the batch dimension: %s has %d rows, %s has %d",
				s.batcherName, status.PyRepr(s.inputs[0].name), rows, status.PyRepr(name), shape[0])
		}
	}
	if last := s.sizes[len(s.sizes)-1]; rows > int64(last) {
		return status.Invalid("model %s: request batch size %d exceeds the model's max_batch_size %d (exported batch sizes %s); split the request",
			s.batcherName, rows, last, s.sizesText)
	}
	p.Rows = int(rows)
	p.Program = -1
	return nil
}

// shmOutputs: messages.requested_shared_memory_outputs, then codecs.check_output_fits for the
// outputs of a fixed shape (the others are checked once their shape is known).
func (s *Signature) shmOutputs(req *Request, p *Prepared, shm SharedMemory) error {
	for _, o := range req.Outputs {
		ref, err := shmRef("output", o.Name, o.Params)
		if err != nil {
			return err
		}
		if ref == nil {
			continue
		}
		data, err := resolve(shm, p, "output", o.Name, *ref)
		if err != nil {
			return err
		}
		if p.Shm == nil {
			p.Shm = map[int]ShmOutput{}
		}
		p.Shm[s.outputIndex[o.Name]] = ShmOutput{Ref: *ref, Data: data}
	}
	for i, out := range p.Shm {
		if sig := &s.outputs[i]; sig.fixed {
			if err := checkOutputFits(sig, sig.shape, out.Ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkOutputFits: codecs.check_output_fits.
func checkOutputFits(sig *tensorSig, shape []int64, ref Ref) error {
	count, _ := elementCount(shape)
	hi, needed := bits.Mul64(count, uint64(sig.Itemsize))
	if hi != 0 || needed > ref.ByteSize {
		return status.Invalid("output '%s': needs %s bytes (shape %s x %d bytes per %s element) but %s for shared memory region '%s' is %d",
			status.Clip(sig.name, false), status.ExactProduct(shape, sig.Itemsize), status.Ints(shape), sig.Itemsize, sig.Name,
			ParamShmByteSize, status.Clip(ref.Region, false), ref.ByteSize)
	}
	return nil
}

// matchesShape: TensorSig.matches_shape (a -1 dimension accepts any size >= 1).
func matchesShape(want, got []int64) bool {
	if len(want) != len(got) {
		return false
	}
	for i, w := range want {
		if (w >= 0 && got[i] != w) || (w < 0 && got[i] < 1) {
			return false
		}
	}
	return true
}

// elementCount: prod(shape) when every dimension is >= 0 and the product fits 64 bits.
func elementCount(shape []int64) (uint64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}
