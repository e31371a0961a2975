package engine

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInstallPrefixes(t *testing.T) {
	for _, c := range []struct {
		exe  string
		want []string
	}{
		// The platform wheel's front in a venv, a --user install, Debian's system Python.
		{"/v/lib/python3.13/site-packages/jaxport/bridge/bin/jaxport-front", []string{"/v"}},
		{"/home/u/.local/lib/python3.12/site-packages/jaxport/bridge/bin/jaxport-front", []string{"/home/u/.local"}},
		{"/usr/local/lib/python3/dist-packages/jaxport/bridge/bin/jaxport-front", []string{"/usr/local"}},
		{"/usr/lib64/python3.13/site-packages/jaxport/bridge/bin/jaxport-front", []string{"/usr"}},
		// A bin directory: a venv's, an image's.
		{"/work/.venv/bin/jaxport-front", []string{"/work/.venv"}},
		{"/usr/local/bin/jaxport-front", []string{"/usr/local"}},
		// Neither: a front somewhere else has no installation prefix.
		{"/tmp/x/jaxport-front", nil},
		{"", nil},
	} {
		if got := InstallPrefixes(c.exe); !slices.Equal(got, c.want) {
			t.Errorf("InstallPrefixes(%q) = %q, want %q", c.exe, got, c.want)
		}
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The order: the checkout's build/pjrt (working directory, then the executable's directory and
// three parents), then what `jaxport pjrt install cpu` put under the installation prefix.
func TestCPUCandidatesOrder(t *testing.T) {
	root := t.TempDir()
	venv := filepath.Join(root, "venv")
	exe := filepath.Join(venv, "lib", "python3.13", "site-packages", "jaxport", "bridge", "bin", "jaxport-front")
	wd := filepath.Join(root, "wd")
	got := cpuCandidates(wd, exe)
	bin := filepath.Dir(exe)
	want := []string{
		filepath.Join(wd, CPUPluginDir, CPUPluginFile),
		filepath.Join(bin, CPUPluginDir, CPUPluginFile),
		filepath.Join(filepath.Dir(bin), CPUPluginDir, CPUPluginFile),
		filepath.Join(filepath.Dir(filepath.Dir(bin)), CPUPluginDir, CPUPluginFile),
		filepath.Join(filepath.Dir(filepath.Dir(filepath.Dir(bin))), CPUPluginDir, CPUPluginFile),
		filepath.Join(venv, "share", "jaxport", "pjrt", "cpu", CPUPluginFile),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("cpuCandidates:\n got %q\nwant %q", got, want)
	}
}

// resolve("cpu"): the installed plugin under the executable's prefix is found when the checkout
// has none; the checkout's build/pjrt wins over it; without either, the error names what to
// run and every place looked at.
func TestResolveCPU(t *testing.T) {
	root := t.TempDir()
	venv := filepath.Join(root, "venv")
	exe := filepath.Join(venv, "lib", "python3.13", "site-packages", "jaxport", "bridge", "bin", "jaxport-front")
	wd := filepath.Join(root, "wd")
	installed := filepath.Join(venv, "share", "jaxport", "pjrt", "cpu", CPUPluginFile)
	_, err := resolve("cpu", wd, exe)
	want := "no CPU PJRT plugin: build/pjrt/pjrt_c_api_cpu_plugin.so not found under the working " +
		"directory or the executable's, nor at " + installed + " (run `jaxport pjrt install cpu`; " +
		"in a checkout, run `make pjrt-plugin`; or name one with --pjrt-plugin PATH or JAXPORT_PJRT_PLUGIN)"
	if err == nil || err.Error() != want {
		t.Fatalf("resolve(cpu) with nothing installed: %v\nwant %s", err, want)
	}
	touch(t, installed)
	if got, err := resolve("cpu", wd, exe); err != nil || got != installed {
		t.Fatalf("resolve(cpu) = %q, %v; want %s", got, err, installed)
	}
	checkout := filepath.Join(wd, CPUPluginDir, CPUPluginFile)
	touch(t, checkout)
	if got, err := resolve("", wd, exe); err != nil || got != checkout {
		t.Fatalf("resolve(\"\") = %q, %v; want %s", got, err, checkout)
	}
	// A front outside any prefix: the error has no "nor at" part.
	_, err = resolve("cpu", filepath.Join(root, "elsewhere"), filepath.Join(root, "x", "jaxport-front"))
	if err == nil || !strings.Contains(err.Error(), "executable's (run `jaxport pjrt install cpu`;") {
		t.Fatalf("resolve(cpu) away from any prefix: %v", err)
	}
}

// resolve("cuda"): the plugin `jaxport pjrt install cuda` put under the prefix, with XLA's CUDA
// data dir set to its nvcc wheel (the NVIDIA libraries this fake install lacks are logged, not
// fatal); without an install, gopjrt's own search ("cuda").
func TestResolveCUDA(t *testing.T) {
	root := t.TempDir()
	exe := filepath.Join(root, "prefix", "bin", "jaxport-front")
	if got, err := resolve("cuda", root, exe); err != nil || got != "cuda" {
		t.Fatalf("resolve(cuda) without an install = %q, %v", got, err)
	}
	dir := filepath.Join(root, "prefix", "share", "jaxport", "pjrt", "cuda")
	so := filepath.Join(dir, CUDAPluginFile)
	touch(t, so)
	t.Setenv("GOPJRT_CUDA_CHECKS", "")
	t.Setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
	if got, err := resolve("cuda", root, exe); err != nil || got != so {
		t.Fatalf("resolve(cuda) = %q, %v; want %s", got, err, so)
	}
	want := "--xla_dump_to=/tmp/x --xla_gpu_cuda_data_dir=" + filepath.Join(dir, "nvidia", "cuda_nvcc")
	if got := os.Getenv("XLA_FLAGS"); got != want {
		t.Fatalf("XLA_FLAGS = %q, want %q", got, want)
	}
	t.Setenv("XLA_FLAGS", "--xla_gpu_cuda_data_dir=/opt/cuda")
	if _, err := resolve("cuda", root, exe); err != nil || os.Getenv("XLA_FLAGS") != "--xla_gpu_cuda_data_dir=/opt/cuda" {
		t.Fatalf("a data dir in XLA_FLAGS is kept: %q, %v", os.Getenv("XLA_FLAGS"), err)
	}
	// The same install named by path (`jaxport pjrt install cuda --dir DIR`): readied when DIR
	// holds the install's record, left alone otherwise.
	t.Setenv("XLA_FLAGS", "")
	if got, err := resolve(so, root, ""); err != nil || got != so || os.Getenv("XLA_FLAGS") != "" {
		t.Fatalf("resolve(%s) without a record = %q, %v, XLA_FLAGS %q", so, got, err, os.Getenv("XLA_FLAGS"))
	}
	touch(t, filepath.Join(dir, installRecord))
	if got, err := resolve(so, root, ""); err != nil || got != so ||
		os.Getenv("XLA_FLAGS") != "--xla_gpu_cuda_data_dir="+filepath.Join(dir, "nvidia", "cuda_nvcc") {
		t.Fatalf("resolve(%s) with a record = %q, %v, XLA_FLAGS %q", so, got, err, os.Getenv("XLA_FLAGS"))
	}
}

func TestResolvePath(t *testing.T) {
	dir := t.TempDir()
	so := filepath.Join(dir, "p.so")
	touch(t, so)
	t.Chdir(dir)
	if got, err := ResolvePlugin("p.so"); err != nil || got != so {
		t.Fatalf("ResolvePlugin(p.so) = %q, %v", got, err)
	}
	_, err := ResolvePlugin("missing.so")
	if err == nil || err.Error() != "PJRT plugin missing.so: not a file (--pjrt-plugin takes cpu, cuda or a path)" {
		t.Fatalf("ResolvePlugin(missing.so) = %v", err)
	}
	t.Setenv(PluginEnv, so)
	if got, err := ResolvePlugin(""); err != nil || got != so {
		t.Fatalf("ResolvePlugin(\"\") with %s=%s: %q, %v", PluginEnv, so, got, err)
	}
}
