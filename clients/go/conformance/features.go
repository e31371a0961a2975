package conformance

import (
	"fmt"
	"sort"
	"strings"
)

// Features are what a case may need beyond the core protocol (its "requires" list). A server
// claims the features it has; a case needing one it does not claim is not applicable (N/A).
var Features = map[string]string{
	"jaxport-models": "the suite models of models.py served under their names (cf_fp32, ...)",
	"versions":       "model versions: version '1' listed and addressable, an unknown one NOT_FOUND",
	"bf16":           "the BF16 datatype",
	"triton-stream":  "Triton's ModelStreamInfer",
	"triton-config":  "Triton's model configuration extension",
	"triton-shm":     "Triton's system shared memory extension",
	"classification": "Triton's classification extension",
	"checkify":       "runtime checks: a tripped check is INVALID_ARGUMENT with JAX's message",
}

// ExtensionFeatures maps ServerMetadata.extensions entries to the feature each one claims.
var ExtensionFeatures = map[string]string{
	"model_configuration":  "triton-config",
	"system_shared_memory": "triton-shm",
	"classification":       "classification",
}

// ParseFeatures reads --features: "all" (nil: every case applies), "core" or "" (nothing beyond
// the core protocol), or a comma list of Features names.
func ParseFeatures(text string) (map[string]bool, error) {
	text = strings.TrimSpace(text)
	if text == "all" {
		return nil, nil
	}
	claimed := map[string]bool{}
	var unknown []string
	for _, f := range strings.Split(text, ",") {
		f = strings.TrimSpace(f)
		if f == "" || f == "core" {
			continue
		}
		if _, ok := Features[f]; !ok {
			unknown = append(unknown, f)
			continue
		}
		claimed[f] = true
	}
	if len(unknown) > 0 {
		known := make([]string, 0, len(Features))
		for k := range Features {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("unknown feature(s) %v; known: core, all, %s", unknown, strings.Join(known, ", "))
	}
	return claimed, nil
}

// AddExtensions adds the features that ServerMetadata.extensions entries claim.
func AddExtensions(claimed map[string]bool, extensions []string) {
	for _, x := range extensions {
		if f, ok := ExtensionFeatures[x]; ok {
			claimed[f] = true
		}
		if _, ok := Features[x]; ok {
			claimed[x] = true
		}
	}
}

// Missing is the features case c needs that claimed lacks (nil claimed: none missing).
func Missing(c Case, claimed map[string]bool) []string {
	if claimed == nil {
		return nil
	}
	var out []string
	for _, f := range c.Requires {
		if !claimed[f] {
			out = append(out, f)
		}
	}
	return out
}
