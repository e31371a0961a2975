package engine

import (
	"strings"
	"testing"
)

func TestWindowAdmits(t *testing.T) {
	w, err := windowFromAttributes(map[string]any{
		"stablehlo_minimum_version": []int64{0, 9, 0}, "stablehlo_current_version": []int64{1, 20, 0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"0.9.0", "1.18.0", "1.20.0"} {
		if err := w.Admits(ok, "cpu.so"); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"0.8.9", "1.20.1", "2.0.0"} {
		err := w.Admits(bad, "cpu.so")
		want := "StableHLO target " + bad + " is outside the window 0.9.0..1.20.0 of the PJRT plugin cpu.so"
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v", bad, err)
		}
	}
	if err := w.Admits("1.18", "cpu.so"); err == nil || !strings.Contains(err.Error(), "not major.minor.patch") {
		t.Errorf("got %v", err)
	}
	if _, err := windowFromAttributes(map[string]any{}); err == nil ||
		!strings.Contains(err.Error(), "no stablehlo_minimum_version attribute") {
		t.Errorf("got %v", err)
	}
}

func TestXLAFlagsTurnFastMinMaxOff(t *testing.T) {
	for in, want := range map[string]string{
		"":                                    "--xla_cpu_enable_fast_min_max=false",
		"--xla_dump_to=/tmp/d":                "--xla_dump_to=/tmp/d --xla_cpu_enable_fast_min_max=false",
		"--xla_cpu_enable_fast_min_max=false": "--xla_cpu_enable_fast_min_max=false",
	} {
		if got, err := xlaFlags(in); err != nil || got != want {
			t.Errorf("%q: got %q, %v", in, got, err)
		}
	}
	if _, err := xlaFlags("--xla_cpu_enable_fast_min_max=true"); err == nil ||
		!strings.Contains(err.Error(), "needs --xla_cpu_enable_fast_min_max=false") {
		t.Errorf("got %v", err)
	}
}
