package engine

// checks.go: a checked model's check results turned into the status a caller sees, with the
// text JAX's `err.get()` gives: the Go port of clients/python/artifact/checks.py
// (`check_layout`, `format_failure`, `STATUS`) as bridge/model.py's `_raise_if_check_fired`
// uses it. The message formatting (Python `str.format` over numpy values) is
// checks_format.go.
//
// Use: NewChecks once per program at load (a table it cannot reproduce exactly is an error,
// which Eligible turns into the model's one-line refusal, so such models stay on the workers);
// then Failure on every Execute's results.

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

// checkStatus is the status each check kind reaches a caller with (checks.py STATUS): user
// and index checks reject the request's inputs, nan and div say the model cannot compute a
// finite result for them.
var checkStatus = map[string]codes.Code{
	"user":  codes.InvalidArgument,
	"index": codes.InvalidArgument,
	"nan":   codes.FailedPrecondition,
	"div":   codes.FailedPrecondition,
}

// CheckFailure is a check that fired: what bridge/model.py raises as
// error_for_code(STATUS[kind], message).
type CheckFailure struct {
	Kind    string     // "user", "index", "nan" or "div"
	Code    codes.Code // the kind's status
	Message string     // exactly the Python path's text (JAX's err.get())
}

// Checks is a program's check table, validated and bound to the program's results.
type Checks struct {
	effects []checkEffect // ascending effect: Python's layout order
	byCode  map[int32]*checkEntry
	sizes   []uint64 // byte size of every result of the program, in @main order
}

// checkEffect is where one error effect's leaves are among the program's results.
type checkEffect struct {
	effect      uint32
	pred, code  int // result positions
	payload     []payloadLeaf
	payloadSize uint32
}

// payloadLeaf is one payload result: its position, numpy dtype and shape.
type payloadLeaf struct {
	at    int
	dtype string
	shape []int64
}

type checkEntry struct {
	kind     string
	effect   uint32
	template []piece
}

// NewChecks binds the manifest's check table to one program's results (Program.Results). A
// nil or empty table with no check results gives nil, whose Failure never fires. An error
// names what the Go formatter cannot reproduce exactly (a layout the results do not follow,
// an unknown kind, a template field or format spec outside checks_format.go's subset): the
// caller refuses the model, one line.
func NewChecks(table *jaxportv1.Checks, results []*jaxportv1.Result) (*Checks, error) {
	var checkResults []int
	for i, r := range results {
		if r.GetRole() == jaxportv1.ResultRole_RESULT_ROLE_CHECK {
			checkResults = append(checkResults, i)
		}
	}
	if len(table.GetCodes()) == 0 {
		if len(checkResults) > 0 {
			return nil, fmt.Errorf("%d check results but the manifest's check table lists no code", len(checkResults))
		}
		return nil, nil
	}
	// check_layout: per effect (ascending) its predicate, its code, then payload_size leaves.
	payloadSize := map[uint32]uint32{}
	for _, c := range table.GetCodes() {
		if n, ok := payloadSize[c.GetEffect()]; ok && n != c.GetPayloadSize() {
			return nil, fmt.Errorf("check table: effect %d has inconsistent payload sizes", c.GetEffect())
		}
		payloadSize[c.GetEffect()] = c.GetPayloadSize()
	}
	effectIDs := slices.Sorted(func(yield func(uint32) bool) {
		for e := range payloadSize {
			if !yield(e) {
				return
			}
		}
	})
	c := &Checks{byCode: map[int32]*checkEntry{}, sizes: make([]uint64, len(results))}
	for i, r := range results {
		c.sizes[i] = r.GetByteSize()
	}
	next := 0
	take := func(part string, effect uint32) (int, error) {
		if next >= len(checkResults) {
			return 0, fmt.Errorf("the check table needs more check results than the program's %d", len(checkResults))
		}
		r := results[checkResults[next]]
		if r.GetCheck().GetPart() != part || r.GetCheck().GetEffect() != effect {
			return 0, fmt.Errorf("check result %s is %s of effect %d where the check table's layout has %s of effect %d",
				r.GetName(), r.GetCheck().GetPart(), r.GetCheck().GetEffect(), part, effect)
		}
		next++
		return checkResults[next-1], nil
	}
	byEffect := map[uint32]*checkEffect{}
	for _, e := range effectIDs {
		ce := checkEffect{effect: e, payloadSize: payloadSize[e]}
		var err error
		if ce.pred, err = take("predicate", e); err != nil {
			return nil, err
		}
		if ce.code, err = take("code", e); err != nil {
			return nil, err
		}
		if err := wantScalar(results[ce.pred], "bool"); err != nil {
			return nil, err
		}
		if err := wantScalar(results[ce.code], "int32"); err != nil {
			return nil, err
		}
		for range payloadSize[e] {
			at, err := take("payload", e)
			if err != nil {
				return nil, err
			}
			ce.payload = append(ce.payload, payloadLeaf{at: at, dtype: results[at].GetDtype().GetNumpy(), shape: results[at].GetShape()})
		}
		c.effects = append(c.effects, ce)
		byEffect[e] = &c.effects[len(c.effects)-1]
	}
	if next != len(checkResults) {
		return nil, fmt.Errorf("the program has %d check results, the check table's layout %d", len(checkResults), next)
	}
	for _, code := range table.GetCodes() {
		where := fmt.Sprintf("check code %d (%s)", code.GetCode(), code.GetLocation())
		if _, ok := checkStatus[code.GetKind()]; !ok {
			return nil, fmt.Errorf("%s: unknown kind %q", where, code.GetKind())
		}
		if _, dup := c.byCode[code.GetCode()]; dup {
			return nil, fmt.Errorf("%s: listed twice", where)
		}
		tmpl, err := parseTemplate(code.GetMessageTemplate(), byEffect[code.GetEffect()].payload)
		if err != nil {
			return nil, fmt.Errorf("%s: message %q: %v", where, code.GetMessageTemplate(), err)
		}
		c.byCode[code.GetCode()] = &checkEntry{kind: code.GetKind(), effect: code.GetEffect(), template: tmpl}
	}
	return c, nil
}

func wantScalar(r *jaxportv1.Result, dtype string) error {
	if len(r.GetShape()) != 0 || r.GetDtype().GetNumpy() != dtype {
		return fmt.Errorf("check result %s is %s%v, a %s must be %s[]", r.GetName(), r.GetDtype().GetNumpy(),
			r.GetShape(), r.GetCheck().GetPart(), dtype)
	}
	return nil
}

// Failure reads a program's results (all of Execute's, outputs first) as `format_failure`
// does: nil when no effect's predicate is set; else, among the effects whose predicate is
// set, the one whose code is smallest, its table entry's kind, status and message. An error
// means the results contradict the table (a wrong result count or size, a code the table does
// not list for that effect): the Python path raises ValueError there, which reaches the
// caller as INTERNAL "internal error" (bridge/status.py); the caller answers the same.
func (c *Checks) Failure(results [][]byte) (*CheckFailure, error) {
	if c == nil {
		return nil, nil
	}
	if len(results) != len(c.sizes) {
		return nil, fmt.Errorf("check results: %d results, the program has %d", len(results), len(c.sizes))
	}
	var first *checkEffect
	var firstCode int32
	for i := range c.effects {
		e := &c.effects[i]
		if err := c.sized(results, e.pred); err != nil {
			return nil, err
		}
		if results[e.pred][0] == 0 {
			continue
		}
		if err := c.sized(results, e.code); err != nil {
			return nil, err
		}
		code := int32(binary.LittleEndian.Uint32(results[e.code]))
		if first == nil || code < firstCode {
			first, firstCode = e, code
		}
	}
	if first == nil {
		return nil, nil
	}
	entry := c.byCode[firstCode]
	if entry == nil || entry.effect != first.effect {
		return nil, fmt.Errorf("check output reports code %d for effect %d, which the error table does not list",
			firstCode, first.effect)
	}
	payload := make([][]byte, len(first.payload))
	for i, leaf := range first.payload {
		if err := c.sized(results, leaf.at); err != nil {
			return nil, err
		}
		payload[i] = results[leaf.at]
	}
	var b strings.Builder
	for _, p := range entry.template {
		b.WriteString(p.render(first.payload, payload))
	}
	return &CheckFailure{Kind: entry.kind, Code: checkStatus[entry.kind], Message: b.String()}, nil
}

func (c *Checks) sized(results [][]byte, at int) error {
	if uint64(len(results[at])) != c.sizes[at] || len(results[at]) == 0 {
		return fmt.Errorf("check result %d: %d bytes, the manifest says %d", at, len(results[at]), c.sizes[at])
	}
	return nil
}

// ---- templates ----------------------------------------------------------------------------

// piece is a literal or one replacement field `{N}`, `{N[i]}`, `{N!s}`, `{N:spec}`.
type piece struct {
	literal string
	field   bool
	leaf    int  // payload leaf N
	elem    int  // element i of a rank-1 leaf, -1 for the whole leaf
	str     bool // !s: str() of the value, then the spec as for a string
	spec    formatSpec
}

// parseTemplate parses a message template (Python str.format syntax) over an effect's payload
// leaves and checks every field against its leaf's dtype and shape, so rendering cannot fail
// and gives Python's text. The fields the exporter writes are numbered (`{0}`, `{0[2]}`,
// exporter/checks.py); auto-numbered and named fields, attributes and `!r`/`!a` are refused.
func parseTemplate(t string, leaves []payloadLeaf) ([]piece, error) {
	var out []piece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, piece{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(t); {
		switch ch := t[i]; {
		case ch == '{' && strings.HasPrefix(t[i:], "{{"), ch == '}' && strings.HasPrefix(t[i:], "}}"):
			lit.WriteByte(ch)
			i += 2
		case ch == '}':
			return nil, fmt.Errorf("single '}' at offset %d", i)
		case ch == '{':
			end := strings.IndexByte(t[i+1:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unterminated field at offset %d", i)
			}
			body := t[i+1 : i+1+end]
			if strings.Contains(body, "{") {
				return nil, fmt.Errorf("field {%s}: nested fields are not supported", body)
			}
			p, err := parseField(body, leaves)
			if err != nil {
				return nil, fmt.Errorf("field {%s}: %v", body, err)
			}
			flush()
			out = append(out, p)
			i += end + 2
		default:
			lit.WriteByte(ch)
			i++
		}
	}
	flush()
	return out, nil
}

func parseField(body string, leaves []payloadLeaf) (piece, error) {
	p := piece{field: true, elem: -1}
	name, spec, hasSpec := strings.Cut(body, ":")
	name, conv, hasConv := strings.Cut(name, "!")
	if hasConv {
		if conv != "s" {
			return p, fmt.Errorf("conversion !%s is not supported (only !s)", conv)
		}
		p.str = true
	}
	index, rest, _ := strings.Cut(name, "[")
	n, err := strconv.Atoi(index)
	if err != nil || index == "" || strings.TrimLeft(index, "0123456789") != "" {
		return p, fmt.Errorf("only numbered fields are supported ({0}, {0[1]})")
	}
	if n >= len(leaves) {
		return p, fmt.Errorf("payload leaf %d out of range (the effect has %d)", n, len(leaves))
	}
	p.leaf = n
	leaf := leaves[n]
	if rest != "" {
		i, ok := strings.CutSuffix(rest, "]")
		e, err := strconv.Atoi(i)
		if !ok || err != nil || strings.TrimLeft(i, "0123456789") != "" || i == "" {
			return p, fmt.Errorf("only one integer element index is supported ({0[1]})")
		}
		if len(leaf.shape) != 1 {
			return p, fmt.Errorf("element index on payload leaf %d of shape %v (only rank 1)", n, leaf.shape)
		}
		if int64(e) >= leaf.shape[0] {
			return p, fmt.Errorf("element %d of payload leaf %d of shape %v is out of range", e, n, leaf.shape)
		}
		p.elem = e
	}
	if hasSpec {
		if p.spec, err = parseSpec(spec); err != nil {
			return p, err
		}
	} else {
		p.spec = formatSpec{prec: -1}
	}
	return p, p.validate(leaf)
}

// render formats the field over the payload bytes (rendering cannot fail: validate ran at load).
func (p piece) render(leaves []payloadLeaf, payload [][]byte) string {
	if !p.field {
		return p.literal
	}
	leaf, raw := leaves[p.leaf], payload[p.leaf]
	if len(leaf.shape) == 1 && p.elem < 0 {
		return formatString(numpyArrayStr(raw, leaf.dtype), p.spec) // validate: !s or no spec
	}
	v := scalarAt(raw, leaf.dtype, max(p.elem, 0))
	if p.str {
		return formatString(v.numpyStr(), p.spec)
	}
	return v.format(p.spec)
}

// KindStatus is the status a check of kind reaches a caller with (false: not a kind).
func KindStatus(kind string) (codes.Code, bool) {
	c, ok := checkStatus[kind]
	return c, ok
}
