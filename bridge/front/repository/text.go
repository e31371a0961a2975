package repository

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/artifact"
)

// rootText makes messages public: the repository's root, in every form it can appear in them
// (as given, absolute, resolved, optionally as a file:// URL; or its URL) and followed by a
// slash, is dropped, so a caller sees paths relative to the repository (mlp/1/weights/...).
type rootText struct {
	forms []string // longest first, each ending with "/"
}

func newRootText(root artifact.Store) *rootText {
	var forms []string
	if dir := root.Local(); dir != "" {
		seen := map[string]bool{}
		add := func(p string) {
			p = strings.TrimRight(p, "/")
			if p != "" && !seen[p] {
				seen[p] = true
				forms = append(forms, p+"/")
			}
		}
		add(dir)
		if abs, err := filepath.Abs(dir); err == nil {
			add(abs)
			if real, err := filepath.EvalSymlinks(abs); err == nil {
				add(real)
			}
		}
	} else {
		forms = []string{strings.TrimRight(root.Display(""), "/") + "/"}
	}
	sort.SliceStable(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	return &rootText{forms: forms}
}

// wordByte: a byte that, before a root form, makes it part of another path (Python's
// (?<![\w.~-]) lookbehind; bytes of multi-byte characters count as word characters).
func wordByte(c byte) bool {
	return c >= 0x80 || c == '_' || c == '.' || c == '~' || c == '-' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// public is msg with every root form (and a file:// before it) dropped.
func (t *rootText) public(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); {
		if i == 0 || !wordByte(msg[i-1]) {
			if n := t.match(msg[i:]); n > 0 {
				i += n
				continue
			}
		}
		b.WriteByte(msg[i])
		i++
	}
	return b.String()
}

// match is the length of the root form (with an optional file:// before it) msg starts with,
// 0 for none.
func (t *rootText) match(msg string) int {
	for _, prefix := range []string{"file://", ""} {
		if !strings.HasPrefix(msg, prefix) {
			continue
		}
		for _, f := range t.forms {
			if strings.HasPrefix(msg[len(prefix):], f) {
				return len(prefix) + len(f)
			}
		}
	}
	return 0
}
