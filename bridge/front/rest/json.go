package rest

// A small JSON reader and writer for the REST codec. encoding/json cannot be used: the
// KServe/Triton REST clients (tritonclient.http through python-rapidjson, anything using
// Python's json) write non-finite floats as the bare tokens NaN, Infinity and -Infinity, which
// encoding/json rejects; and tensor data wants numbers kept as their text until the datatype
// of the tensor is known (an INT64 beyond 2^53 must not pass through a float64).
//
// Values: jsonObject, []any, string, jsonNumber (the literal's text, or one of the three
// non-finite tokens), bool, nil (null).

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonObject keeps its keys in document order (error messages and forwarding stay stable).
type jsonObject struct {
	keys   []string
	values map[string]any
}

func (o *jsonObject) get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.values[key]
	return v, ok
}

// jsonNumber is a number literal as written (or NaN / Infinity / -Infinity).
type jsonNumber string

// maxJSONDepth bounds nesting (tensor data arrays nest one level per dimension).
const maxJSONDepth = 128

type jsonParser struct {
	data  []byte
	pos   int
	depth int
}

// trailingData: bytes after the one JSON value (e.g. binary tensor data sent without the
// Inference-Header-Content-Length header).
const trailingData = "unexpected data after the JSON value"

// jsonSyntaxError is invalid JSON; the message says where.
type jsonSyntaxError struct {
	offset int
	msg    string
}

func (e *jsonSyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.offset, e.msg)
}

// parseJSON reads exactly one JSON value from data (surrounding whitespace allowed).
func parseJSON(data []byte) (any, error) {
	p := &jsonParser{data: data}
	p.space()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(p.data) {
		return nil, p.fail(trailingData)
	}
	return v, nil
}

func (p *jsonParser) fail(msg string) error { return &jsonSyntaxError{offset: p.pos, msg: msg} }

func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) literal(word string) bool {
	if len(p.data)-p.pos >= len(word) && string(p.data[p.pos:p.pos+len(word)]) == word {
		p.pos += len(word)
		return true
	}
	return false
}

func (p *jsonParser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == 't' && p.literal("true"):
		return true, nil
	case c == 'f' && p.literal("false"):
		return false, nil
	case c == 'n' && p.literal("null"):
		return nil, nil
	case c == 'N' && p.literal("NaN"):
		return jsonNumber("NaN"), nil
	case c == 'I' && p.literal("Infinity"):
		return jsonNumber("Infinity"), nil
	case c == '-' && p.literal("-Infinity"):
		return jsonNumber("-Infinity"), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.fail(fmt.Sprintf("unexpected character %q", rune(c)))
	}
}

func (p *jsonParser) enter() error {
	p.depth++
	if p.depth > maxJSONDepth {
		return p.fail(fmt.Sprintf("nested deeper than %d levels", maxJSONDepth))
	}
	return nil
}

func (p *jsonParser) object() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.pos++ // {
	o := &jsonObject{values: map[string]any{}}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return o, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.fail("expected a string key")
		}
		keyAt := p.pos
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := o.values[key]; dup {
			return nil, &jsonSyntaxError{offset: keyAt, msg: fmt.Sprintf("duplicate key %q", key)}
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.fail("expected ':' after an object key")
		}
		p.pos++
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		o.keys = append(o.keys, key)
		o.values[key] = v
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.fail("unexpected end of input in an object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return o, nil
		default:
			return nil, p.fail("expected ',' or '}' in an object")
		}
	}
}

func (p *jsonParser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	p.pos++ // [
	a := []any{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.space()
		if p.pos >= len(p.data) {
			return nil, p.fail("unexpected end of input in an array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return a, nil
		default:
			return nil, p.fail("expected ',' or ']' in an array")
		}
	}
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jsonParser) number() (any, error) {
	start, i := p.pos, p.pos
	if p.data[i] == '-' {
		i++
	}
	switch {
	case i < len(p.data) && p.data[i] == '0':
		i++
	case i < len(p.data) && p.data[i] >= '1' && p.data[i] <= '9':
		i = digits(p.data, i)
	default:
		return nil, p.fail("invalid number")
	}
	if i < len(p.data) && p.data[i] == '.' {
		j := digits(p.data, i+1)
		if j == i+1 {
			p.pos = j
			return nil, p.fail("invalid number: no digit after '.'")
		}
		i = j
	}
	if i < len(p.data) && (p.data[i] == 'e' || p.data[i] == 'E') {
		i++
		if i < len(p.data) && (p.data[i] == '+' || p.data[i] == '-') {
			i++
		}
		j := digits(p.data, i)
		if j == i {
			p.pos = j
			return nil, p.fail("invalid number: no digit in the exponent")
		}
		i = j
	}
	p.pos = i
	return jsonNumber(p.data[start:i]), nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *jsonParser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := p.data[start:p.pos]
			if !utf8.Valid(s) {
				return "", &jsonSyntaxError{offset: start, msg: "string is not valid UTF-8"}
			}
			p.pos++
			return string(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.pos++
	}
	out := append([]byte{}, p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(out) {
				return "", &jsonSyntaxError{offset: start, msg: "string is not valid UTF-8"}
			}
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in a string")
		case c != '\\':
			out = append(out, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(p.data[p.pos:])
			if !ok {
				return "", p.fail("invalid \\u escape")
			}
			p.pos += 4
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					r2, ok = hex4(p.data[p.pos+2:])
				}
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return "", p.fail("unpaired UTF-16 surrogate in a \\u escape")
				}
				p.pos += 6
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", p.fail(fmt.Sprintf("invalid escape '\\%c'", e))
		}
	}
	return "", p.fail("unterminated string")
}

// --- writing -------------------------------------------------------------------------------

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as a JSON string (s must be valid UTF-8).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONFloat writes the shortest text that reads back as the same value at bits (32 or
// 64); non-finite values as NaN / Infinity / -Infinity (what Python's json and rapidjson read).
func appendJSONFloat(b []byte, v float64, bits int) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "Infinity"...)
	case math.IsInf(v, -1):
		return append(b, "-Infinity"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

// appendJSONValue writes a value of the shapes parseJSON returns (plus int64/uint64/float64 and
// []string conveniences used by the writers).
func appendJSONValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, x)
	case string:
		return appendJSONString(b, x)
	case jsonNumber:
		return append(b, x...)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case float64:
		return appendJSONFloat(b, x, 64)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONValue(b, e)
		}
		return append(b, ']')
	case *jsonObject:
		b = append(b, '{')
		for i, k := range x.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONValue(b, x.values[k])
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("appendJSONValue: unsupported %T", v))
}

// newObject starts an ordered object; set appends (or replaces) a key.
func newObject() *jsonObject { return &jsonObject{values: map[string]any{}} }

func (o *jsonObject) set(key string, v any) *jsonObject {
	if _, ok := o.values[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.values[key] = v
	return o
}
