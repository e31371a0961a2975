//go:build cgo

package engine

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// BenchmarkOpenArtifact opens the artifact $JAXPORT_BENCH_ARTIFACT (default: the committed
// back-compat one) once per iteration with every checksum verified and reports, beside the
// weights' GiB/s, the in-run floors that bound it: reading the same chunk files with no
// hashing (read-GiB/s), sha256 on one core (sha256-GiB/s), the process CPU seconds per GiB
// of weights for the whole open (compile included: cpu-s/GiB) and for the weights alone
// (weights-cpu-s/GiB: on an idle machine of C cores the phase takes about that / C), and the
// peak RSS against the weights (run it with -benchtime=1x: the peak is the process's, before
// the weights-alone pass).
//
//	JAXPORT_BENCH_ARTIFACT=/path/to/big/1 go test ./engine -run '^$' -bench OpenArtifact -benchtime=1x
func BenchmarkOpenArtifact(b *testing.B) {
	dir := os.Getenv("JAXPORT_BENCH_ARTIFACT")
	if dir == "" {
		dir = artifacttest.Backcompat()
	}
	t := b
	p := testPlugin(t)
	// Floors, measured first in this run: the chunk files read into one buffer, and sha256.
	a := openAt(t, dir)
	var files []string
	for _, f := range a.Manifest.GetFiles() {
		if strings.HasPrefix(f.GetPath(), "weights/") && !strings.HasSuffix(f.GetPath(), "zarr.json") {
			files = append(files, filepath.Join(dir, f.GetPath()))
		}
	}
	buf := make([]byte, 16<<20)
	var total int64
	began := time.Now()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			b.Fatal(err)
		}
		for {
			n, err := fh.Read(buf)
			total += int64(n)
			if err != nil {
				break
			}
		}
		fh.Close()
	}
	readGiBs := float64(total) / (1 << 30) / time.Since(began).Seconds()
	h := sha256.New()
	began = time.Now()
	for range 16 {
		h.Write(buf)
	}
	shaGiBs := float64(16*len(buf)) / (1 << 30) / time.Since(began).Seconds()

	var weights int64
	for _, arg := range a.Manifest.GetPrograms()[0].GetArguments() {
		if arg.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER {
			weights += int64(arg.GetByteSize())
		}
	}
	b.ResetTimer()
	var gibs, cpuPerGiB, seconds float64
	for range b.N {
		a := openAt(t, dir)
		cpu0 := cpuSeconds()
		m, err := OpenArtifact(ctx, p, a, "bench")
		if err != nil {
			b.Fatal(err)
		}
		cpuPerGiB += (cpuSeconds() - cpu0) / (float64(weights) / (1 << 30))
		gibs += m.Load.GiBPerSecond
		seconds += m.Load.Seconds
		m.Close()
	}
	rss := float64(peakRSS()) / float64(max(weights, 1))
	// The weights alone (no plugin, no compile): every parameter read, hashed twice (its chunk
	// files, its array) into populated memory, all at once: the CPU that bounds the phase.
	plans, err := planAll(ctx, a, paramArgs(a.Manifest), 4)
	if err != nil {
		b.Fatal(err)
	}
	cpu0, wall0 := cpuSeconds(), time.Now()
	r := newWeightReader(a, 0)
	errs := make(chan error, len(plans))
	for _, plan := range plans {
		go func() {
			mem, err := syscall.Mmap(-1, 0, int(plan.size), syscall.PROT_READ|syscall.PROT_WRITE,
				syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_POPULATE)
			if err == nil {
				err = r.read(ctx, plan, mem)
				_ = syscall.Munmap(mem)
			}
			errs <- err
		}()
	}
	for range plans {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	weightsCPU := (cpuSeconds() - cpu0) / (float64(weights) / (1 << 30))
	weightsAlone := float64(weights) / (1 << 30) / time.Since(wall0).Seconds()

	n := float64(b.N)
	b.ReportMetric(weightsCPU, "weights-cpu-s/GiB")
	b.ReportMetric(weightsAlone, "weights-alone-GiB/s")
	b.ReportMetric(gibs/n, "weights-GiB/s")
	b.ReportMetric(seconds/n, "open-s")
	b.ReportMetric(readGiBs, "read-GiB/s")
	b.ReportMetric(shaGiBs, "sha256-GiB/s")
	b.ReportMetric(cpuPerGiB/n, "cpu-s/GiB")
	b.ReportMetric(rss, "peakRSS/weights")
}

func paramArgs(m *jaxportv1.Manifest) []*jaxportv1.Argument {
	var out []*jaxportv1.Argument
	for _, arg := range m.GetPrograms()[0].GetArguments() {
		if arg.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER {
			out = append(out, arg)
		}
	}
	return out
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// peakRSS is the process's peak resident set (VmHWM) in bytes.
func peakRSS() int64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
