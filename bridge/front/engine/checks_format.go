package engine

// checks_format.go: Python `str.format` over numpy payload values, as
// clients/python/artifact/checks.py's format_failure applies a check message template (a 0-d
// leaf as its numpy scalar, a rank-1 leaf as the array). What is reproduced, exactly:
//
//   - `{N}` / `{N:spec}` of a numpy scalar: numpy hands float16/float32/float64 (and
//     ml_dtypes' bfloat16) to Python's float.__format__ as the float64 value (so `{}` of
//     float32 0.1 is "0.10000000149011612", repr's shortest round trip of the float64), ints
//     to int.__format__, bool to str when the spec is empty and to int.__format__ otherwise;
//     the spec mini-language [[fill]align][sign][z][0][width][,|_][.precision][type] with the
//     types e E f F g G % and none for floats, d b o x X, none and the float types for ints;
//   - `{N!s}` / `{N!s:spec}`: numpy's str of the scalar (float16/32/64: the shortest digits that
//     round-trip in that dtype, positional from 1e-4 up to 1e3/1e6/1e16, else scientific;
//     bfloat16: ml_dtypes' "%g"), then the spec as for a string (fill, align, width, precision);
//   - `{N[i]}`: element i of a rank-1 leaf, a scalar as above;
//   - `{N}` / `{N!s}` of a rank-1 integer or bool leaf short enough for one line: numpy's
//     "[ -5 100   3]", "[ True False]".
//
// Everything else (float arrays, rank >= 2, `!r`, `#`, `n`, `c`, nested or named fields, zero
// padding with grouping, ...) is refused by validate at load, naming the field: such a model
// stays on the Python workers. Expected texts in checks_test.go come from running Python.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// formatSpec is a parsed Python format spec.
type formatSpec struct {
	raw    string // as written ("" is not the same as "<": bool formats as str only for "")
	fill   rune   // 0: not given
	align  byte   // '<', '>', '=', '^' or 0
	sign   byte   // '+', '-', ' ' or 0
	z, alt bool   // negative-zero coercion, alternate form '#'
	zero   bool   // the '0' flag
	width  int
	group  byte // ',', '_' or 0
	prec   int  // -1: not given
	typ    byte // 0: none
}

// maxWidth bounds width and precision: a template asking for more is refused, not rendered.
const maxWidth = 1000

func parseSpec(s string) (formatSpec, error) {
	sp := formatSpec{raw: s, prec: -1}
	r := []rune(s)
	i := 0
	isAlign := func(c rune) bool { return c == '<' || c == '>' || c == '=' || c == '^' }
	if len(r) >= 2 && isAlign(r[1]) {
		sp.fill, sp.align, i = r[0], byte(r[1]), 2
	} else if len(r) >= 1 && isAlign(r[0]) {
		sp.align, i = byte(r[0]), 1
	}
	if i < len(r) && (r[i] == '+' || r[i] == '-' || r[i] == ' ') {
		sp.sign = byte(r[i])
		i++
	}
	if i < len(r) && r[i] == 'z' {
		sp.z = true
		i++
	}
	if i < len(r) && r[i] == '#' {
		sp.alt = true
		i++
	}
	if sp.fill == 0 && i < len(r) && r[i] == '0' {
		sp.zero = true
		i++
	}
	// digits reads a decimal number: found says whether there was one.
	digits := func() (n int, found bool, err error) {
		start := i
		for i < len(r) && r[i] >= '0' && r[i] <= '9' {
			i++
		}
		if i == start {
			return 0, false, nil
		}
		if n, err = strconv.Atoi(string(r[start:i])); err != nil || n > maxWidth {
			return 0, true, fmt.Errorf("format spec %q: %s over %d", s, string(r[start:i]), maxWidth)
		}
		return n, true, nil
	}
	var err error
	if sp.width, _, err = digits(); err != nil {
		return sp, err
	}
	if i < len(r) && (r[i] == ',' || r[i] == '_') {
		sp.group = byte(r[i])
		i++
	}
	if i < len(r) && r[i] == '.' {
		i++
		n, found, err := digits()
		if err != nil {
			return sp, err
		}
		if !found {
			return sp, fmt.Errorf("format spec %q: missing precision", s)
		}
		sp.prec = n
	}
	switch len(r) - i {
	case 0:
	case 1:
		if r[i] > 127 {
			return sp, fmt.Errorf("format spec %q: invalid type", s)
		}
		sp.typ = byte(r[i])
	default:
		return sp, fmt.Errorf("invalid format spec %q", s)
	}
	if sp.zero && sp.fill == 0 {
		sp.fill = '0' // and, for a number without an explicit alignment, '=' (numberAlign)
	}
	return sp, nil
}

// validate says whether the field renders exactly as Python would on a leaf of this dtype and
// shape (whatever the values), else why not.
func (p piece) validate(leaf payloadLeaf) error {
	kind := dtypeKind(leaf.dtype)
	if kind == 0 {
		return fmt.Errorf("payload dtype %s is not supported", leaf.dtype)
	}
	switch {
	case len(leaf.shape) > 1:
		return fmt.Errorf("payload leaf %d of shape %v: only scalars and rank-1 integer or bool arrays are formatted", p.leaf, leaf.shape)
	case len(leaf.shape) == 1 && p.elem < 0:
		if kind == 'f' {
			return fmt.Errorf("payload leaf %d is a %s array: numpy's float array printing is not reproduced", p.leaf, leaf.dtype)
		}
		if !p.str && p.spec.raw != "" {
			return fmt.Errorf("format spec %q on an array (Python raises TypeError)", p.spec.raw)
		}
		if n := leaf.shape[0]; 2+n*int64(maxDigits[leaf.dtype]+1) > 75 {
			return fmt.Errorf("payload leaf %d (%s[%d]) may not fit numpy's 75-column line", p.leaf, leaf.dtype, n)
		}
		if p.str {
			return p.spec.validString()
		}
		return nil
	}
	if p.str {
		return p.spec.validString()
	}
	switch {
	case kind == 'f':
		return p.spec.validFloat()
	case kind == 'b' && p.spec.raw == "":
		return nil
	}
	return p.spec.validInt()
}

// dtypeKind: 'b' bool, 'i' integer, 'f' float, 0 anything else.
func dtypeKind(dtype string) byte {
	switch dtype {
	case "bool":
		return 'b'
	case "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64":
		return 'i'
	case "float16", "bfloat16", "float32", "float64":
		return 'f'
	}
	return 0
}

// maxDigits: the longest numpy str of one element of each integer/bool dtype.
var maxDigits = map[string]int{"bool": 5, "int8": 4, "int16": 6, "int32": 11, "int64": 20,
	"uint8": 3, "uint16": 5, "uint32": 10, "uint64": 20}

func (sp formatSpec) common() error {
	if sp.alt {
		return fmt.Errorf("format spec %q: alternate form '#' is not supported", sp.raw)
	}
	if sp.group != 0 && sp.fill == '0' && sp.numberAlign() == '=' && sp.width > 0 {
		return fmt.Errorf("format spec %q: zero padding with grouping is not supported", sp.raw)
	}
	return nil
}

func (sp formatSpec) validFloat() error {
	if !strings.ContainsRune("eEfFgG%", rune(sp.typ)) && sp.typ != 0 {
		return fmt.Errorf("format spec %q: type %q is not supported for a float", sp.raw, sp.typ)
	}
	return sp.common()
}

func (sp formatSpec) validInt() error {
	if sp.typ != 0 && strings.ContainsRune("eEfFgG%", rune(sp.typ)) {
		return sp.validFloat()
	}
	if sp.typ != 0 && !strings.ContainsRune("dboxX", rune(sp.typ)) {
		return fmt.Errorf("format spec %q: type %q is not supported for an integer", sp.raw, sp.typ)
	}
	if sp.prec >= 0 {
		return fmt.Errorf("format spec %q: precision is not allowed for an integer (Python raises ValueError)", sp.raw)
	}
	if sp.z {
		return fmt.Errorf("format spec %q: 'z' is not allowed for an integer (Python raises ValueError)", sp.raw)
	}
	if sp.group == ',' && sp.typ != 0 && sp.typ != 'd' {
		return fmt.Errorf("format spec %q: ',' with type %q (Python raises ValueError)", sp.raw, sp.typ)
	}
	return sp.common()
}

func (sp formatSpec) validString() error {
	if (sp.typ != 0 && sp.typ != 's') || sp.sign != 0 || sp.z || sp.alt || sp.group != 0 || sp.align == '=' {
		return fmt.Errorf("format spec %q is not supported for a string (only fill, align, '0', width, precision)", sp.raw)
	}
	return nil
}

// ---- values -------------------------------------------------------------------------------

// scalar is one payload element.
type scalar struct {
	dtype string
	kind  byte    // 'b', 'i', 'f'
	neg   bool    // integers: sign
	mag   uint64  // integers: magnitude; bool: 0 or 1
	f     float64 // floats: the value as float64 (exact)
	bits  uint16  // float16: the raw bits (its shortest digits need them)
}

func itemSize(dtype string) int {
	switch dtype {
	case "bool", "int8", "uint8":
		return 1
	case "int16", "uint16", "float16", "bfloat16":
		return 2
	case "int32", "uint32", "float32":
		return 4
	}
	return 8
}

// scalarAt decodes element i of little-endian raw bytes of dtype.
func scalarAt(raw []byte, dtype string, i int) scalar {
	n := itemSize(dtype)
	b := raw[i*n : (i+1)*n]
	var u uint64
	for k := n - 1; k >= 0; k-- {
		u = u<<8 | uint64(b[k])
	}
	s := scalar{dtype: dtype, kind: dtypeKind(dtype)}
	switch dtype {
	case "bool":
		s.mag = min(u, 1)
	case "int8", "int16", "int32", "int64":
		v := int64(u<<(64-8*n)) >> (64 - 8*n) // sign-extend
		s.neg, s.mag = v < 0, uint64(v)
		if v < 0 {
			s.mag = -uint64(v)
		}
	case "uint8", "uint16", "uint32", "uint64":
		s.mag = u
	case "float16":
		s.bits, s.f = uint16(u), float16Value(uint16(u))
	case "bfloat16":
		s.f = float64(math.Float32frombits(uint32(u) << 16))
	case "float32":
		s.f = float64(math.Float32frombits(uint32(u)))
	case "float64":
		s.f = math.Float64frombits(u)
	}
	return s
}

// float16Value is an IEEE binary16 value, exactly.
func float16Value(h uint16) float64 {
	sign, exp, frac := h>>15, int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch exp {
	case 0:
		v = math.Ldexp(frac, -24)
	case 0x1f:
		v = math.Inf(1)
		if frac != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(1024+frac, exp-25)
	}
	if sign == 1 {
		v = -v
	}
	return v
}

// format is Python's format(value, spec) for the numpy scalar (see the file comment).
func (s scalar) format(sp formatSpec) string {
	switch {
	case s.kind == 'f':
		return formatFloat(s.f, sp)
	case s.kind == 'b' && sp.raw == "":
		return s.boolStr()
	case sp.typ != 0 && strings.ContainsRune("eEfFgG%", rune(sp.typ)):
		f := float64(s.mag)
		if s.neg {
			f = -f
		}
		return formatFloat(f, sp)
	}
	return formatInt(s.neg, s.mag, sp)
}

func (s scalar) boolStr() string {
	if s.mag != 0 {
		return "True"
	}
	return "False"
}

// numpyStr is str() of the numpy scalar.
func (s scalar) numpyStr() string {
	switch s.kind {
	case 'b':
		return s.boolStr()
	case 'i':
		if s.neg {
			return "-" + strconv.FormatUint(s.mag, 10)
		}
		return strconv.FormatUint(s.mag, 10)
	}
	if math.IsNaN(s.f) {
		return "nan"
	}
	sign := ""
	if math.Signbit(s.f) {
		sign = "-"
	}
	a := math.Abs(s.f)
	if math.IsInf(a, 0) {
		return sign + "inf"
	}
	if s.dtype == "bfloat16" { // ml_dtypes: std::ostream << float, i.e. "%g"
		return sign + generalFormat(a, 6, false, false)
	}
	digits, exp := shortestDigits(a, s.dtype, s.bits&0x7fff)
	cutoff := map[string]float64{"float16": 1e3, "float32": 1e6, "float64": 1e16}[s.dtype]
	if a == 0 || (a >= 1e-4 && a < cutoff) {
		return sign + positional(digits, exp, true)
	}
	return sign + scientific(digits, exp, false)
}

// numpyArrayStr is str() of a rank-1 integer or bool array (numpy pads every element to the
// widest; bool elements are " True" / "False").
func numpyArrayStr(raw []byte, dtype string) string {
	n := len(raw) / itemSize(dtype)
	words := make([]string, n)
	width := 0
	for i := range n {
		s := scalarAt(raw, dtype, i)
		words[i] = s.numpyStr()
		if dtype == "bool" && s.mag == 1 {
			words[i] = " True"
		}
		width = max(width, len(words[i]))
	}
	for i, w := range words {
		words[i] = strings.Repeat(" ", width-len(w)) + w
	}
	return "[" + strings.Join(words, " ") + "]"
}

// ---- Python's float and int formatting ---------------------------------------------------

// splitE splits strconv's 'e' format ("1.2345e+06") into digits ("12345") and exponent (6).
func splitE(s string) (string, int) {
	mant, e, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(e)
	return strings.Replace(mant, ".", "", 1), exp
}

// shortestDigits are the shortest decimal digits that round-trip in dtype (numpy's and
// Python's repr), with the exponent of the first digit.
func shortestDigits(a float64, dtype string, h16 uint16) (string, int) {
	switch dtype {
	case "float32":
		return splitE(strconv.FormatFloat(a, 'e', -1, 32))
	case "float16":
		if a == 0 {
			return "0", 0
		}
		// The first p for which a p-digit decimal rounds back to h16 (5 digits always do),
		// the nearer of the two p-digit decimals around a (numpy's Dragon4). Both must be
		// tried: at a power of two the interval below is half the one above, so the nearest
		// (0.01562 for 2^-6) can miss where the other (0.01563) rounds back.
		for p := 1; ; p++ {
			d, exp := splitE(strconv.FormatFloat(a, 'e', p-1, 64))
			n, _ := strconv.ParseInt(d, 10, 64)
			best, bestD, bestExp := math.Inf(1), "", 0
			for _, k := range []int64{n, n - 1, n + 1} {
				c, _ := strconv.ParseFloat(fmt.Sprintf("%de%d", k, exp-p+1), 64)
				if k > 0 && (p >= 5 || roundsToFloat16(c, h16)) && math.Abs(c-a) < best {
					kd, kexp := splitE(strconv.FormatFloat(c, 'e', -1, 64))
					best, bestD, bestExp = math.Abs(c-a), kd, kexp
				}
			}
			if bestD != "" {
				return strings.TrimRight(bestD, "0"), bestExp
			}
		}
	}
	return splitE(strconv.FormatFloat(a, 'e', -1, 64))
}

// roundsToFloat16 says whether c (> 0) rounds to the positive finite binary16 h (nearest,
// ties to even).
func roundsToFloat16(c float64, h uint16) bool {
	v := float16Value(h)
	lo, hi := 0.0, 65536.0
	if h > 0 {
		lo = float16Value(h - 1)
	}
	if h < 0x7bff {
		hi = float16Value(h + 1)
	}
	midLo, midHi, even := (lo+v)/2, (v+hi)/2, h&1 == 0
	return (c > midLo || (c == midLo && even)) && (c < midHi || (c == midHi && even))
}

// positional writes digits (first digit at 10^exp) without an exponent; dot0 adds ".0" to an
// integer (repr's and numpy's rule), else an integer has no point.
func positional(digits string, exp int, dot0 bool) string {
	var ip, fp string
	switch {
	case exp < 0:
		ip, fp = "0", strings.Repeat("0", -exp-1)+digits
	case len(digits) <= exp+1:
		ip = digits + strings.Repeat("0", exp+1-len(digits))
	default:
		ip, fp = digits[:exp+1], digits[exp+1:]
	}
	if fp == "" {
		if dot0 {
			return ip + ".0"
		}
		return ip
	}
	return ip + "." + fp
}

// scientific writes d[.ddd]e±XX (at least two exponent digits).
func scientific(digits string, exp int, upper bool) string {
	out := digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	e := "e"
	if upper {
		e = "E"
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%s%s%s%02d", out, e, sign, exp)
}

// generalFormat is 'g' with precision p of a >= 0 (Python's and C's %g); dot0 is the none
// type's variant (scientific from exponent p-1, ".0" on an integer).
func generalFormat(a float64, p int, dot0, upper bool) string {
	p = max(p, 1)
	digits, exp := splitE(strconv.FormatFloat(a, 'e', p-1, 64))
	if digits = strings.TrimRight(digits, "0"); digits == "" {
		digits = "0"
	}
	limit := p
	if dot0 {
		limit = p - 1
	}
	if exp < -4 || exp >= limit {
		return scientific(digits, exp, upper)
	}
	return positional(digits, exp, dot0)
}

// formatFloat is Python's float.__format__(v, spec).
func formatFloat(v float64, sp formatSpec) string {
	upper := sp.typ == 'E' || sp.typ == 'F' || sp.typ == 'G'
	neg := math.Signbit(v) && !math.IsNaN(v) // Python never prints a NaN's sign
	a := math.Abs(v)
	if sp.typ == '%' {
		a *= 100 // before the inf check: Python scales first, so 1e307 prints "inf%"
	}
	prec := sp.prec
	if prec < 0 && sp.typ != 0 {
		prec = 6
	}
	var body string
	switch {
	case math.IsNaN(a) || math.IsInf(a, 0):
		body = "inf"
		if math.IsNaN(a) {
			body = "nan"
		}
		if upper {
			body = strings.ToUpper(body)
		}
		if sp.typ == '%' {
			body += "%"
		}
	case sp.typ == 0 && prec < 0: // repr
		digits, exp := splitE(strconv.FormatFloat(a, 'e', -1, 64))
		if exp < -4 || exp >= 16 {
			body = scientific(digits, exp, false)
		} else {
			body = positional(digits, exp, true)
		}
	case sp.typ == 0:
		body = generalFormat(a, prec, true, false)
	case sp.typ == 'g' || sp.typ == 'G':
		body = generalFormat(a, prec, false, upper)
	case sp.typ == 'e' || sp.typ == 'E':
		body = strconv.FormatFloat(a, 'e', prec, 64)
		if upper {
			body = strings.ToUpper(body)
		}
	case sp.typ == '%':
		body = strconv.FormatFloat(a, 'f', prec, 64) + "%"
	default: // f F
		body = strconv.FormatFloat(a, 'f', prec, 64)
	}
	if mantissa, _, _ := strings.Cut(strings.ToLower(body), "e"); sp.z && neg && strings.Trim(mantissa, "0.%") == "" {
		neg = false // 'z': a negative zero after rounding prints unsigned
	}
	return padNumber(neg, group(body, sp.group, 3), sp)
}

// formatInt is Python's int.__format__ for the integer types (d b o x X and none).
func formatInt(neg bool, mag uint64, sp formatSpec) string {
	base, every := 10, 3
	switch sp.typ {
	case 'b':
		base, every = 2, 4
	case 'o':
		base, every = 8, 4
	case 'x', 'X':
		base, every = 16, 4
	}
	body := strconv.FormatUint(mag, base)
	if sp.typ == 'X' {
		body = strings.ToUpper(body)
	}
	return padNumber(neg, group(body, sp.group, every), sp)
}

// group inserts sep every `every` digits into the leading digits of body.
func group(body string, sep byte, every int) string {
	if sep == 0 {
		return body
	}
	digit := "0123456789"
	if every == 4 { // b, o, x, X: the whole body is digits
		digit += "abcdefABCDEF"
	}
	n := 0
	for n < len(body) && strings.IndexByte(digit, body[n]) >= 0 {
		n++
	}
	digits := body[:n]
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%every == 0 {
			b.WriteByte(sep)
		}
		b.WriteRune(c)
	}
	return b.String() + body[n:]
}

// padNumber adds the sign and pads to the width (numbers align right by default; '=' pads
// between the sign and the digits).
func padNumber(neg bool, body string, sp formatSpec) string {
	sign := ""
	switch {
	case neg:
		sign = "-"
	case sp.sign == '+':
		sign = "+"
	case sp.sign == ' ':
		sign = " "
	}
	align := sp.numberAlign()
	if align == '=' {
		return sign + padding(sp, sign+body) + body
	}
	return pad(sign+body, sp, align)
}

// numberAlign is a number's alignment: as given, else '=' with the '0' flag, else right.
func (sp formatSpec) numberAlign() byte {
	switch {
	case sp.align != 0:
		return sp.align
	case sp.zero:
		return '='
	}
	return '>'
}

// formatString is Python's str.__format__ (validString ran): precision truncates, default
// alignment left.
func formatString(s string, sp formatSpec) string {
	if sp.prec >= 0 && utf8.RuneCountInString(s) > sp.prec {
		s = string([]rune(s)[:sp.prec])
	}
	align := sp.align
	if align == 0 {
		align = '<'
	}
	return pad(s, sp, align)
}

func pad(s string, sp formatSpec, align byte) string {
	fill := padding(sp, s)
	switch align {
	case '<':
		return s + fill
	case '^':
		left := []rune(fill)[:len([]rune(fill))/2]
		return string(left) + s + string([]rune(fill)[len(left):])
	}
	return fill + s
}

// padding is the fill run that brings s to the spec's width.
func padding(sp formatSpec, s string) string {
	n := sp.width - utf8.RuneCountInString(s)
	if n <= 0 {
		return ""
	}
	fill := sp.fill
	if fill == 0 {
		fill = ' '
	}
	return strings.Repeat(string(fill), n)
}
