package artifact_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
)

func TestCheckRelativeRefusesWhatCanClimbOut(t *testing.T) {
	for _, ok := range []string{"model.mlirbc", "weights/p/c/0/0", "a/./b", "x..y"} {
		if err := artifact.CheckRelative(ok, "f"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for rel, want := range map[string]string{
		"":            `f: path '' is not a relative path inside the artifact`,
		"/etc/passwd": `f: path '/etc/passwd' is not a relative path inside the artifact`,
		`a\b`:         `f: path 'a\\b' is not a relative path inside the artifact`,
		"a\x00b":      `f: path 'a\x00b' is not a relative path inside the artifact`,
		"../x":        `f: path '../x' contains '..'; refused`,
		"a/../../x":   `f: path 'a/../../x' contains '..'; refused`,
	} {
		err := artifact.CheckRelative(rel, "f")
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %s", rel, err, want)
		}
	}
}

func TestResolveInsideFollowsSymlinks(t *testing.T) {
	base := filepath.Join(t.TempDir(), "art")
	outside := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(base, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "sub", "f"), []byte("x"), 0o644))
	must(t, os.Symlink(filepath.Join(base, "sub", "f"), filepath.Join(base, "inner")))
	must(t, os.Symlink(outside, filepath.Join(base, "out")))
	must(t, os.Symlink(filepath.Join(outside, "not-yet"), filepath.Join(base, "dangling")))
	for _, rel := range []string{"sub/f", "inner", "sub/missing"} {
		if _, err := artifact.ResolveInside(base, rel, "f"); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
	}
	for _, rel := range []string{"out", "out/file", "dangling"} {
		_, err := artifact.ResolveInside(base, rel, "w")
		want := "w: path '" + rel + "' resolves outside art/; refused"
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v, want %s", rel, err, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if err.Error() != want {
		t.Fatalf("error\n  %s\nwant\n  %s", err, want)
	}
}

func wantPrefix(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %v, want it to start with %q", err, want)
	}
}
