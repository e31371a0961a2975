package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// PluginEnv names the plugin when no flag does: cpu, cuda or a path (as --pjrt-plugin).
const PluginEnv = "JAXPORT_PJRT_PLUGIN"

// CPUPluginFile is XLA's CPU PJRT plugin as `jaxport pjrt install cpu` and `make pjrt-plugin`
// extract it from the pinned wheel (bridge/pjrt.py; docs/native-engine.md, Plugins and pinning).
const CPUPluginFile = "pjrt_c_api_cpu_plugin.so"

// CUDAPluginFile is the official CUDA plugin inside the directory `jaxport pjrt install cuda`
// fills (pip's --target layout of the pinned jax-cuda12-pjrt and NVIDIA wheels).
const CUDAPluginFile = "jax_plugins/xla_cuda12/xla_cuda_plugin.so"

// CPUPluginDir is where `make pjrt-plugin` puts the CPU plugin, relative to the checkout.
const CPUPluginDir = "build/pjrt"

// InstallDir is where `jaxport pjrt install NAME` puts plugin NAME, relative to the
// installation prefix of jaxport (bridge/pjrt.py default_dir): <prefix>/share/jaxport/pjrt/NAME.
const InstallDir = "share/jaxport/pjrt"

// ResolvePlugin turns a plugin choice into what gopjrt loads:
//   - "" : $JAXPORT_PJRT_PLUGIN, else "cpu";
//   - "cpu": build/pjrt/pjrt_c_api_cpu_plugin.so under the working directory, else under the
//     executable's directory or one of its three parents (.venv/bin/jaxport-front in a
//     checkout), else <prefix>/share/jaxport/pjrt/cpu/pjrt_c_api_cpu_plugin.so for the
//     installation prefixes of the executable (InstallPrefixes);
//   - "cuda": <prefix>/share/jaxport/pjrt/cuda/jax_plugins/xla_cuda12/xla_cuda_plugin.so
//     (`jaxport pjrt install cuda`; the NVIDIA libraries its RPATH does not name are loaded
//     first, as jax's own plugin package does, and XLA_FLAGS gets the CUDA data dir of the
//     pinned nvcc wheel), else gopjrt's search for pjrt_c_api_cuda_plugin.so
//     (PJRT_PLUGIN_LIBRARY_PATH, then the system library paths);
//   - anything else: a path to a plugin .so (made absolute; the CUDA plugin of a
//     `jaxport pjrt install cuda --dir DIR` is readied as above).
func ResolvePlugin(choice string) (string, error) {
	if choice == "" {
		choice = os.Getenv(PluginEnv)
	}
	exe, _ := os.Executable()
	wd, _ := os.Getwd()
	return resolve(choice, wd, exe)
}

// resolve is ResolvePlugin for a working directory and an executable's path.
func resolve(choice, wd, exe string) (string, error) {
	switch choice {
	case "", "cpu":
		for _, c := range cpuCandidates(wd, exe) {
			if isFile(c) {
				return c, nil
			}
		}
		return "", fmt.Errorf("no CPU PJRT plugin: %s not found under the working directory or the "+
			"executable's%s (run `jaxport pjrt install cpu`; in a checkout, run `make pjrt-plugin`; "+
			"or name one with --pjrt-plugin PATH or %s)",
			filepath.Join(CPUPluginDir, CPUPluginFile), installedWhere(exe), PluginEnv)
	case "cuda":
		for _, prefix := range InstallPrefixes(exe) {
			dir := filepath.Join(prefix, InstallDir, "cuda")
			if so := filepath.Join(dir, CUDAPluginFile); isFile(so) {
				prepareCUDA(dir)
				return so, nil
			}
		}
		return "cuda", nil
	}
	abs, err := filepath.Abs(choice)
	if err != nil {
		return "", err
	}
	if !isFile(abs) {
		return "", fmt.Errorf("PJRT plugin %s: not a file (--pjrt-plugin takes cpu, cuda or a path)", choice)
	}
	// The CUDA plugin of a `jaxport pjrt install cuda --dir DIR`, named by its path.
	if dir, ok := strings.CutSuffix(abs, string(filepath.Separator)+filepath.FromSlash(CUDAPluginFile)); ok &&
		isFile(filepath.Join(dir, installRecord)) {
		prepareCUDA(dir)
	}
	return abs, nil
}

// installRecord is the file `jaxport pjrt install` writes beside what it installed
// (bridge/pjrt.py RECORD).
const installRecord = "jaxport-pjrt.json"

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

func cpuCandidates(wd, exe string) []string {
	var out []string
	if wd != "" {
		out = append(out, filepath.Join(wd, CPUPluginDir, CPUPluginFile))
	}
	if exe != "" {
		for d, i := filepath.Dir(exe), 0; i < 4; d, i = filepath.Dir(d), i+1 {
			out = append(out, filepath.Join(d, CPUPluginDir, CPUPluginFile))
		}
	}
	for _, prefix := range InstallPrefixes(exe) {
		out = append(out, filepath.Join(prefix, InstallDir, "cpu", CPUPluginFile))
	}
	return out
}

// installedWhere is the error's ", nor at <prefix>/share/jaxport/pjrt/cpu/..." part.
func installedWhere(exe string) string {
	var dirs []string
	for _, prefix := range InstallPrefixes(exe) {
		dirs = append(dirs, filepath.Join(prefix, InstallDir, "cpu", CPUPluginFile))
	}
	if len(dirs) == 0 {
		return ""
	}
	return ", nor at " + strings.Join(dirs, " or ")
}

// sitePackages matches the directory of the front inside jaxport's platform wheel once pip
// installed it: <prefix>/lib/pythonX.Y/site-packages/jaxport/bridge/bin (dist-packages on
// Debian's system Python, lib64 on some distributions).
var sitePackages = regexp.MustCompile(`^(.*)/lib(64)?/python3[.0-9]*/(site|dist)-packages/jaxport/bridge/bin$`)

// InstallPrefixes are the installation prefixes of the executable `exe`, where
// `jaxport pjrt install` puts plugins (<prefix>/share/jaxport/pjrt/NAME, bridge/pjrt.py):
// the prefix of the site-packages holding it (the platform wheel's front: a venv, the user
// base ~/.local, /usr/local), else the parent of a bin/ directory holding it (a venv's bin,
// an image's /usr/local/bin); none for a front elsewhere.
func InstallPrefixes(exe string) []string {
	if exe == "" {
		return nil
	}
	dir := filepath.Dir(exe)
	if m := sitePackages.FindStringSubmatch(filepath.ToSlash(dir)); m != nil {
		return []string{filepath.FromSlash(m[1])}
	}
	if filepath.Base(dir) == "bin" {
		return []string{filepath.Dir(dir)}
	}
	return nil
}

// cudaPreload are the NVIDIA libraries of the pinned wheels that the CUDA plugin's RPATH
// ($ORIGIN/../../nvidia/<lib>/lib for cupti, nvjitlink, cublas, cuda_runtime, cudnn, cufft,
// cusparse, nccl) does not reach, or reaches through a library whose own RUNPATH is wrong
// (cudnn looks for nvrtc under nvidia/nvrtc): loaded first with RTLD_GLOBAL, in the order of
// jax_plugins.xla_cuda12._load_nvidia_libraries (jax 0.12.0.1), so the plugin's later dlopen
// of each soname finds the loaded copy.
var cudaPreload = []string{
	"cuda_runtime/lib/libcudart.so.12",
	"cuda_nvrtc/lib/libnvrtc.so.12",
	"cublas/lib/libcublas.so.12",
	"cublas/lib/libcublasLt.so.12",
	"nccl/lib/libnccl.so.2",
	"cuda_cupti/lib/libcupti.so.12",
	"cusparse/lib/libcusparse.so.12",
	"cusolver/lib/libcusolver.so.11",
	"cufft/lib/libcufft.so.11",
	"nvshmem/lib/libnvshmem_host.so.3",
	"cudnn/lib/libcudnn.so.9",
}

// prepareCUDA readies the plugin installed in dir: the NVIDIA libraries loaded (libraries
// that do not load are logged in one line, as the plugin may not need each for every
// program), gopjrt's layout check off, and XLA's CUDA data dir (ptxas, libdevice) set to the
// pinned nvcc wheel's unless XLA_FLAGS names one.
func prepareCUDA(dir string) {
	var failed []string
	for _, lib := range cudaPreload {
		if err := dlopenGlobal(filepath.Join(dir, "nvidia", lib)); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		slog.Warn("CUDA plugin: NVIDIA libraries did not load (an incomplete install: remove the dir and run `jaxport pjrt install cuda`)",
			"dir", dir, "failed", len(failed), "of", len(cudaPreload), "first", failed[0])
	}
	// gopjrt's own check expects <plugin dir>/../nvidia and would warn about this layout.
	if _, set := os.LookupEnv("GOPJRT_CUDA_CHECKS"); !set {
		_ = os.Setenv("GOPJRT_CUDA_CHECKS", "0")
	}
	flags := os.Getenv("XLA_FLAGS")
	if !strings.Contains(flags, "--xla_gpu_cuda_data_dir") {
		nvcc := filepath.Join(dir, "nvidia", "cuda_nvcc")
		_ = os.Setenv("XLA_FLAGS", strings.TrimSpace(flags+" --xla_gpu_cuda_data_dir="+nvcc))
	}
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
