package dispatch

// Tests of admission.go with real goroutines: bounded slots, a bounded FIFO line, immediate
// shedding, deadlines and vanished callers never admitted, each refusal's code and exact
// text (those of bridge/limits.py), the outcome totals. No verdict depends on how fast
// goroutines run: slots are held until the test releases them, and waiting for a condition
// polls observable state with a bound far beyond anything a busy machine needs.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

const admissionWaitBound = 60 * time.Second

// The workers' texts (bridge/limits.py) for model version m/1.
const (
	expiredM1   = "deadline exceeded before model 'm/1' could run the request; not executed"
	cancelledM1 = "caller went away before model 'm/1' ran the request; not executed"
)

// waitFor polls cond until it holds; fails the test after admissionWaitBound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(admissionWaitBound)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("still not %s after %s", what, admissionWaitBound)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueued waits until key has exactly inflight running and queued waiting.
func waitQueued(t *testing.T, a *Admission, key string, inflight, queued int) {
	t.Helper()
	waitFor(t, "at the expected load", func() bool {
		i, q := a.Load(key)
		return i == inflight && q == queued
	})
}

// assertLoad checks key's load now.
func assertLoad(t *testing.T, a *Admission, key string, inflight, queued int) {
	t.Helper()
	if i, q := a.Load(key); i != inflight || q != queued {
		t.Fatalf("load(%s) = (%d running, %d waiting), want (%d, %d)", key, i, q, inflight, queued)
	}
}

// assertStatus checks err's gRPC code and exact message.
func assertStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || st.Message() != msg {
		t.Fatalf("error %v, want %s %q", err, code, msg)
	}
}

// assertTotals checks the snapshot of totals, absent outcomes included.
func assertTotals(t *testing.T, a *Admission, want map[admissionTotal]uint64) {
	t.Helper()
	got := a.Totals()
	if len(got) != len(want) {
		t.Fatalf("totals %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("totals %v, want %v", got, want)
		}
	}
}

// mustAcquire takes a slot of key that must be free.
func mustAcquire(t *testing.T, a *Admission, key string) {
	t.Helper()
	if err := a.Acquire(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

// assertLogged checks that the log read by logTo or gateInDir holds want.
func assertLogged(t *testing.T, buf *syncBuffer, want string) {
	t.Helper()
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q lacks %q", buf.String(), want)
	}
}

// logTo makes a's log lines readable by the test.
func logTo(a *Admission) *syncBuffer {
	var buf syncBuffer
	a.log = slog.New(slog.NewTextHandler(&buf, nil))
	return &buf
}

// syncBuffer is a bytes.Buffer safe for the goroutines that log into it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// oneHeldOneWaiting: m/1 with its one slot held by the test and a request with ctx waiting
// in its line (the admission, its log, the waiter's outcome to come).
func oneHeldOneWaiting(t *testing.T, ctx context.Context) (*Admission, *syncBuffer, <-chan error) {
	t.Helper()
	a := NewAdmission(1, 4)
	buf := logTo(a)
	mustAcquire(t, a, "m/1")
	done := acquireAsync(a, ctx, "m/1")
	waitQueued(t, a, "m/1", 1, 1)
	return a, buf, done
}

// acquireAsync starts acquire(ctx, key) in a goroutine; its result arrives on the channel.
func acquireAsync(a *Admission, ctx context.Context, key string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- a.Acquire(ctx, key) }()
	return done
}

// result waits for an acquireAsync's outcome.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(admissionWaitBound):
		t.Fatalf("acquire still blocked after %s", admissionWaitBound)
		return nil
	}
}

// assertBlocked checks that an acquireAsync has not returned (it waits in the line).
func assertBlocked(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("acquire returned %v while it should wait for a slot", err)
	default:
	}
}

func TestAdmissionUncontendedAcquireReleaseAllocatesNothing(t *testing.T) {
	a := NewAdmission(4, 64)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := a.Acquire(ctx, "m/1"); err != nil {
			t.Fatal(err)
		}
		a.Release("m/1")
	})
	if allocs != 0 {
		t.Fatalf("uncontended acquire + release allocated %v times per request", allocs)
	}
	assertLoad(t, a, "m/1", 0, 0)
	if n := a.Totals()[admissionTotal{"m", "admitted"}]; n != 1001 {
		t.Fatalf("admitted %d, want 1001 (1000 runs + the warm-up)", n)
	}
}

func TestAdmissionBurstAboveCapacityIsShedImmediatelyAndTheRestComplete(t *testing.T) {
	a := NewAdmission(2, 3)
	bg := context.Background()
	for range 2 {
		if err := a.Acquire(bg, "m/1"); err != nil {
			t.Fatal(err)
		}
	}
	var waiting []<-chan error
	for q := 1; q <= 3; q++ {
		waiting = append(waiting, acquireAsync(a, bg, "m/1"))
		waitQueued(t, a, "m/1", 2, q)
	}
	// The slots stay held until released: a request that waited would block; a shed one
	// returns at once.
	for range 20 {
		assertStatus(t, a.Acquire(bg, "m/1"), codes.ResourceExhausted,
			"model 'm/1' is at capacity (2 running, 3 waiting); retry later with backoff")
	}
	assertLoad(t, a, "m/1", 2, 3)
	for _, done := range waiting {
		assertBlocked(t, done)
	}
	a.Release("m/1")
	a.Release("m/1")
	for _, done := range waiting {
		if err := result(t, done); err != nil {
			t.Fatal(err)
		}
		a.Release("m/1")
	}
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "admitted"}: 5, {"m", "shed"}: 20})
}

func TestAdmissionNoLineShedsAsSoonAsTheSlotsAreFull(t *testing.T) {
	a := NewAdmission(1, 0)
	bg := context.Background()
	if err := a.Acquire(bg, "a/1"); err != nil {
		t.Fatal(err)
	}
	assertStatus(t, a.Acquire(bg, "a/1"), codes.ResourceExhausted,
		"model 'a/1' is at capacity (1 running, 0 waiting); retry later with backoff")
	// Models (and versions) are limited independently.
	for _, key := range []string{"b/1", "a/2"} {
		if err := a.Acquire(bg, key); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		assertLoad(t, a, key, 1, 0)
		a.Release(key)
	}
	a.Release("a/1")
	assertTotals(t, a, map[admissionTotal]uint64{
		{"a", "admitted"}: 2, {"a", "shed"}: 1, {"b", "admitted"}: 1})
}

func TestAdmissionConcurrencyNeverExceedsTheSlotsAndNothingIsLost(t *testing.T) {
	a := NewAdmission(3, 1000)
	var mu sync.Mutex
	running, peak, done := 0, 0, 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if err := a.Acquire(context.Background(), "m/1"); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			runtime.Gosched() // let others run while this one holds its slot
			mu.Lock()
			running--
			done++
			mu.Unlock()
			a.Release("m/1")
		})
	}
	wg.Wait()
	if peak > 3 || done != 200 {
		t.Fatalf("peak concurrency %d (limit 3), completed %d of 200", peak, done)
	}
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "admitted"}: 200})
}

func TestAdmissionWaitingLineIsFIFO(t *testing.T) {
	a := NewAdmission(1, 10)
	mustAcquire(t, a, "m/1")
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Go(func() {
			if err := a.Acquire(context.Background(), "m/1"); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			a.Release("m/1")
		})
		waitQueued(t, a, "m/1", 1, i)
	}
	a.Release("m/1")
	wg.Wait()
	if len(order) != 5 {
		t.Fatalf("order %v", order)
	}
	for k, i := range order {
		if i != k+1 {
			t.Fatalf("admitted in the order %v, want 1..5", order)
		}
	}
}

func TestAdmissionDeadlineAlreadyPassedIsRefusedWithoutASlot(t *testing.T) {
	a := NewAdmission(1, 1)
	buf := logTo(a)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	assertStatus(t, a.Acquire(ctx, "m/1"), codes.DeadlineExceeded, expiredM1)
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "expired"}: 1})
	assertLogged(t, buf, "request not executed: model=m/1 outcome=expired\"")
}

func TestAdmissionCallerAlreadyGoneIsRefusedWithoutASlot(t *testing.T) {
	a := NewAdmission(1, 1)
	buf := logTo(a)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assertStatus(t, a.Acquire(ctx, "m/1"), codes.Canceled, cancelledM1)
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "cancelled"}: 1})
	assertLogged(t, buf, "request not executed: model=m/1 outcome=cancelled\"")
}

// controlledCtx is a context whose deadline the test makes pass when it chooses (so "the
// deadline passed while it waited" does not depend on how fast the waiter got in line).
type controlledCtx struct {
	context.Context
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{}
	err      error
}

func newControlledCtx() *controlledCtx {
	return &controlledCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour),
		done: make(chan struct{})}
}

func (c *controlledCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *controlledCtx) Done() <-chan struct{} { return c.done }

func (c *controlledCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// expire makes the deadline pass now, as a context.WithDeadline's timer does.
func (c *controlledCtx) expire() {
	c.mu.Lock()
	c.deadline = time.Now().Add(-time.Millisecond)
	c.err = context.DeadlineExceeded
	c.mu.Unlock()
	close(c.done)
}

func TestAdmissionDeadlinePassingInTheLineMeansItIsNeverAdmitted(t *testing.T) {
	ctx := newControlledCtx()
	a, buf, late := oneHeldOneWaiting(t, ctx)
	ctx.expire()
	assertStatus(t, result(t, late), codes.DeadlineExceeded, expiredM1)
	assertLoad(t, a, "m/1", 1, 0) // the line is clean again; the held slot is untouched
	a.Release("m/1")
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "admitted"}: 1, {"m", "expired"}: 1})
	assertLogged(t, buf, "request not executed: model=m/1 outcome=expired (while queued)")
}

func TestAdmissionRealDeadlineInTheLineIsNotRefusedBeforeItPasses(t *testing.T) {
	a := NewAdmission(1, 4)
	mustAcquire(t, a, "m/1")
	deadline := time.Now().Add(50 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	// Whether it expires in the line or on arrival (a slow machine), the verdict is the same.
	assertStatus(t, result(t, acquireAsync(a, ctx, "m/1")), codes.DeadlineExceeded, expiredM1)
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("refused %s before its deadline while the slot stayed held", deadline.Sub(now))
	}
	assertLoad(t, a, "m/1", 1, 0)
	a.Release("m/1")
}

func TestAdmissionCallerThatCancelsWhileQueuedIsNeverAdmitted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a, buf, gone := oneHeldOneWaiting(t, ctx)
	kept := acquireAsync(a, context.Background(), "m/1")
	waitQueued(t, a, "m/1", 1, 2)
	cancel()
	assertStatus(t, result(t, gone), codes.Canceled, cancelledM1)
	assertLoad(t, a, "m/1", 1, 1) // only the cancelled one left the line
	assertBlocked(t, kept)
	a.Release("m/1")
	if err := result(t, kept); err != nil {
		t.Fatal(err)
	}
	a.Release("m/1")
	assertLoad(t, a, "m/1", 0, 0)
	assertTotals(t, a, map[admissionTotal]uint64{{"m", "admitted"}: 2, {"m", "cancelled"}: 1})
	assertLogged(t, buf, "request not executed: model=m/1 outcome=cancelled (while queued)")
}

// TestAdmissionCallerGoneAtHandoverPassesTheSlotOn: the slot handed to a waiter whose
// caller went away at that moment goes to the next waiter; nothing leaks. The test holds
// the admission lock while it cancels and hands over, so the waiter can only notice the
// cancellation after the slot is already its own: the check at start must catch it.
func TestAdmissionCallerGoneAtHandoverPassesTheSlotOn(t *testing.T) {
	for _, expire := range []bool{false, true} {
		ctx := newControlledCtx()
		a, buf, doomed := oneHeldOneWaiting(t, ctx)
		next := acquireAsync(a, context.Background(), "m/1")
		waitQueued(t, a, "m/1", 1, 2)
		a.mu.Lock()
		if expire {
			ctx.expire()
		} else {
			ctx.mu.Lock()
			ctx.err = context.Canceled
			ctx.mu.Unlock()
			close(ctx.done)
		}
		a.lines["m/1"].handOff() // what release("m/1") does under the lock
		a.mu.Unlock()
		outcome := "cancelled"
		if expire {
			outcome = "expired"
			assertStatus(t, result(t, doomed), codes.DeadlineExceeded, expiredM1)
		} else {
			assertStatus(t, result(t, doomed), codes.Canceled, cancelledM1)
		}
		if err := result(t, next); err != nil {
			t.Fatal(err)
		}
		assertLoad(t, a, "m/1", 1, 0) // next holds the one slot
		a.Release("m/1")
		assertLoad(t, a, "m/1", 0, 0)
		assertTotals(t, a, map[admissionTotal]uint64{{"m", "admitted"}: 2, {"m", outcome}: 1})
		assertLogged(t, buf, "request not executed: model=m/1 outcome="+outcome+" (at start)")
	}
}

func TestAdmissionTotalsSumVersionsPerModelName(t *testing.T) {
	a := NewAdmission(1, 0)
	bg := context.Background()
	for _, key := range []string{"m/1", "m/2", "x.y/10"} {
		if err := a.Acquire(bg, key); err != nil {
			t.Fatal(err)
		}
		if err := a.Acquire(bg, key); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: %v, want shed", key, err)
		}
	}
	snapshot := a.Totals()
	for _, key := range []string{"m/1", "m/2", "x.y/10"} {
		a.Release(key)
	}
	assertTotals(t, a, map[admissionTotal]uint64{
		{"m", "admitted"}: 2, {"m", "shed"}: 2, {"x.y", "admitted"}: 1, {"x.y", "shed"}: 1})
	// A snapshot is the caller's own map: later requests do not change it.
	if err := a.Acquire(bg, "m/1"); err != nil {
		t.Fatal(err)
	}
	a.Release("m/1")
	if snapshot[admissionTotal{"m", "admitted"}] != 2 {
		t.Fatalf("snapshot changed after it was taken: %v", snapshot)
	}
}

func TestAdmissionNonsenseLimitsAndStrayReleasePanic(t *testing.T) {
	for _, c := range []struct {
		inflight, queue int
		want            string
	}{
		{0, 1, "max in-flight requests per model must be >= 1, got 0"},
		{-1, 0, "max in-flight requests per model must be >= 1, got -1"},
		{1, -1, "max queued requests per model must be >= 0, got -1"},
	} {
		if got := panicText(func() { NewAdmission(c.inflight, c.queue) }); got != c.want {
			t.Fatalf("NewAdmission(%d, %d) panicked with %q, want %q", c.inflight, c.queue, got, c.want)
		}
	}
	a := NewAdmission(1, 0)
	if got, want := panicText(func() { a.Release("m/1") }), `admission: release of "m/1", which holds no slot`; got != want {
		t.Fatalf("stray release panicked with %q, want %q", got, want)
	}
	mustAcquire(t, a, "m/1") // the panic left the lock free
}

// panicText runs f and gives the text it panicked with ("" if it did not).
func panicText(f func()) (text string) {
	defer func() {
		if r := recover(); r != nil {
			text = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}
