package server

import (
	"os"
	"regexp"
	"testing"
)

// Version is jaxport's: the one in pyproject.toml (ServerMetadata says what is installed).
func TestVersionIsJaxports(t *testing.T) {
	raw, err := os.ReadFile("../../../pyproject.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version = "([^"]+)"`).FindSubmatch(raw)
	if m == nil || string(m[1]) != Version {
		t.Fatalf("pyproject.toml version %q, server.Version %q", m, Version)
	}
}
