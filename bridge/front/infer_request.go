package main

// The native engine's request validation and response building (issue 26,
// docs/native-engine.md): the ONE check of a ModelInferRequest the front answers itself, and the
// ModelInferResponse it answers with. It is the Go twin of the Python path a worker runs
// (bridge/servicer.py `_prepare` -> bridge/model.py `Model.prepare` ->
// bridge/messages.py `decode_request_inputs`, `requested_output_names`,
// `requested_classifications`, `check_classifiable` -> jaxport/protocol/codecs.py
// `decode_tensor`, `check_unique`), with the same status codes, the same message texts
// (jaxport/protocol/errors.py `clip`, `clip_shape` included) and the same order of checks, so a
// caller cannot tell which engine answered. Responses are bridge/messages.py
// `encode_infer_response` + `topk_classification`: model_name, model_version, id, outputs in the
// requested order (manifest order when none is requested) with datatype and shape,
// raw_output_contents; classification results as length-prefixed BYTES. Tested against the
// Python path's own answers in infer_request_test.go.
//
// What the lead's request path (native*.go) uses:
//
//   - newSignature(name, version, manifest, labels): built once per model version at load; the
//     datatype facts (datatype, itemsize) come from the manifest's DType. Refuses a manifest the
//     native path does not serve (symbolic dimensions) or cannot describe.
//   - sig.dynamicBatching: set to true at load (before the signature is shared) when the
//     workers batch the model (ModelConfig has dynamic_batching); prepare then checks rows as
//     bridge/batcher.py's DynamicBatcher.check_rows does (its own message texts).
//   - sig.prepare(req) -> *prepared or errToWorkers (shared-memory parameters on an input or a
//     requested output: the workers hold the regions) or an INVALID_ARGUMENT status.
//   - sig.response(req, version, p, outputs) -> *ModelInferResponse (outputs: every manifest
//     output's bytes, `p.rows` rows for batched outputs; only those in p.outputs are read).
//   - sig.batchSizes(): exported batch sizes ascending (nil for an unbatched model);
//     sig.batchedInput(i) / sig.batchedOutput(i): whether manifest input/output i has the
//     leading batch dimension; sig.rowBytes(i) / sig.outputRowBytes(i): bytes of one batch row of
//     input/output i (batched), or of the whole tensor (not batched).
//
// Per-request cost: no reflection and no map built per request (by-name lookups are built
// in newSignature); prepare allocates the prepared value, its input slice and, when outputs
// are requested, their index list (raw contents are used in place, except BOOL bytes other than
// 0/1, which are normalised into a copy as the codecs' normalise_bool does); response allocates
// the message, its output tensors and the shapes of batched outputs (measured with
// BenchmarkPrepareResponse: about 2.5 us and 6 allocations for both, one input, two outputs).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errToWorkers: the request uses shared-memory parameters; the front forwards it to the
// workers, which hold the shared-memory registry (and answer its errors).
var errToWorkers = errors.New("native engine: the request uses shared memory; forwarded to the workers")

// Parameter names (jaxport/protocol/codecs.py; paramShmRegion is rest_decode.go's).
const (
	paramClassification = "classification"
	paramShmByteSize    = "shared_memory_byte_size"
	paramShmOffset      = "shared_memory_offset"
	maxShown            = 64 // errors.MAX_SHOWN
	maxShownDims        = 8  // errors.MAX_SHOWN_DIMS
	smallRequest        = 16 // up to this many tensors, duplicate names are found without a map
)

// prepared: a request validated by signature.prepare; later stages trust it.
type prepared struct {
	inputs  [][]byte    // one per manifest input (manifest order): raw LE C-order, the request's shape
	rows    int         // batch rows (1 for a model without batched inputs)
	outputs []int       // manifest output indices to return, requested order (all, in order, if none requested; shared, read-only)
	classes map[int]int // manifest output index -> top-k count (classification extension); nil if none
}

// contents: a datatype's typed-contents field (InferTensorContents field number order).
type contents uint8

const (
	noContents contents = iota // FP16, BF16: raw only
	boolContents
	intContents
	int64Contents
	uintContents
	uint64Contents
	fp32Contents
	fp64Contents
	bytesContents
)

var contentsNames = [...]string{"", "bool_contents", "int_contents", "int64_contents", "uint_contents",
	"uint64_contents", "fp32_contents", "fp64_contents", "bytes_contents"}

// kind: how classification reads an element.
type kind uint8

const (
	kindBool kind = iota
	kindInt
	kindUint
	kindFloat
)

// datatypeFacts: what the dtype table (jaxport/protocol/dtypes.py) says beyond the manifest's
// DType (datatype, itemsize): the typed-contents field, the value range of narrow integers
// (typed contents are range-checked below 4 bytes), and how classification reads the value.
func datatypeFacts(datatype string) (field contents, low, high int64, k kind, ok bool) {
	switch datatype {
	case "BOOL":
		return boolContents, 0, 0, kindBool, true
	case "UINT8":
		return uintContents, 0, math.MaxUint8, kindUint, true
	case "UINT16":
		return uintContents, 0, math.MaxUint16, kindUint, true
	case "UINT32":
		return uintContents, 0, 0, kindUint, true
	case "UINT64":
		return uint64Contents, 0, 0, kindUint, true
	case "INT8":
		return intContents, math.MinInt8, math.MaxInt8, kindInt, true
	case "INT16":
		return intContents, math.MinInt16, math.MaxInt16, kindInt, true
	case "INT32":
		return intContents, 0, 0, kindInt, true
	case "INT64":
		return int64Contents, 0, 0, kindInt, true
	case "FP16", "BF16":
		return noContents, 0, 0, kindFloat, true
	case "FP32":
		return fp32Contents, 0, 0, kindFloat, true
	case "FP64":
		return fp64Contents, 0, 0, kindFloat, true
	}
	return 0, 0, 0, 0, false
}

// tensorSig: a model input or output as a caller sees it (bridge/model.py TensorSig).
type tensorSig struct {
	name      string
	datatype  string
	itemsize  int
	shape     []int64 // -1 marks the batch dimension
	shapeText string  // "[-1, 2]"
	batched   bool
	rowBytes  int // one batch row (batched) or the whole tensor
	field     contents
	low, high int64 // typed-contents range of a narrow integer (low == high: none)
	kind      kind
	labels    []string // outputs: classification labels (line i names class i)
	classRows bool     // outputs: top-k ranks each row of dimension 0 apart (classRows)
}

// signature: a served model version's inputs and outputs, built once at load (newSignature).
type signature struct {
	name, version string
	label         string // model 'mlp' (version 3)
	inputs        []tensorSig
	outputs       []tensorSig
	inputIndex    map[string]int
	outputIndex   map[string]int
	knownInputs   string // 'x' (FP32 [2, 3]), 'ids' (INT8 [4])
	knownOutputs  string // 'logits', 'flag'
	allOutputs    []int  // 0..len(outputs)-1: prepared.outputs when none is requested
	batched       []int  // manifest indices of the batched inputs, manifest.batching order
	batchedNames  string // ['a', 'b']
	sizes         []int  // exported batch sizes ascending (nil: unbatched)
	sizesText     string // [1, 4, 8]
	unbatchedRows int    // rows of a request to an unbatched model
	batcherName   string // 'mlp/3' (DynamicBatcher's name, repr'd)

	// dynamicBatching: the model is served through a dynamic batcher (its ModelConfig has
	// dynamic_batching); rows are then checked as bridge/batcher.py's check_rows does. Set by
	// the lead at load, before the signature is shared.
	dynamicBatching bool
}

// newSignature builds the signature of model `name` version `version` from its manifest;
// labels holds the classification labels by output name (the artifact's labels files, one
// label per line). An error says why the manifest cannot be served natively.
func newSignature(name string, version string, m *jaxportv1.Manifest, labels map[string][]string) (*signature, error) {
	if m == nil {
		return nil, fmt.Errorf("model %s: no manifest", name)
	}
	if len(m.GetDimensions()) > 0 {
		return nil, fmt.Errorf("model %s: symbolic dimensions are not served natively", name)
	}
	s := &signature{
		name: name, version: version,
		label:       fmt.Sprintf("model '%s' (version %s)", name, version),
		batcherName: pyRepr(name + "/" + version),
	}
	batching := m.GetBatching()
	var err error
	if s.inputs, s.inputIndex, err = tensorSigs(name, "input", m.GetInputs(), batching.GetBatchedInputs(), nil); err != nil {
		return nil, err
	}
	if s.outputs, s.outputIndex, err = tensorSigs(name, "output", m.GetOutputs(), batching.GetBatchedOutputs(), labels); err != nil {
		return nil, err
	}
	rows := classRows(m)
	for i := range s.outputs {
		s.outputs[i].classRows = rows[s.outputs[i].name]
	}
	known := make([]string, 0, max(len(s.inputs), len(s.outputs)))
	for _, t := range s.inputs {
		known = append(known, fmt.Sprintf("'%s' (%s %s)", t.name, t.datatype, t.shapeText))
	}
	s.knownInputs = strings.Join(known, ", ")
	known = known[:0]
	for i, t := range s.outputs {
		s.allOutputs = append(s.allOutputs, i)
		known = append(known, "'"+t.name+"'")
	}
	s.knownOutputs = strings.Join(known, ", ")
	programs := m.GetPrograms()
	if len(programs) == 0 {
		return nil, fmt.Errorf("model %s: the manifest lists no program", name)
	}
	s.unbatchedRows = max(1, int(programs[0].GetBatchSize()))
	var names []string
	for _, n := range batching.GetBatchedInputs() {
		i, ok := s.inputIndex[n]
		if !ok {
			return nil, fmt.Errorf("model %s: batched input %q is not an input", name, n)
		}
		if len(s.inputs[i].shape) == 0 {
			return nil, fmt.Errorf("model %s: batched input %q is a scalar", name, n)
		}
		s.batched = append(s.batched, i)
		names = append(names, pyRepr(n))
	}
	if len(s.batched) > 0 { // bridge/model.py: batch sizes only with batched inputs
		s.batchedNames = "[" + strings.Join(names, ", ") + "]"
		for _, p := range programs {
			if b := int(p.GetBatchSize()); !slices.Contains(s.sizes, b) {
				s.sizes = append(s.sizes, b)
			}
		}
		slices.Sort(s.sizes)
		s.sizesText = intsText(s.sizes)
	}
	return s, nil
}

// classRows: the outputs whose dimension 0 is the batch, so that top-k classification ranks
// each row apart (jaxport.artifact.dims.row_outputs, the workers' rule): the batched outputs of
// a --batch-sizes export; every output when a symbolic dimension is dimension 0 of every input
// and every output (--dim B=...); else none (top-k over the whole tensor, Triton's
// max_batch_size 0).
func classRows(m *jaxportv1.Manifest) map[string]bool {
	rows := map[string]bool{}
	if m.GetBatching() != nil {
		for _, n := range m.GetBatching().GetBatchedOutputs() {
			rows[n] = true
		}
		return rows
	}
	specs := append(slices.Clone(m.GetInputs()), m.GetOutputs()...)
	if len(m.GetDimensions()) == 0 || len(specs) == 0 {
		return rows
	}
	first := func(t *jaxportv1.TensorSpec) string {
		if len(t.GetDimNames()) == 0 {
			return ""
		}
		return t.GetDimNames()[0]
	}
	batch := first(specs[0])
	for _, t := range specs {
		if batch == "" || first(t) != batch {
			return rows
		}
	}
	for _, t := range m.GetOutputs() {
		rows[t.GetName()] = true
	}
	return rows
}

// tensorSigs: the manifest's inputs or outputs (`what`) and their index by name; batched
// names those with the leading batch dimension, labels the classification labels by name.
func tensorSigs(model, what string, specs []*jaxportv1.TensorSpec, batched []string, labels map[string][]string) ([]tensorSig, map[string]int, error) {
	sigs := make([]tensorSig, 0, len(specs))
	index := make(map[string]int, len(specs))
	for i, spec := range specs {
		t, err := newTensorSig(model, what, spec, slices.Contains(batched, spec.GetName()))
		if err != nil {
			return nil, nil, err
		}
		if _, dup := index[t.name]; dup {
			return nil, nil, fmt.Errorf("model %s: %s %q listed twice", model, what, t.name)
		}
		t.labels = labels[t.name]
		index[t.name] = i
		sigs = append(sigs, t)
	}
	return sigs, index, nil
}

func newTensorSig(model, what string, spec *jaxportv1.TensorSpec, batched bool) (tensorSig, error) {
	dt := spec.GetDtype()
	field, low, high, k, ok := datatypeFacts(dt.GetDatatype())
	if !ok || dt.GetItemsize() == 0 {
		return tensorSig{}, fmt.Errorf("model %s: %s %q: datatype %q (itemsize %d) is not served natively",
			model, what, spec.GetName(), dt.GetDatatype(), dt.GetItemsize())
	}
	t := tensorSig{
		name: spec.GetName(), datatype: dt.GetDatatype(), itemsize: int(dt.GetItemsize()),
		shape: spec.GetShape(), shapeText: intsText(spec.GetShape()), batched: batched,
		field: field, low: low, high: high, kind: k,
	}
	t.rowBytes = wholeBytes(t)
	if batched && len(t.shape) > 0 {
		t.rowBytes = t.itemsize
		for _, d := range t.shape[1:] {
			t.rowBytes *= int(max(d, 0))
		}
	}
	return t, nil
}

// wholeBytes: a fixed-shape tensor's byte count (a -1 dimension counts as 1 row).
func wholeBytes(t tensorSig) int {
	n := t.itemsize
	for _, d := range t.shape {
		if d >= 0 {
			n *= int(d)
		}
	}
	return n
}

// batchSizes: the exported batch sizes ascending; nil for an unbatched model. Read-only.
func (s *signature) batchSizes() []int { return s.sizes }

// batchedInput: whether manifest input i has the leading batch dimension.
func (s *signature) batchedInput(i int) bool { return s.inputs[i].batched }

// batchedOutput: whether manifest output i has the leading batch dimension.
func (s *signature) batchedOutput(i int) bool { return s.outputs[i].batched }

// rowBytes: bytes of one batch row of manifest input i (batched), else of the whole input.
func (s *signature) rowBytes(i int) int { return s.inputs[i].rowBytes }

// outputRowBytes: bytes of one batch row of manifest output i (batched), else of the whole output.
func (s *signature) outputRowBytes(i int) int { return s.outputs[i].rowBytes }

// invalid: the INVALID_ARGUMENT status every request error is.
func invalid(format string, args ...any) error {
	return status.Error(codes.InvalidArgument, fmt.Sprintf(format, args...))
}

// usesSharedMemory: a tensor's parameters carry a shared-memory key (a reference, or a stray
// size/offset whose error the workers word).
func usesSharedMemory(params map[string]*inferencepb.InferParameter) bool {
	if len(params) == 0 {
		return false
	}
	_, region := params[paramShmRegion]
	_, size := params[paramShmByteSize]
	_, offset := params[paramShmOffset]
	return region || size || offset
}

// prepare validates one request, in the Python path's order: requested outputs (names unique,
// classification parameters), each input's name/datatype/shape, input names unique, raw vs
// typed contents and byte/element counts, requested outputs known, classifiable, every input
// present, batch rows. errToWorkers for shared memory; INVALID_ARGUMENT statuses otherwise.
func (s *signature) prepare(req *inferencepb.ModelInferRequest) (*prepared, error) {
	for _, t := range req.GetInputs() {
		if usesSharedMemory(t.GetParameters()) {
			return nil, errToWorkers
		}
	}
	for _, o := range req.GetOutputs() {
		if usesSharedMemory(o.GetParameters()) {
			return nil, errToWorkers
		}
	}
	if err := checkRequestedOutputs(req.GetOutputs()); err != nil {
		return nil, err
	}
	// Model.prepare: each declared input before anything is decoded.
	for _, t := range req.GetInputs() {
		i, ok := s.inputIndex[t.GetName()]
		if !ok {
			return nil, invalid("unexpected input '%s': %s has inputs %s", clip(t.GetName(), true), s.label, s.knownInputs)
		}
		sig := &s.inputs[i]
		if t.GetDatatype() != sig.datatype {
			got := clip(t.GetDatatype(), true)
			if got == "" {
				got = "(empty)"
			}
			return nil, invalid("input '%s': expected datatype %s, got %s", sig.name, sig.datatype, got)
		}
		if !matchesShape(sig.shape, t.GetShape()) {
			return nil, invalid("input '%s': expected shape %s, got %s", sig.name, sig.shapeText, clipShape(t.GetShape()))
		}
	}
	p := &prepared{inputs: make([][]byte, len(s.inputs)), rows: s.unbatchedRows, outputs: s.allOutputs}
	if err := s.decode(req, p); err != nil {
		return nil, err
	}
	if err := s.outputsOf(req.GetOutputs(), p); err != nil {
		return nil, err
	}
	for i := range s.inputs {
		if p.inputs[i] == nil {
			sig := &s.inputs[i]
			return nil, invalid("missing input '%s': %s expects %s %s", sig.name, s.label, sig.datatype, sig.shapeText)
		}
	}
	if s.dynamicBatching {
		return p, s.batcherRows(req, p)
	}
	return p, s.programRows(req, p)
}

// checkRequestedOutputs: messages.requested_output_names (check_unique) then
// messages.requested_classifications' parameter rules, before any input is looked at.
func checkRequestedOutputs(outputs []*inferencepb.ModelInferRequest_InferRequestedOutputTensor) error {
	if len(outputs) == 0 {
		return nil
	}
	var seen map[string]bool
	if len(outputs) > smallRequest {
		seen = make(map[string]bool, len(outputs))
	}
	for i, o := range outputs {
		n := o.GetName()
		if n == "" {
			return invalid("requested output with an empty name; every requested output needs a name")
		}
		dup := seen[n]
		if seen == nil {
			for _, before := range outputs[:i] {
				dup = dup || before.GetName() == n
			}
		} else {
			seen[n] = true
		}
		if dup {
			return invalid("duplicate requested output '%s': each requested output may appear once", clip(n, false))
		}
	}
	for _, o := range outputs {
		if _, err := classCount(o); err != nil {
			return err
		}
	}
	return nil
}

// classCount: the requested output's top-k count (0: not classified), or its parameter's error.
func classCount(o *inferencepb.ModelInferRequest_InferRequestedOutputTensor) (int, error) {
	param, ok := o.GetParameters()[paramClassification]
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
		return 0, invalid("requested output '%s': parameter '%s' must be an int64 class count", clip(o.GetName(), false), paramClassification)
	}
	if k < 1 {
		return 0, invalid("requested output '%s': class count must be >= 1, got %d", clip(o.GetName(), false), k)
	}
	if k > math.MaxInt {
		return math.MaxInt, nil
	}
	return int(k), nil
}

// decode: messages.decode_request_inputs + codecs.decode_tensor for declared-valid inputs.
func (s *signature) decode(req *inferencepb.ModelInferRequest, p *prepared) error {
	inputs := req.GetInputs()
	// check_unique("input"): every name is a model input by now, so "seen" is by index.
	var small [smallRequest]bool
	seen := small[:0]
	if len(s.inputs) <= smallRequest {
		seen = small[:len(s.inputs)]
	} else {
		seen = make([]bool, len(s.inputs))
	}
	for _, t := range inputs {
		i := s.inputIndex[t.GetName()]
		if seen[i] {
			return invalid("duplicate input '%s': each input may appear once", clip(t.GetName(), false))
		}
		seen[i] = true
	}
	raw := req.GetRawInputContents()
	if len(raw) > 0 {
		if len(raw) != len(inputs) {
			return invalid("raw_input_contents has %d entries; expected %d (one per input not in shared memory, in the order of `inputs`)", len(raw), len(inputs))
		}
		for _, t := range inputs {
			if usedFields(t.GetContents()) != 0 {
				return invalid("input '%s': has typed contents but the request uses raw_input_contents; send every input one way, not both", clip(t.GetName(), false))
			}
		}
	}
	for n, t := range inputs {
		i := s.inputIndex[t.GetName()]
		sig := &s.inputs[i]
		var err error
		if len(raw) > 0 {
			p.inputs[i], err = decodeRaw(sig, t.GetShape(), raw[n])
		} else {
			p.inputs[i], err = decodeTyped(sig, t.GetShape(), t.GetContents())
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nonNil: an input's bytes as prepared holds them (nil marks a missing input).
var nonNil = []byte{}

func decodeRaw(sig *tensorSig, shape []int64, raw []byte) ([]byte, error) {
	count, ok := elementCount(shape)
	hi, expected := bits.Mul64(count, uint64(sig.itemsize))
	if !ok || hi != 0 || expected != uint64(len(raw)) {
		return nil, invalid("input '%s': raw contents hold %d bytes; expected %s (shape %s x %d bytes per %s element)",
			clip(sig.name, false), len(raw), exactProduct(shape, sig.itemsize), intsText(shape), sig.itemsize, sig.datatype)
	}
	if raw == nil {
		return nonNil, nil
	}
	if sig.field == boolContents { // codecs.normalise_bool: any nonzero byte is true
		for j, b := range raw {
			if b > 1 {
				out := make([]byte, len(raw))
				copy(out, raw[:j])
				for k := j; k < len(raw); k++ {
					if raw[k] != 0 {
						out[k] = 1
					}
				}
				return out, nil
			}
		}
	}
	return raw, nil
}

func decodeTyped(sig *tensorSig, shape []int64, c *inferencepb.InferTensorContents) ([]byte, error) {
	count, ok := elementCount(shape)
	used := usedFields(c)
	name := clip(sig.name, false)
	if sig.field == noContents {
		if ok && count == 0 && used == 0 {
			return nonNil, nil
		}
		return nil, invalid("input '%s': %s has no typed contents field; send it as raw bytes (raw_input_contents)", name, sig.datatype)
	}
	field := contentsNames[sig.field]
	if used == 0 && (!ok || count != 0) {
		return nil, invalid("input '%s': no data; expected raw_input_contents or contents.%s with %s elements (shape %s)",
			name, field, exactProduct(shape, 1), intsText(shape))
	}
	if wrong := used &^ (1 << sig.field); wrong != 0 {
		var got []string
		for f := boolContents; f <= bytesContents; f++ {
			if wrong&(1<<f) != 0 {
				got = append(got, contentsNames[f])
			}
		}
		return nil, invalid("input '%s': datatype %s uses contents.%s; got contents.%s", name, sig.datatype, field, strings.Join(got, ", contents."))
	}
	values, low, high := contentsLen(c, sig.field)
	if !ok || uint64(values) != count {
		return nil, invalid("input '%s': contents.%s holds %d elements; expected %s (shape %s)",
			name, field, values, exactProduct(shape, 1), intsText(shape))
	}
	if sig.low != sig.high && values > 0 && (low < sig.low || high > sig.high) {
		return nil, invalid("input '%s': %s values must lie in [%d, %d]; got values in [%d, %d]", name, sig.datatype, sig.low, sig.high, low, high)
	}
	if values == 0 {
		return nonNil, nil
	}
	return typedRaw(sig.datatype, c), nil
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
func (s *signature) outputsOf(requested []*inferencepb.ModelInferRequest_InferRequestedOutputTensor, p *prepared) error {
	if len(requested) == 0 {
		return nil
	}
	p.outputs = make([]int, len(requested))
	for n, o := range requested {
		i, ok := s.outputIndex[o.GetName()]
		if !ok {
			return invalid("unknown requested output '%s': %s has outputs %s", clip(o.GetName(), true), s.label, s.knownOutputs)
		}
		p.outputs[n] = i
	}
	for n, o := range requested {
		k, _ := classCount(o) // its parameter was checked by checkRequestedOutputs
		if k == 0 {
			continue
		}
		sig := &s.outputs[p.outputs[n]]
		if sig.kind == kindBool {
			return invalid("requested output '%s': class result not available for an output of type %s", clip(sig.name, false), sig.datatype)
		}
		if p.classes == nil {
			p.classes = map[int]int{}
		}
		p.classes[p.outputs[n]] = k
	}
	return nil
}

// programRows: Model._program_for's rows (the batched inputs agree, 1..max batch size).
func (s *signature) programRows(req *inferencepb.ModelInferRequest, p *prepared) error {
	if len(s.batched) == 0 {
		return nil
	}
	shapes := make([]int64, 0, 4)
	for _, t := range req.GetInputs() {
		if s.inputs[s.inputIndex[t.GetName()]].batched {
			shapes = append(shapes, t.GetShape()[0])
		}
	}
	slices.Sort(shapes)
	shapes = slices.Compact(shapes)
	if len(shapes) != 1 {
		return invalid("batched inputs %s disagree on the batch size: %s", s.batchedNames, intsText(shapes))
	}
	rows := shapes[0]
	if last := s.sizes[len(s.sizes)-1]; rows > int64(last) {
		return invalid("batch size %d exceeds max_batch_size %d of %s (exported batch sizes %s); split the request", rows, last, s.label, s.sizesText)
	}
	p.rows = int(rows)
	return nil
}

// batcherRows: bridge/batcher.py DynamicBatcher.check_rows: every input (manifest order) has a
// leading batch dimension, all the same, at most max_batch_size (at least 1 row: a batched
// input's declared shape guarantees it).
func (s *signature) batcherRows(req *inferencepb.ModelInferRequest, p *prepared) error {
	shapes := make([][]int64, len(s.inputs))
	for _, t := range req.GetInputs() {
		shapes[s.inputIndex[t.GetName()]] = t.GetShape()
	}
	var rows int64
	for i, shape := range shapes {
		name := s.inputs[i].name
		if len(shape) == 0 {
			return invalid("model %s: input %s is a scalar but needs a leading batch dimension", s.batcherName, pyRepr(name))
		}
		if i == 0 {
			rows = shape[0]
		} else if shape[0] != rows {
			return invalid("model %s: inputs disagree on the batch dimension: %s has %d rows, %s has %d",
				s.batcherName, pyRepr(s.inputs[0].name), rows, pyRepr(name), shape[0])
		}
	}
	if last := s.sizes[len(s.sizes)-1]; rows > int64(last) {
		return invalid("model %s: request batch size %d exceeds the model's max_batch_size %d (exported batch sizes %s); split the request",
			s.batcherName, rows, last, s.sizesText)
	}
	p.rows = int(rows)
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

// exactProduct: prod(shape) * factor in decimal, exact at any size (Python integers).
func exactProduct(shape []int64, factor int) string {
	n := big.NewInt(int64(factor))
	for _, d := range shape {
		n.Mul(n, big.NewInt(d))
	}
	return n.String()
}

// intsText: a Python list of ints, `[2, 3]`.
func intsText[T int | int64](v []T) string {
	b := make([]byte, 0, 2+4*len(v))
	b = append(b, '[')
	for i, d := range v {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	return string(append(b, ']'))
}

// clip: errors.clip: a caller-supplied string cut to MAX_SHOWN characters (code points, as
// Python counts), with its full length when count is set.
func clip(text string, count bool) string {
	n := utf8.RuneCountInString(text)
	if n <= maxShown {
		return text
	}
	cut := 0
	for i := 0; i < maxShown-3; i++ {
		_, size := utf8.DecodeRuneInString(text[cut:])
		cut += size
	}
	if count {
		return fmt.Sprintf("%s...(%d chars)", text[:cut], n)
	}
	return text[:cut] + "..."
}

// clipShape: errors.clip_shape: `[2, 8]`, or the first MAX_SHOWN_DIMS dimensions and the rank.
func clipShape(shape []int64) string {
	if len(shape) <= maxShownDims {
		return intsText(shape)
	}
	head := intsText(shape[:maxShownDims])
	return fmt.Sprintf("%s, ...] (%d dimensions)", head[:len(head)-1], len(shape))
}

// pyRepr: Python's repr of a str (quotes chosen as Python does; backslash, quote and
// non-printable characters escaped).
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, quote)
	for _, r := range s {
		switch {
		case r == '\\' || r == rune(quote):
			b = append(b, '\\', byte(r))
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r < 0x20 || r == 0x7f:
			b = fmt.Appendf(b, `\x%02x`, r)
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return string(append(b, quote))
}

// response builds the ModelInferResponse of a prepared request (messages.encode_infer_response:
// model_name, model_version, id, no parameters; the stream's final-response flag is the
// caller's). outputs[i] holds manifest output i's bytes (`p.rows` rows when batched); only those
// in p.outputs are read, and their slices are referenced, not copied. Outputs in p.classes
// become classification results (BYTES). An error means outputs do not fit the signature (a bug).
func (s *signature) response(req *inferencepb.ModelInferRequest, version string, p *prepared, outputs [][]byte) (*inferencepb.ModelInferResponse, error) {
	if len(outputs) != len(s.outputs) {
		return nil, fmt.Errorf("model %s: %d output buffers for %d outputs", s.name, len(outputs), len(s.outputs))
	}
	resp := &inferencepb.ModelInferResponse{
		ModelName: s.name, ModelVersion: version, Id: req.GetId(),
		Outputs:           make([]*inferencepb.ModelInferResponse_InferOutputTensor, len(p.outputs)),
		RawOutputContents: make([][]byte, len(p.outputs)),
	}
	tensors := make([]inferencepb.ModelInferResponse_InferOutputTensor, len(p.outputs))
	for n, i := range p.outputs {
		sig := &s.outputs[i]
		shape := sig.shape
		want := sig.rowBytes
		if sig.batched {
			shape = slices.Clone(sig.shape)
			shape[0] = int64(p.rows)
			want *= p.rows
		}
		if len(outputs[i]) != want {
			return nil, fmt.Errorf("model %s: output %s holds %d bytes; expected %d", s.name, sig.name, len(outputs[i]), want)
		}
		t := &tensors[n]
		t.Name, t.Datatype, t.Shape = sig.name, sig.datatype, shape
		raw := outputs[i]
		if k := p.classes[i]; k > 0 {
			t.Datatype = "BYTES"
			t.Shape, raw = topk(sig, shape, outputs[i], k)
		}
		resp.Outputs[n], resp.RawOutputContents[n] = t, raw
	}
	return resp, nil
}

// topk: messages.topk_classification over one output's bytes: per batch row when dimension 0
// of the output is the batch (sig.classRows), else over the whole tensor; the k largest values descending (ties: lower index
// first; NaN above every number, as numpy sorts it), each "<value>:<index>[:<label>]" with the
// value as C++ std::to_string writes it (%f for floating point, the integer otherwise). The
// BYTES result shape and its raw (length-prefixed) contents.
func topk(sig *tensorSig, shape []int64, data []byte, k int) ([]int64, []byte) {
	count := len(data) / sig.itemsize
	byRow := sig.classRows && len(shape) > 0
	rows := 1
	if byRow {
		rows = int(shape[0])
	}
	width := 0
	if rows > 0 {
		width = count / rows
	}
	k = min(k, width)
	out := []int64{int64(k)}
	if byRow {
		out = []int64{int64(rows), int64(k)}
	}
	order := make([]int, width)
	var raw []byte
	var text []byte
	for r := range rows {
		row := data[r*width*sig.itemsize : (r+1)*width*sig.itemsize]
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return compareDesc(sig, row, a, b) })
		for _, i := range order[:k] {
			text = appendClassValue(text[:0], sig, row, i)
			text = append(text, ':')
			text = strconv.AppendInt(text, int64(i), 10)
			if i < len(sig.labels) && sig.labels[i] != "" {
				text = append(text, ':')
				text = append(text, sig.labels[i]...)
			}
			raw = binary.LittleEndian.AppendUint32(raw, uint32(len(text)))
			raw = append(raw, text...)
		}
	}
	if raw == nil {
		raw = []byte{}
	}
	return out, raw
}

// compareDesc orders element indices a, b of a row: the larger value first (NaN largest,
// NaNs equal); equal values keep index order (the caller's sort is stable).
func compareDesc(sig *tensorSig, row []byte, a, b int) int {
	switch sig.kind {
	case kindInt:
		return -cmpOrdered(intAt(sig, row, a), intAt(sig, row, b))
	case kindUint:
		return -cmpOrdered(uintAt(sig, row, a), uintAt(sig, row, b))
	}
	x, y := floatAt(sig, row, a), floatAt(sig, row, b)
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn && yn:
		return 0
	case xn:
		return -1
	case yn:
		return 1
	}
	return -cmpOrdered(x, y)
}

func cmpOrdered[T int64 | uint64 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func appendClassValue(b []byte, sig *tensorSig, row []byte, i int) []byte {
	switch sig.kind {
	case kindInt:
		return strconv.AppendInt(b, intAt(sig, row, i), 10)
	case kindUint:
		return strconv.AppendUint(b, uintAt(sig, row, i), 10)
	}
	v := floatAt(sig, row, i)
	switch { // Python's "%f" spelling of the non-finite values
	case math.IsNaN(v):
		return append(b, "nan"...)
	case math.IsInf(v, 1):
		return append(b, "inf"...)
	case math.IsInf(v, -1):
		return append(b, "-inf"...)
	}
	return strconv.AppendFloat(b, v, 'f', 6, 64)
}

func intAt(sig *tensorSig, row []byte, i int) int64 {
	e := row[i*sig.itemsize:]
	switch sig.itemsize {
	case 1:
		return int64(int8(e[0]))
	case 2:
		return int64(int16(binary.LittleEndian.Uint16(e)))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(e)))
	}
	return int64(binary.LittleEndian.Uint64(e))
}

func uintAt(sig *tensorSig, row []byte, i int) uint64 {
	e := row[i*sig.itemsize:]
	switch sig.itemsize {
	case 1:
		return uint64(e[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(e))
	case 4:
		return uint64(binary.LittleEndian.Uint32(e))
	}
	return binary.LittleEndian.Uint64(e)
}

func floatAt(sig *tensorSig, row []byte, i int) float64 {
	e := row[i*sig.itemsize:]
	switch sig.datatype {
	case "BF16":
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(e)) << 16))
	case "FP16":
		return halfToFloat(binary.LittleEndian.Uint16(e))
	case "FP32":
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(e))
}

// halfToFloat: an IEEE binary16 value, exactly.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, frac := int(h>>10)&0x1f, float64(h&0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+frac, exp-25)
}
