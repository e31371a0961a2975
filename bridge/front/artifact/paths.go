package artifact

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
)

// The ONE rule for paths inside an artifact or a repository (as clients/python/artifact/paths.py
// has it): every path a manifest names and every model or version directory a repository serves
// goes through CheckRelative (the path as written) and, on the file system, ResolveInside (where
// it actually leads, symlinks followed).
//
// Trust boundary: a manifest is data from the artifact's producer. These rules keep what it
// names inside the artifact directory (no absolute path, no `..`, no backslash or NUL, no
// symlink leading outside); they say nothing about the safety of the programs themselves.

// CheckRelative refuses rel unless it is a relative POSIX path that cannot climb out; `what`
// names it in the error.
func CheckRelative(rel, what string) error {
	if rel == "" || strings.ContainsAny(rel, "\\\x00") || strings.HasPrefix(rel, "/") {
		return errorf(what + ": path " + status.PyRepr(rel) + " is not a relative path inside the artifact")
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return errorf(what + ": path " + status.PyRepr(rel) + " contains '..'; refused")
		}
	}
	return nil
}

// ResolveInside is base/rel with every symlink on the way followed (as far as the path
// exists), refused when rel breaks CheckRelative or leads outside base.
func ResolveInside(base, rel, what string) (string, error) {
	if err := CheckRelative(rel, what); err != nil {
		return "", err
	}
	root := resolve(base)
	target := resolve(filepath.Join(base, filepath.FromSlash(rel)))
	if !inside(root, target) {
		return "", errorf(what + ": path " + status.PyRepr(rel) + " resolves outside " +
			filepath.Base(filepath.Clean(base)) + "/; refused")
	}
	return target, nil
}

// inside says whether target is root or below it.
func inside(root, target string) bool {
	if target == root {
		return true
	}
	prefix := root
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	return strings.HasPrefix(target, prefix)
}

// resolve is Python's Path.resolve(strict=False): the absolute path with every symlink
// followed as far as the path exists (a dangling symlink to its target), the rest appended as
// written.
func resolve(path string) string { return resolveDepth(path, 0) }

func resolveDepth(path string, depth int) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	var rest []string
	for p := abs; ; {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{real}, reversed(rest)...)...)
		}
		if st, lerr := os.Lstat(p); lerr == nil && st.Mode()&fs.ModeSymlink != 0 && depth < 40 {
			// A symlink whose target does not exist (yet): where it points is where it leads.
			if target, rerr := os.Readlink(p); rerr == nil {
				if !filepath.IsAbs(target) {
					target = filepath.Join(filepath.Dir(p), target)
				}
				return resolveDepth(filepath.Join(append([]string{target}, reversed(rest)...)...), depth+1)
			}
		}
		parent := filepath.Dir(p)
		if parent == p {
			return abs
		}
		rest = append(rest, filepath.Base(p))
		p = parent
	}
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
