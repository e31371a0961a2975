package dispatch

// Tests of gate.go: the same file protocol as bridge/testing.py (hold file, entered/left
// markers named <model>.<state>.<pid>.<n>, release by removing the hold file, the safety
// bound). The test releases the gate itself; held executions are observed through their
// markers and a done channel, polled with a generous bound.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

// gateInDir is an enabled gate on a fresh directory whose log the test reads.
func gateInDir(t *testing.T) (*testGate, *syncBuffer) {
	t.Helper()
	var buf syncBuffer
	return &testGate{dir: t.TempDir(), pid: os.Getpid(), safety: gateSafety,
		log: slog.New(slog.NewTextHandler(&buf, nil))}, &buf
}

// markers lists the directory's file names, sorted.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

// touch creates path (the test's side of the protocol: tests/support/gate.py hold()).
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitAsync runs g.wait(model) in a goroutine; the channel closes when it returns.
func waitAsync(g *testGate, model string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		g.wait(context.Background(), model)
		close(done)
	}()
	return done
}

func TestGateWithoutHoldFileRunsAtOnceAndLeavesNoMarker(t *testing.T) {
	g, buf := gateInDir(t)
	touch(t, filepath.Join(g.dir, "other.hold")) // holds another model only
	g.wait(context.Background(), "m")
	if got := markers(t, g.dir); len(got) != 1 || got[0] != "other.hold" {
		t.Fatalf("directory holds %v, want only other.hold", got)
	}
	if buf.String() != "" {
		t.Fatalf("an unheld execution logged %q", buf.String())
	}
}

func TestGateHoldsUntilTheHoldFileIsRemoved(t *testing.T) {
	g, buf := gateInDir(t)
	hold := filepath.Join(g.dir, "m.hold")
	touch(t, hold)
	first, second := waitAsync(g, "m"), waitAsync(g, "m")
	pid := os.Getpid()
	// Each held execution announces itself with its own marker: <pid>.0 and <pid>.1.
	entered := []string{fmt.Sprintf("m.entered.%d.0", pid), fmt.Sprintf("m.entered.%d.1", pid)}
	waitFor(t, "both executions held", func() bool {
		got := markers(t, g.dir)
		return len(got) == 3 && got[0] == entered[0] && got[1] == entered[1] && got[2] == "m.hold"
	})
	for _, done := range []<-chan struct{}{first, second} {
		select {
		case <-done:
			t.Fatal("an execution passed the gate while m.hold exists")
		default:
		}
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	for _, done := range []<-chan struct{}{first, second} {
		select {
		case <-done:
		case <-time.After(admissionWaitBound):
			t.Fatalf("execution still held %s after m.hold was removed", admissionWaitBound)
		}
	}
	want := []string{entered[0], entered[1],
		fmt.Sprintf("m.left.%d.0", pid), fmt.Sprintf("m.left.%d.1", pid)}
	if got := markers(t, g.dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("markers %v, want %v", got, want)
	}
	// Numbering goes on within the process: the next held execution is <pid>.2.
	touch(t, hold)
	third := waitAsync(g, "m")
	waitFor(t, "the third execution held", func() bool {
		_, err := os.Stat(filepath.Join(g.dir, fmt.Sprintf("m.entered.%d.2", pid)))
		return err == nil
	})
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	<-third
	for _, line := range []string{"test gate: execution held", "test gate: execution released"} {
		if n := strings.Count(buf.String(), line); n != 3 {
			t.Fatalf("log has %d lines %q, want 3: %s", n, line, buf.String())
		}
	}
}

func TestGateCallWhoseDeadlinePassesWhileHeldFailsAtOnceAndStaysHeldUntilRelease(t *testing.T) {
	g, buf := gateInDir(t)
	hold := filepath.Join(g.dir, "m.hold")
	touch(t, hold)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := g.wait(ctx, "m") // returns at the deadline although m.hold is still there
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("held past its deadline: %v, want DEADLINE_EXCEEDED naming the deadline", err)
	}
	pid := os.Getpid()
	// Still counted held (entered, not left), as a held worker's execution, until the release.
	want := []string{fmt.Sprintf("m.entered.%d.0", pid), "m.hold"}
	if got := markers(t, g.dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("markers %v, want %v", got, want)
	}
	assertLogged(t, buf, fmt.Sprintf(`msg="test gate: the held execution's call ended; it will not run" model=m tag=%d.0 error="context deadline exceeded"`, pid))
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(g.dir, fmt.Sprintf("m.left.%d.0", pid))
	waitFor(t, "the abandoned execution marked left after the release", func() bool {
		_, err := os.Stat(left)
		return err == nil
	})
}

func TestGateProceedsAfterTheSafetyBoundAndLogsAnError(t *testing.T) {
	g, buf := gateInDir(t)
	g.safety = time.Nanosecond // a test that died holding the gate, 120 s later
	touch(t, filepath.Join(g.dir, "m.hold"))
	g.wait(context.Background(), "m") // returns although m.hold is still there
	pid := os.Getpid()
	want := []string{fmt.Sprintf("m.entered.%d.0", pid), "m.hold", fmt.Sprintf("m.left.%d.0", pid)}
	if got := markers(t, g.dir); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("markers %v, want %v", got, want)
	}
	line := fmt.Sprintf(`level=ERROR msg="test gate: hold file still there after the safety bound; proceeding" model=m tag=%d.0 seconds=1e-09`, pid)
	assertLogged(t, buf, line)
}

func TestGateMarkerThatCannotBeCreatedIsLoggedAndTheExecutionGoesOn(t *testing.T) {
	g, buf := gateInDir(t)
	g.safety = time.Nanosecond
	touch(t, filepath.Join(g.dir, "m.hold"))
	// A directory where the entered marker would go: it cannot be created as a file.
	entered := filepath.Join(g.dir, fmt.Sprintf("m.entered.%d.0", os.Getpid()))
	if err := os.Mkdir(entered, 0o700); err != nil {
		t.Fatal(err)
	}
	g.wait(context.Background(), "m")
	for _, want := range []string{`level=ERROR msg="test gate: cannot create its marker" model=m state=entered`,
		"is a directory"} {
		assertLogged(t, buf, want)
	}
}

func TestGateIsReadFromTheEnvironmentAndOffWithoutIt(t *testing.T) {
	t.Setenv(gateEnv, "")
	if g := testGateFromEnv(); g != nil {
		t.Fatalf("gate enabled with %s empty: %+v", gateEnv, g)
	}
	dir := t.TempDir()
	t.Setenv(gateEnv, dir)
	g := testGateFromEnv()
	if g == nil || g.dir != dir || g.pid != os.Getpid() || g.safety != 120*time.Second {
		t.Fatalf("gate from %s=%s: %+v", gateEnv, dir, g)
	}
	// gateWait goes through the process's gate: off, nothing happens; on, it holds.
	saved := theTestGate
	defer func() { theTestGate = saved }()
	theTestGate = nil
	touch(t, filepath.Join(dir, "m.hold"))
	gateWait(context.Background(), "m")
	if got := markers(t, dir); len(got) != 1 {
		t.Fatalf("a disabled gate touched its directory: %v", got)
	}
	g.safety = time.Nanosecond
	g.log = slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	theTestGate = g
	gateWait(context.Background(), "m")
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("m.left.%d.0", os.Getpid()))); err != nil {
		t.Fatalf("gateWait did not go through the enabled gate: %v", err)
	}
}
