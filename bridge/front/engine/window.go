package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a StableHLO version, major.minor.patch.
type Version [3]int64

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less orders versions by major, then minor, then patch.
func (v Version) Less(o Version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

// ParseVersion reads "1.18.0" (the manifest's versions.stablehloTarget).
func ParseVersion(s string) (Version, error) {
	var v Version
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, fmt.Errorf("StableHLO version %q is not major.minor.patch", s)
	}
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 {
			return v, fmt.Errorf("StableHLO version %q is not major.minor.patch", s)
		}
		v[i] = n
	}
	return v, nil
}

// Window is the range of StableHLO versions a plugin deserializes (its plugin attributes
// stablehlo_minimum_version and stablehlo_current_version), both ends inclusive.
type Window struct{ Min, Max Version }

func (w Window) String() string { return w.Min.String() + ".." + w.Max.String() }

// Admits checks an artifact's StableHLO target against the window; the error names both.
func (w Window) Admits(target string, plugin string) error {
	v, err := ParseVersion(target)
	if err != nil {
		return err
	}
	if v.Less(w.Min) || w.Max.Less(v) {
		return fmt.Errorf("StableHLO target %s is outside the window %s of the PJRT plugin %s",
			v, w, plugin)
	}
	return nil
}

// windowFromAttributes reads the plugin's window from its attributes (int64 lists).
func windowFromAttributes(attrs map[string]any) (Window, error) {
	var w Window
	for _, a := range []struct {
		key string
		out *Version
	}{{"stablehlo_minimum_version", &w.Min}, {"stablehlo_current_version", &w.Max}} {
		list, ok := attrs[a.key].([]int64)
		if !ok || len(list) != 3 {
			return w, fmt.Errorf("the plugin reports no %s attribute (got %v): its StableHLO window is unknown",
				a.key, attrs[a.key])
		}
		copy(a.out[:], list)
	}
	return w, nil
}

// fastMinMax is the XLA flag that makes the CPU compiler's min/max drop NaN operands (its
// default in the standalone plugin; jaxlib compiles with it off). JAX's semantics need it off.
const fastMinMax = "xla_cpu_enable_fast_min_max"

// xlaFlags returns XLA_FLAGS with fast min/max turned off: the flag appended when absent, kept
// when already false, and an error when the caller's flags turn it on.
func xlaFlags(current string) (string, error) {
	for _, f := range strings.Fields(current) {
		name, value, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if name != fastMinMax {
			continue
		}
		if value != "false" && value != "0" {
			return "", fmt.Errorf("XLA_FLAGS sets %s: the native engine needs --%s=false "+
				"(with it, min/max drop NaN and answers differ from JAX)", f, fastMinMax)
		}
		return current, nil
	}
	return strings.TrimSpace(current + " --" + fastMinMax + "=false"), nil
}
