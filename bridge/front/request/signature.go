package request

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Parameter names of the protocol (jaxport/protocol/codecs.py, Triton's extensions).
const (
	ParamClassification = "classification"
	ParamShmRegion      = "shared_memory_region"
	ParamShmByteSize    = "shared_memory_byte_size"
	ParamShmOffset      = "shared_memory_offset"
	// MaxRank: the most dimensions a request tensor may have (codecs.MAX_RANK).
	MaxRank      = 32
	smallRequest = 16 // up to this many tensors, duplicates are found without a map
)

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

// Datatype is one row of the protocol's dtype table (jaxport/protocol/dtypes.py) beyond the
// manifest's DType: the typed-contents field, the value range of narrow integers (typed
// contents are range-checked below 4 bytes), how classification reads a value.
type Datatype struct {
	Name     string
	Itemsize int
	field    contents
	low      int64
	high     int64 // low == high: no range check
	kind     kind
}

// datatypes: the table, in dtypes.py's order (the order unsupported-datatype errors list).
var datatypes = []Datatype{
	{"BOOL", 1, boolContents, 0, 0, kindBool},
	{"UINT8", 1, uintContents, 0, math.MaxUint8, kindUint},
	{"UINT16", 2, uintContents, 0, math.MaxUint16, kindUint},
	{"UINT32", 4, uintContents, 0, 0, kindUint},
	{"UINT64", 8, uint64Contents, 0, 0, kindUint},
	{"INT8", 1, intContents, math.MinInt8, math.MaxInt8, kindInt},
	{"INT16", 2, intContents, math.MinInt16, math.MaxInt16, kindInt},
	{"INT32", 4, intContents, 0, 0, kindInt},
	{"INT64", 8, int64Contents, 0, 0, kindInt},
	{"FP16", 2, noContents, 0, 0, kindFloat},
	{"BF16", 2, noContents, 0, 0, kindFloat},
	{"FP32", 4, fp32Contents, 0, 0, kindFloat},
	{"FP64", 8, fp64Contents, 0, 0, kindFloat},
}

// DatatypeOf is the row of datatype (false: not a tensor datatype the engines run).
func DatatypeOf(datatype string) (Datatype, bool) {
	for _, d := range datatypes {
		if d.Name == datatype {
			return d, true
		}
	}
	return Datatype{}, false
}

// tensorSig: a model input or output as a caller sees it (bridge/model.py TensorSig).
type tensorSig struct {
	name      string
	Datatype           // the row of its datatype
	shape     []int64  // -1 marks the batch dimension or a symbolic one
	shapeText string   // "[-1, 2]"
	dimNames  []string // per axis: the symbolic dimension's name or ""; nil: none symbolic
	batched   bool     // leading batch dimension (--batch-sizes)
	rowBytes  int      // one batch row (batched) or the whole tensor (fixed shape)
	labels    []string // outputs: classification labels (line i names class i)
	classRows bool     // outputs: top-k ranks each row of dimension 0 apart
	labelsRel string   // outputs: the labels file (artifact-relative) when labels were read
	fixed     bool     // every dimension >= 0
}

// Bucket is a fixed-shape program of a model with symbolic dimensions: its index among the
// manifest's programs and each dimension's size in it.
type Bucket struct {
	Program int
	Dims    map[string]int64
}

// Plan says how a model version is executed, which decides how its requests are checked: the
// engine named in messages, whether symbolic dimensions run on bucket programs (padded under
// the model's --pad rule) or at any admissible size on the polymorphic program, whether
// requests go through a dynamic batcher.
type Plan struct {
	// Engine: "native", "exported" or "pjrt" (the workers' engines).
	Engine string
	// Buckets: a model with symbolic dimensions runs its bucket programs only (native, pjrt);
	// false: the polymorphic program at the request's sizes (exported).
	Buckets bool
	// DynamicBatching: requests go through the model's dynamic batcher (rows checked as its
	// check_rows does; the batcher chooses the program).
	DynamicBatching bool
}

// Signature is a served model version's inputs, outputs and programs, built once at load.
type Signature struct {
	Name, Version string
	Plan          Plan
	label         string // model 'mlp' (version 3)
	inputs        []tensorSig
	outputs       []tensorSig
	inputIndex    map[string]int
	outputIndex   map[string]int
	knownInputs   string // 'x' (FP32 [2, 3]), 'ids' (INT8 [4])
	knownOutputs  string // 'logits', 'flag'
	allOutputs    []int  // 0..len(outputs)-1: Prepared.Outputs when none is requested

	// --batch-sizes
	batched       []int // manifest indices of the batched inputs, manifest.batching order
	batchedNames  string
	sizes         []int       // exported batch sizes ascending (nil: unbatched)
	sizesText     string      // [1, 4, 8]
	bySize        map[int]int // batch size -> program index
	unbatchedRows int         // rows of a request to an unbatched model
	single        int         // the program of an unbatched fixed-shape model
	batcherName   string      // 'mlp/3' (DynamicBatcher's name, repr'd)

	// symbolic dimensions (schema 2)
	dims        []*jaxportv1.Dimension // manifest order
	dimIndex    map[string]int
	buckets     []Bucket          // manifest program order
	padding     map[string]string // dimension -> mask input
	padOrder    []string          // padded dimensions, manifest.padding order
	polymorphic int               // the polymorphic program (-1: none)
}

// NewSignature builds the signature of model name/version from its manifest, executed as plan
// says; labels holds the classification labels by output name (the artifact's labels files,
// one label per line). An error says why the manifest cannot be served.
func NewSignature(name, version string, m *jaxportv1.Manifest, labels map[string][]string, plan Plan) (*Signature, error) {
	if m == nil {
		return nil, fmt.Errorf("model %s: no manifest", name)
	}
	s := &Signature{
		Name: name, Version: version, Plan: plan,
		label:       fmt.Sprintf("model '%s' (version %s)", name, version),
		batcherName: status.PyRepr(name + "/" + version),
		single:      -1, polymorphic: -1,
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
		if s.outputs[i].labels != nil {
			s.outputs[i].labelsRel = m.GetOutputs()[i].GetLabelsFile()
		}
	}
	known := make([]string, 0, max(len(s.inputs), len(s.outputs)))
	for _, t := range s.inputs {
		known = append(known, fmt.Sprintf("'%s' (%s %s)", t.name, t.Name, t.shapeText))
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
	if err := s.symbolic(m); err != nil {
		return nil, err
	}
	if len(s.dims) > 0 {
		if plan.DynamicBatching { // dispatch refuses this at load, in its own words
			return nil, fmt.Errorf("%s: dynamic batching of a model with symbolic dimensions is not built", s.label)
		}
		return s, nil
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
		names = append(names, n)
	}
	if len(s.batched) == 0 { // bridge/model.py: batch sizes only with batched inputs
		if plan.DynamicBatching {
			return nil, fmt.Errorf("%s cannot batch: it was exported without --batch-sizes", s.label)
		}
		for i, p := range programs {
			if !p.GetPolymorphic() {
				s.single = i
				break
			}
		}
		if s.single < 0 {
			return nil, fmt.Errorf("model %s: the manifest lists no fixed-shape program", name)
		}
		return s, nil
	}
	s.batchedNames = status.PyList(names)
	s.bySize = map[int]int{}
	for i, p := range programs {
		b := int(p.GetBatchSize())
		if p.GetPolymorphic() || b < 1 {
			continue
		}
		if _, dup := s.bySize[b]; !dup {
			s.bySize[b] = i
			s.sizes = append(s.sizes, b)
		}
	}
	if len(s.sizes) == 0 {
		return nil, fmt.Errorf("model %s: batched inputs but no program with a batch size", name)
	}
	slices.Sort(s.sizes)
	s.sizesText = status.Ints(s.sizes)
	return s, nil
}

// symbolic reads the symbolic dimensions, buckets and padding (schema 2).
func (s *Signature) symbolic(m *jaxportv1.Manifest) error {
	if len(m.GetDimensions()) == 0 {
		return nil
	}
	s.dims = m.GetDimensions()
	s.dimIndex = map[string]int{}
	for i, d := range s.dims {
		if _, dup := s.dimIndex[d.GetName()]; dup {
			return fmt.Errorf("model %s: dimension %s is declared twice", s.Name, d.GetName())
		}
		s.dimIndex[d.GetName()] = i
	}
	for _, list := range [][]tensorSig{s.inputs, s.outputs} {
		for _, t := range list {
			for axis, n := range t.dimNames {
				if _, ok := s.dimIndex[n]; n != "" && !ok {
					return fmt.Errorf("model %s: %s axis %d names dimension %q, which manifest.dimensions does not declare",
						s.Name, t.name, axis, n)
				}
			}
		}
	}
	for i, p := range m.GetPrograms() {
		if p.GetPolymorphic() {
			if s.polymorphic < 0 {
				s.polymorphic = i
			}
			continue
		}
		if len(p.GetDims()) > 0 {
			s.buckets = append(s.buckets, Bucket{Program: i, Dims: p.GetDims()})
		}
	}
	s.padding = map[string]string{}
	for _, p := range m.GetPadding() {
		if _, ok := s.dimIndex[p.GetDim()]; !ok {
			return fmt.Errorf("model %s: padding names dimension %q, which manifest.dimensions does not declare", s.Name, p.GetDim())
		}
		if _, ok := s.inputIndex[p.GetMaskInput()]; !ok {
			return fmt.Errorf("model %s: padding names mask input %q, which is not an input", s.Name, p.GetMaskInput())
		}
		s.padding[p.GetDim()] = p.GetMaskInput()
		s.padOrder = append(s.padOrder, p.GetDim())
	}
	switch {
	case s.Plan.Buckets && len(s.buckets) == 0:
		return fmt.Errorf("model %s: symbolic dimensions and no bucket program (--buckets)", s.Name)
	case !s.Plan.Buckets && s.polymorphic < 0:
		return fmt.Errorf("model %s: symbolic dimensions and no shape-polymorphic program", s.Name)
	}
	return nil
}

// classRows: the outputs whose dimension 0 is the batch, so that top-k classification ranks
// each row apart (jaxport.artifact.dims.row_outputs): the batched outputs of a --batch-sizes
// export; every output when a symbolic dimension is dimension 0 of every input and every
// output (--dim B=...); else none (top-k over the whole tensor, Triton's max_batch_size 0).
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
	row, ok := DatatypeOf(dt.GetDatatype())
	if !ok || int(dt.GetItemsize()) != row.Itemsize {
		return tensorSig{}, fmt.Errorf("model %s: %s %q: datatype %q (itemsize %d) is not served",
			model, what, spec.GetName(), dt.GetDatatype(), dt.GetItemsize())
	}
	t := tensorSig{name: spec.GetName(), Datatype: row, shape: spec.GetShape(),
		shapeText: status.Ints(spec.GetShape()), batched: batched, fixed: true}
	if names := spec.GetDimNames(); slices.ContainsFunc(names, func(n string) bool { return n != "" }) {
		if len(names) != len(t.shape) {
			return tensorSig{}, fmt.Errorf("model %s: %s %q has %d dim_names for %d axes", model, what, t.name, len(names), len(t.shape))
		}
		t.dimNames = names
	}
	n := t.Itemsize
	for i, d := range t.shape {
		if d < 0 {
			t.fixed = false
			if !(batched && i == 0) && (t.dimNames == nil || t.dimNames[i] == "") {
				return tensorSig{}, fmt.Errorf("model %s: %s %q axis %d is -1 and neither the batch dimension nor a symbolic one",
					model, what, t.name, i)
			}
			continue
		}
		n *= int(d)
	}
	t.rowBytes = n
	return t, nil
}

// Inputs: how many inputs the model has; Outputs likewise.
func (s *Signature) Inputs() int  { return len(s.inputs) }
func (s *Signature) Outputs() int { return len(s.outputs) }

// BatchSizes: the exported batch sizes ascending; nil for an unbatched model. Read-only.
func (s *Signature) BatchSizes() []int { return s.sizes }

// ProgramOf is the program of batch size b (a batched model).
func (s *Signature) ProgramOf(b int) int { return s.bySize[b] }

// BatchedInput / BatchedOutput: whether manifest input / output i has the leading batch
// dimension; RowBytes / OutputRowBytes: bytes of one batch row of it (batched), or of the
// whole fixed-shape tensor.
func (s *Signature) BatchedInput(i int) bool  { return s.inputs[i].batched }
func (s *Signature) BatchedOutput(i int) bool { return s.outputs[i].batched }
func (s *Signature) RowBytes(i int) int       { return s.inputs[i].rowBytes }
func (s *Signature) OutputRowBytes(i int) int { return s.outputs[i].rowBytes }

// InputNames and OutputNames, manifest order.
func (s *Signature) InputNames() []string  { return names(s.inputs) }
func (s *Signature) OutputNames() []string { return names(s.outputs) }

func names(ts []tensorSig) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.name
	}
	return out
}

// Label is `model 'mlp' (version 3)`, as messages name a model version.
func (s *Signature) Label() string { return s.label }

// Symbolic: the model has symbolic dimensions.
func (s *Signature) Symbolic() bool { return len(s.dims) > 0 }

// BucketList: the bucket programs (nil without symbolic dimensions). Read-only.
func (s *Signature) BucketList() []Bucket { return s.buckets }

// LabelFiles: the labels file of each output whose labels were read (Triton's label_filename).
func (s *Signature) LabelFiles() map[string]string {
	out := map[string]string{}
	for _, t := range s.outputs {
		if t.labelsRel != "" {
			out[t.name] = t.labelsRel
		}
	}
	return out
}
