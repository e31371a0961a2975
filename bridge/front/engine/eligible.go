package engine

import (
	"fmt"
	"slices"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Eligible says why the engine cannot run a model on a plugin of `platform` (one line, no model
// name: Refused adds it), or "" when it can. The engine runs fixed-shape programs on one device;
// everything else stays with the Python workers:
//   - a sharded program (nrDevices > 1),
//   - a model whose only program is shape-polymorphic (only its .jaxexport runs, under jax),
//   - custom calls (no compatibility promise; the plugin may not provide the kernel),
//   - token arguments (ordered effects),
//   - a model not lowered for the plugin's platform,
//   - a check table whose messages the Go formatter cannot reproduce exactly (NewChecks).
//
// Checked models (checkify results) run: Execute returns the raw check results in @main
// order; NewChecks(m.Checks, program.Results).Failure turns them into the status and JAX's
// message as the Python path gives them (checks.go, docs/native-engine.md).
func Eligible(m *jaxportv1.Manifest, platform string) string {
	if n := m.GetNrDevices(); n > 1 {
		return fmt.Sprintf("sharded program for %d devices (mesh %s): the native engine runs one device",
			n, meshText(m))
	}
	if !slices.Contains(m.GetPlatforms(), platform) {
		return fmt.Sprintf("lowered for %v, the PJRT plugin runs %s", m.GetPlatforms(), platform)
	}
	fixed := 0
	for _, p := range m.GetPrograms() {
		if p.GetPolymorphic() {
			continue
		}
		fixed++
		if t := p.GetCustomCallTargets(); len(t) > 0 {
			return fmt.Sprintf("%s has custom calls %s (no kernel promise for a PJRT plugin)",
				p.GetMlirbcFile(), strings.Join(t, ", "))
		}
		for _, a := range p.GetArguments() {
			if a.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_TOKEN {
				return fmt.Sprintf("%s takes token argument %s (ordered effects)", p.GetMlirbcFile(), a.GetName())
			}
		}
		if _, err := NewChecks(m.GetChecks(), p.GetResults()); err != nil {
			return fmt.Sprintf("%s: check table: %v", p.GetMlirbcFile(), err)
		}
	}
	if fixed == 0 {
		return "shape-polymorphic program only (no --buckets): only model.jaxexport runs it, under jax"
	}
	return ""
}

func meshText(m *jaxportv1.Manifest) string {
	axes := make([]string, 0, len(m.GetMesh().GetAxes()))
	for _, a := range m.GetMesh().GetAxes() {
		axes = append(axes, fmt.Sprintf("%s=%d", a.GetName(), a.GetSize()))
	}
	return strings.Join(axes, ",")
}
