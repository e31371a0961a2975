package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FeatureTable is the suite's one feature table (tests/conformance/features.json, beside the
// case directory; the Python and Java runners read the same file): what a case may need beyond
// the core protocol (its "requires" list) with a description each, and the
// ServerMetadata.extensions entries that claim a feature on their own. A server claims the
// features it has; a case needing one it does not claim is not applicable (N/A).
type FeatureTable struct {
	Features   map[string]string `json:"features"`
	Extensions map[string]string `json:"extensions"`
}

// FeaturesFile is where the feature table of a case directory lives: features.json beside it.
func FeaturesFile(caseDir string) string {
	return filepath.Join(filepath.Dir(filepath.Clean(caseDir)), "features.json")
}

// LoadFeatures reads a feature table.
func LoadFeatures(path string) (FeatureTable, error) {
	var t FeatureTable
	raw, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	if len(t.Features) == 0 {
		return t, fmt.Errorf("%s: no features", path)
	}
	return t, nil
}

// Names is every feature name, sorted.
func (t FeatureTable) Names() []string {
	known := make([]string, 0, len(t.Features))
	for k := range t.Features {
		known = append(known, k)
	}
	sort.Strings(known)
	return known
}

// ParseFeatures reads --features: "all" (nil: every case applies), "core" or "" (nothing beyond
// the core protocol), or a comma list of feature names.
func (t FeatureTable) ParseFeatures(text string) (map[string]bool, error) {
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
		if _, ok := t.Features[f]; !ok {
			unknown = append(unknown, f)
			continue
		}
		claimed[f] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown feature(s) %v; known: core, all, %s", unknown, strings.Join(t.Names(), ", "))
	}
	return claimed, nil
}

// AddExtensions adds the features that ServerMetadata.extensions entries claim.
func (t FeatureTable) AddExtensions(claimed map[string]bool, extensions []string) {
	for _, x := range extensions {
		if f, ok := t.Extensions[x]; ok {
			claimed[f] = true
		}
		if _, ok := t.Features[x]; ok {
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
