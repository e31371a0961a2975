package status

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// How much of a caller-supplied string or shape a message shows (jaxport/protocol/errors.py
// MAX_SHOWN, MAX_SHOWN_DIMS): a hostile name or rank costs one short line.
const (
	MaxShown     = 64
	MaxShownDims = 8
)

// Clip is a caller-supplied string cut to MaxShown characters (code points, as Python counts),
// with its full length when count is set: `abc...(200 chars)`.
func Clip(text string, count bool) string {
	n := utf8.RuneCountInString(text)
	if n <= MaxShown {
		return text
	}
	cut := 0
	for i := 0; i < MaxShown-3; i++ {
		_, size := utf8.DecodeRuneInString(text[cut:])
		cut += size
	}
	if count {
		return fmt.Sprintf("%s...(%d chars)", text[:cut], n)
	}
	return text[:cut] + "..."
}

// ClipN is text cut to n characters ("..." included), as errors.clip(text, n).
func ClipN(text string, n int) string {
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	cut := 0
	for i := 0; i < n-3; i++ {
		_, size := utf8.DecodeRuneInString(text[cut:])
		cut += size
	}
	return text[:cut] + "..."
}

// ClipShape is `[2, 8]`, or the first MaxShownDims dimensions and the rank.
func ClipShape(shape []int64) string {
	if len(shape) <= MaxShownDims {
		return Ints(shape)
	}
	head := Ints(shape[:MaxShownDims])
	return fmt.Sprintf("%s, ...] (%d dimensions)", head[:len(head)-1], len(shape))
}

// Ints is a Python list of ints, `[2, 3]`.
func Ints[T int | int64](v []T) string {
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

// ExactProduct is prod(shape) * factor in decimal, exact at any size (as Python integers).
func ExactProduct(shape []int64, factor int) string {
	n := big.NewInt(int64(factor))
	for _, d := range shape {
		n.Mul(n, big.NewInt(d))
	}
	return n.String()
}

// PyRepr is Python's repr of a str (quotes chosen as Python does; backslash, quote and
// non-printable characters escaped).
func PyRepr(s string) string {
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

// PyList is a Python list of strs, `['a', 'b']`.
func PyList(names []string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = PyRepr(n)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
