package main

// The front's packages and the one direction of their dependencies, asserted with `go list`:
// every package of the module has a layer, and imports (directly or not) only packages of
// lower layers. cmd/jaxport-front wires them all.
//
//	7  cmd/jaxport-front, cmd/jaxport-native-goldens
//	6  rest
//	5  server
//	4  dispatch
//	3  native, repository
//	2  request, engine, artifact/artifacttest
//	1  batch, security, compression, telemetry, shm, artifact, workers
//	0  status, config

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/jaxport/jaxport/bridge/front/"

var layers = map[string]int{
	"status": 0, "config": 0,
	"batch": 1, "security": 1, "compression": 1, "telemetry": 1, "shm": 1, "artifact": 1, "workers": 1,
	"request": 2, "engine": 2, "artifact/artifacttest": 2,
	"native": 3, "repository": 3,
	"dispatch":          4,
	"server":            5,
	"rest":              6,
	"cmd/jaxport-front": 7, "cmd/jaxport-native-goldens": 7,
}

func TestDependenciesRunOneWay(t *testing.T) {
	pkgs, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Deps ","}}`, "../../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(pkgs)), "\n") {
		path, deps, _ := strings.Cut(line, "|")
		name := strings.TrimPrefix(path, module)
		layer, ok := layers[name]
		if !ok {
			t.Errorf("package %s has no layer in layout_test.go: give it one", name)
			continue
		}
		for _, dep := range strings.Split(deps, ",") {
			d, own := strings.CutPrefix(dep, module)
			if !own {
				continue
			}
			if l, ok := layers[d]; ok && l >= layer {
				t.Errorf("%s (layer %d) depends on %s (layer %d): dependencies run downwards only", name, layer, d, l)
			}
		}
	}
}
