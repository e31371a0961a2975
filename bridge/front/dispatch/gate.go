package dispatch

// TEST-ONLY hook: a test holds the executions of a model (whichever engine runs it) until it
// releases them; tests/support/gate.py speaks this file protocol.
//
// Enabled only when JAXPORT_TEST_GATE_DIR names a directory when the front starts (read
// once). Then every execution of model M (gateWait, before its program runs; for a model
// that batches, before each batch's execution, which holds every request of the batch) first
// looks for <dir>/M.hold:
//
//   - absent: it runs at once;
//   - present: it creates <dir>/M.entered.<pid>.<n> (a new file per execution), waits until
//     the test removes M.hold (looking every 5 ms), then creates <dir>/M.left.<pid>.<n> and
//     runs. As a safety net against a test that dies holding the gate, it proceeds after
//     120 s and logs an error.
//   - the call's context ends while held (its deadline passed, a drain cut it): the call
//     fails at once with the context's status (DEADLINE_EXCEEDED, CANCELLED) and the
//     execution never runs; it stays counted as held until the test removes M.hold (then
//     M.left.<pid>.<n> as above).
//
// Unset (every real deployment): gateWait is one nil check.
//
// Trust: only whoever starts the front sets its environment. When enabled, anyone who can
// create files in that directory can stall every execution of any model for up to 120 s
// each; it reveals nothing and runs nothing. Never set it outside tests.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
)

const (
	gateEnv    = "JAXPORT_TEST_GATE_DIR"
	gatePoll   = 5 * time.Millisecond
	gateSafety = 120 * time.Second
)

// testGate holds executions of model M while <dir>/M.hold exists.
type testGate struct {
	dir    string
	pid    int
	safety time.Duration
	log    *slog.Logger  // nil: slog.Default() at the time of logging (main sets it)
	ids    atomic.Uint64 // n of the next held execution, unique within the process
}

// theTestGate is the process's gate, from the environment at start; nil when disabled.
var theTestGate = testGateFromEnv()

func testGateFromEnv() *testGate {
	dir := os.Getenv(gateEnv)
	if dir == "" {
		return nil
	}
	return &testGate{dir: dir, pid: os.Getpid(), safety: gateSafety}
}

// gateWait is called before every execution of model; a no-op unless the gate is on.
// An error (ctx ended while held) is the call's status: the execution must not run.
func gateWait(ctx context.Context, model string) error {
	if theTestGate != nil {
		return theTestGate.wait(ctx, model)
	}
	return nil
}

// wait returns at once unless M.hold exists; else announces, waits for its removal, returns
// nil; or returns ctx's status when ctx ends first (the held marker stays until the removal).
func (g *testGate) wait(ctx context.Context, model string) error {
	hold := filepath.Join(g.dir, model+".hold")
	if !fileExists(hold) {
		return nil
	}
	logger := g.log
	if logger == nil {
		logger = slog.Default()
	}
	tag := fmt.Sprintf("%d.%d", g.pid, g.ids.Add(1)-1)
	g.mark(logger, model, "entered", tag)
	logger.Info("test gate: execution held", "model", model, "tag", tag)
	left := make(chan struct{})
	go func() {
		g.stayHeld(logger, hold, model, tag)
		close(left)
	}()
	select {
	case <-left:
		return nil
	case <-ctx.Done():
		logger.Info("test gate: the held execution's call ended; it will not run", "model", model,
			"tag", tag, "error", ctx.Err().Error())
		return status.FromContext(ctx.Err())
	}
}

// stayHeld waits until hold is removed (or the safety bound), then marks the execution left.
func (g *testGate) stayHeld(logger *slog.Logger, hold, model, tag string) {
	giveUp := time.Now().Add(g.safety)
	for fileExists(hold) {
		if time.Now().After(giveUp) {
			logger.Error("test gate: hold file still there after the safety bound; proceeding",
				"model", model, "tag", tag, "seconds", g.safety.Seconds())
			break
		}
		time.Sleep(gatePoll)
	}
	g.mark(logger, model, "left", tag)
	logger.Info("test gate: execution released", "model", model, "tag", tag)
}

// mark creates the marker <dir>/<model>.<state>.<tag>. A failure is logged, not returned:
// the execution must not fail for its test hook (the test waiting for the marker times out
// and the log says why).
func (g *testGate) mark(logger *slog.Logger, model, state, tag string) {
	f, err := os.OpenFile(filepath.Join(g.dir, model+"."+state+"."+tag), os.O_CREATE|os.O_WRONLY, 0o666)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		logger.Error("test gate: cannot create its marker", "model", model, "state", state,
			"tag", tag, "error", err.Error())
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
