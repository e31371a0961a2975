package engine

import (
	"fmt"
	"os"
	"path/filepath"
)

// PluginEnv names the plugin when no flag does: cpu, cuda or a path (as --pjrt-plugin).
const PluginEnv = "JAXPORT_PJRT_PLUGIN"

// CPUPluginFile is XLA's CPU PJRT plugin as `make pjrt-plugin` extracts it from the pinned
// wheel (docs/native-engine.md, Plugin pinning).
const CPUPluginFile = "pjrt_c_api_cpu_plugin.so"

// CPUPluginDir is where `make pjrt-plugin` puts it, relative to the checkout.
const CPUPluginDir = "build/pjrt"

// ResolvePlugin turns a plugin choice into what gopjrt loads:
//   - "" : $JAXPORT_PJRT_PLUGIN, else "cpu";
//   - "cpu": build/pjrt/pjrt_c_api_cpu_plugin.so under the working directory, else under the
//     executable's directory or one of its three parents (.venv/bin/jaxport-front in a
//     checkout), else the .so next to the executable;
//   - "cuda": gopjrt's search for pjrt_c_api_cuda_plugin.so (PJRT_PLUGIN_LIBRARY_PATH, then the
//     system library paths); the jax-cuda12-pjrt wheel's .so is better named by its path;
//   - anything else: a path to a plugin .so (made absolute).
func ResolvePlugin(choice string) (string, error) {
	if choice == "" {
		choice = os.Getenv(PluginEnv)
	}
	switch choice {
	case "", "cpu":
		for _, c := range cpuCandidates() {
			if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
				return c, nil
			}
		}
		return "", fmt.Errorf("no CPU PJRT plugin: %s not found under the working directory or the "+
			"executable's (run `make pjrt-plugin`, or name one with --pjrt-plugin PATH or %s)",
			filepath.Join(CPUPluginDir, CPUPluginFile), PluginEnv)
	case "cuda":
		return "cuda", nil
	}
	abs, err := filepath.Abs(choice)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("PJRT plugin %s: not a file (--pjrt-plugin takes cpu, cuda or a path)", choice)
	}
	return abs, nil
}

func cpuCandidates() []string {
	var out []string
	if wd, err := os.Getwd(); err == nil {
		out = append(out, filepath.Join(wd, CPUPluginDir, CPUPluginFile))
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for d, i := dir, 0; i < 4; d, i = filepath.Dir(d), i+1 {
			out = append(out, filepath.Join(d, CPUPluginDir, CPUPluginFile))
		}
		out = append(out, filepath.Join(dir, CPUPluginFile))
	}
	return out
}

// setXLAFlags turns XLA's fast min/max off in this process's XLA_FLAGS (xlaFlags), before a
// plugin parses them.
func setXLAFlags() error {
	flags, err := xlaFlags(os.Getenv("XLA_FLAGS"))
	if err != nil {
		return err
	}
	return os.Setenv("XLA_FLAGS", flags)
}
