package request

// Symbolic dimensions (schema 2; clients/python/artifact/dims.py is the same rule for the
// Python consumers): every size a request gives a symbolic dimension is checked against the
// dimension's rule, inputs must agree on it, and a model served by bucket programs runs the
// smallest bucket that holds the request, padded along the dimensions its --pad rule names.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Admissible: size is one of dim's sizes (min..max, a multiple of multiple_of).
func Admissible(dim *jaxportv1.Dimension, size int64) bool {
	m := max(1, dim.GetMultipleOf())
	return dim.GetMin() <= size && size <= dim.GetMax() && size%m == 0
}

// Rule: `T must be a multiple of 8 in 8..2048` / `B must be in 1..64`.
func Rule(dim *jaxportv1.Dimension) string {
	if dim.GetMultipleOf() > 1 {
		return fmt.Sprintf("%s must be a multiple of %d in %d..%d", dim.GetName(), dim.GetMultipleOf(), dim.GetMin(), dim.GetMax())
	}
	return fmt.Sprintf("%s must be in %d..%d", dim.GetName(), dim.GetMin(), dim.GetMax())
}

// DimsText: every dimension's rule in the --dim syntax (`B=1..64,T=8..2048:8`), ModelConfig's
// `dims` parameter.
func DimsText(dims []*jaxportv1.Dimension) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = fmt.Sprintf("%s=%d..%d", d.GetName(), d.GetMin(), d.GetMax())
		if d.GetMultipleOf() > 1 {
			parts[i] += fmt.Sprintf(":%d", d.GetMultipleOf())
		}
	}
	return strings.Join(parts, ",")
}

// bind: dims.bind over the request's inputs (manifest order; an input the request lacks is
// skipped): each symbolic dimension's size; the error names the input, the axis, the
// dimension and the rule, and the model.
func (s *Signature) bind(req *Request) (map[string]int64, error) {
	sizes := make(map[string]int64, len(s.dims))
	seen := make(map[string]string, len(s.dims))
	for i := range s.inputs {
		sig := &s.inputs[i]
		if sig.dimNames == nil {
			continue
		}
		var shape []int64
		found := false
		for j := range req.Inputs { // the last of a repeated name, as a dict keeps it
			if req.Inputs[j].Name == sig.name {
				shape, found = req.Inputs[j].Shape, true
			}
		}
		if !found {
			continue
		}
		for axis, name := range sig.dimNames {
			if name == "" || axis >= len(shape) {
				continue
			}
			size := shape[axis]
			dim := s.dims[s.dimIndex[name]]
			where := fmt.Sprintf("input '%s' dimension %d (%s) is %d", sig.name, axis, name, size)
			if have, ok := sizes[name]; ok && have != size {
				return nil, status.Invalid("%s but input '%s' has %s = %d: inputs must agree on %s (%s)",
					where, seen[name], name, have, name, s.label)
			}
			if !Admissible(dim, size) {
				return nil, status.Invalid("%s: %s (%s)", where, Rule(dim), s.label)
			}
			sizes[name] = size
			if _, ok := seen[name]; !ok {
				seen[name] = sig.name
			}
		}
	}
	return sizes, nil
}

// fits: bucket b holds sizes (each dimension equal, or larger along a padded one).
func (s *Signature) fits(b Bucket, name string, size int64) bool {
	got, ok := b.Dims[name]
	if !ok {
		return false
	}
	_, padded := s.padding[name]
	return got == size || (padded && got > size)
}

// bucketFor: Model._bucket_for: the bucket of exactly the request's sizes, or else the
// smallest (fewest elements) one the request can be padded up to along the padded dimensions.
// None: INVALID_ARGUMENT naming the input, the dimension and the size that no bucket holds,
// the buckets, and the engine that serves every admissible size.
func (s *Signature) bucketFor(req *Request, p *Prepared) error {
	best := -1
	bestCells := math.Inf(1)
	for i, b := range s.buckets {
		ok := true
		for name, size := range p.Sizes {
			if !s.fits(b, name, size) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		cells := 1.0
		for _, v := range b.Dims {
			cells *= float64(v)
		}
		exact := true
		for name, size := range p.Sizes {
			exact = exact && b.Dims[name] == size
		}
		if exact { // the bucket of exactly these sizes wins
			best = i
			break
		}
		if cells < bestCells {
			best, bestCells = i, cells
		}
	}
	if best < 0 {
		return s.noBucket(req, p)
	}
	b := &s.buckets[best]
	p.Bucket, p.Program, p.Rows = b, b.Program, 1
	for name, size := range p.Sizes {
		if b.Dims[name] != size {
			p.Padded = true
		}
	}
	return nil
}

func (s *Signature) noBucket(req *Request, p *Prepared) error {
	order := make([]string, len(s.dims))
	for i, d := range s.dims {
		order[i] = d.GetName()
	}
	spell := func(dims map[string]int64) string {
		var parts []string
		for _, n := range order {
			if v, ok := dims[n]; ok {
				parts = append(parts, fmt.Sprintf("%s=%d", n, v))
			}
		}
		return strings.Join(parts, ", ")
	}
	buckets := make([]string, len(s.buckets))
	for i, b := range s.buckets {
		buckets[i] = spell(b.Dims)
	}
	padded := ""
	if len(s.padOrder) > 0 {
		padded = fmt.Sprintf(", %s padded up to them", strings.Join(s.padOrder, ", "))
	}
	// The dimension no bucket holds alone (else the first), and the first input that has it.
	blame := order[0]
	for _, n := range order {
		size, ok := p.Sizes[n]
		if ok && !slices.ContainsFunc(s.buckets, func(b Bucket) bool { return s.fits(b, n, size) }) {
			blame = n
			break
		}
	}
	where := ""
	for _, sig := range s.inputs {
		if axis := slices.Index(sig.dimNames, blame); axis >= 0 {
			where = fmt.Sprintf("input '%s' dimension %d (%s) is %d: ", sig.name, axis, blame, p.Sizes[blame])
			break
		}
	}
	engine := "the native engine"
	if s.Plan.Engine != "native" {
		engine = "--engine " + s.Plan.Engine
	}
	return status.Invalid("%ssizes %s have no bucket program: %s is served by %s, which runs its bucket sizes only (%s%s); "+
		"send one of them, or serve the model with --engine exported for every admissible size",
		where, spell(p.Sizes), s.label, engine, strings.Join(buckets, "; "), padded)
}

// BucketsText: ModelConfig's `buckets` parameter (`B=2,T=16;B=2,T=32`: the bucket sizes, in
// dimension order, sorted); "" without bucket programs.
func (s *Signature) BucketsText() string {
	if len(s.buckets) == 0 {
		return ""
	}
	rows := make([][]int64, 0, len(s.buckets))
	for _, b := range s.buckets {
		row := make([]int64, len(s.dims))
		for i, d := range s.dims {
			row[i] = b.Dims[d.GetName()]
		}
		if !slices.ContainsFunc(rows, func(r []int64) bool { return slices.Equal(r, row) }) {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, slices.Compare)
	out := make([]string, len(rows))
	for i, row := range rows {
		parts := make([]string, len(row))
		for j, v := range row {
			parts[j] = fmt.Sprintf("%s=%d", s.dims[j].GetName(), v)
		}
		out[i] = strings.Join(parts, ",")
	}
	return strings.Join(out, ";")
}

// PaddingText: ModelConfig's `padding` parameter (`T=attention_mask`).
func (s *Signature) PaddingText() string {
	parts := make([]string, len(s.padOrder))
	for i, d := range s.padOrder {
		parts[i] = d + "=" + s.padding[d]
	}
	return strings.Join(parts, ",")
}

// Dimensions: the manifest's symbolic dimensions (read-only).
func (s *Signature) Dimensions() []*jaxportv1.Dimension { return s.dims }
