package batch

// Tests of the dynamic batcher. Deterministic: an Exec the test holds (it blocks until the test
// closes a channel) keeps the batcher busy while requests queue in a known order (a test hook
// reports each one queued, and when the batcher starts waiting for company), so every batch's
// composition is known; the cost tests run on a clock of their own that only their Exec moves;
// nothing sleeps.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const never = time.Hour // a queue delay no test waits for

// The test model: inputs a (4 bytes a row) and b (2 bytes a row); outputs y = a+1 byte by
// byte (4 bytes a row) and z = b0, b1, b0^b1 (3 bytes a row): row-wise, so every request's
// expected outputs come from its own rows alone. Its programs cost an hour each by the
// batcher's first estimates (Costs), so a partial batch waits its whole delay (the cap at one
// execution's cost never comes first; the few executions a test runs move the estimates a
// quarter of the way each).
func testConfig() Config {
	return Config{
		BatchSizes: []int{8, 1, 4}, MaxQueueDelay: never, MaxQueue: 16, Name: "m/1",
		InputNames: []string{"a", "b"}, InputRowBytes: []int{4, 2},
		OutputNames: []string{"y", "z"}, OutputRowBytes: []int{4, 3},
		Costs: map[int]time.Duration{1: 100 * never, 4: 100 * never, 8: 100 * never},
	}
}

func rowwise(rows int, in [][]byte) [][]byte {
	y := make([]byte, rows*4)
	for i, v := range in[0] {
		y[i] = v + 1
	}
	z := make([]byte, rows*3)
	for r := range rows {
		b0, b1 := in[1][2*r], in[1][2*r+1]
		z[3*r], z[3*r+1], z[3*r+2] = b0, b1, b0^b1
	}
	return [][]byte{y, z}
}

// req: a request of `rows` rows whose bytes start at seed (distinct seeds: distinct bytes).
func req(rows int, seed byte) [][]byte {
	a, b := make([]byte, rows*4), make([]byte, rows*2)
	for i := range a {
		a[i] = seed + byte(i)
	}
	for i := range b {
		b[i] = seed ^ byte(0x80+i)
	}
	return [][]byte{a, b}
}

type call struct {
	size   int
	inputs [][]byte
}

// recorder is the test's Exec: it records every call (a copy of its inputs), reports it on
// entered, waits for hold to close (when set), moves the test clock by cost(size) when both are
// set, and answers rowwise unless fail says otherwise.
type recorder struct {
	mu      sync.Mutex
	calls   []call
	entered chan call
	hold    chan struct{}
	fail    func(size int, inputs [][]byte) error
	clock   *testClock
	cost    func(size int) time.Duration
}

// testClock is a clock only the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newRecorder() *recorder {
	return &recorder{entered: make(chan call, 64), hold: make(chan struct{})}
}

func (rc *recorder) exec(size int, inputs [][]byte) ([][]byte, error) {
	c := call{size, make([][]byte, len(inputs))}
	for i, in := range inputs {
		c.inputs[i] = slices.Clone(in)
	}
	rc.mu.Lock()
	rc.calls = append(rc.calls, c)
	rc.mu.Unlock()
	rc.entered <- c
	<-rc.hold
	if rc.clock != nil && rc.cost != nil {
		rc.clock.advance(rc.cost(size))
	}
	if rc.fail != nil {
		if err := rc.fail(size, inputs); err != nil {
			return nil, err
		}
	}
	return rowwise(size, inputs), nil
}

func (rc *recorder) seen() []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.calls)
}

type result struct {
	out    [][]byte
	timing Timing
	err    error
}

// harness: a batcher over a recorder, with its queued/closing events on one channel and its
// waiting events (the worker waits for company) on another.
type harness struct {
	t       *testing.T
	b       *Batcher
	rc      *recorder
	events  chan string
	waiting chan struct{}
}

func newHarness(t *testing.T, cfg Config) *harness { return newClockHarness(t, cfg, nil) }

// newClockHarness: the batcher on clock (nil: the real one).
func newClockHarness(t *testing.T, cfg Config, clock *testClock) *harness {
	t.Helper()
	rc := newRecorder()
	now := time.Now
	if clock != nil {
		rc.clock, now = clock, clock.now
	}
	b, err := newBatcher(cfg, rc.exec, now)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, b: b, rc: rc, events: make(chan string, 256), waiting: make(chan struct{}, 256)}
	b.hook = func(event string) {
		if event == "waiting" { // a worker re-arming its timer says it again: never block it
			select {
			case h.waiting <- struct{}{}:
			default:
			}
			return
		}
		h.events <- event
	}
	t.Cleanup(func() {
		h.release()
		b.Close()
	})
	return h
}

// release lets every held and future execution finish.
func (h *harness) release() {
	select {
	case <-h.rc.hold:
	default:
		close(h.rc.hold)
	}
}

// submit starts one Submit and returns once the request is queued.
func (h *harness) submit(ctx context.Context, rows int, inputs [][]byte) chan result {
	h.t.Helper()
	ch := make(chan result, 1)
	go func() {
		out, timing, err := h.b.Submit(ctx, rows, inputs)
		ch <- result{out, timing, err}
	}()
	if e := <-h.events; e != "queued" {
		h.t.Fatalf("event %q, want queued", e)
	}
	return ch
}

// busy submits a full batch (8 rows: due at once) and returns when its execution has begun
// (held): requests submitted next queue behind it in a known order.
func (h *harness) busy() chan result {
	h.t.Helper()
	ch := h.submit(context.Background(), 8, req(8, 0xF0))
	if c := <-h.rc.entered; c.size != 8 {
		h.t.Fatalf("the busy batch ran at size %d", c.size)
	}
	return ch
}

// padded: the requests' inputs concatenated and padded to size rows with the last real row.
func padded(size int, reqs ...[][]byte) [][]byte {
	out := make([][]byte, 2)
	for i, rb := range []int{4, 2} {
		for _, r := range reqs {
			out[i] = append(out[i], r[i]...)
		}
		last := out[i][len(out[i])-rb:]
		for len(out[i]) < size*rb {
			out[i] = append(out[i], last...)
		}
	}
	return out
}

func wantOK(t *testing.T, what string, r result, rows int, inputs [][]byte) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	want := rowwise(rows, inputs)
	for j := range want {
		if !bytes.Equal(r.out[j], want[j]) {
			t.Fatalf("%s: output %d = %v, want %v (its own rows, no padding)", what, j, r.out[j], want[j])
		}
		if cap(r.out[j]) != len(r.out[j]) {
			t.Fatalf("%s: output %d has capacity %d beyond its %d bytes (a neighbour's rows)",
				what, j, cap(r.out[j]), len(r.out[j]))
		}
	}
	if r.timing.Rows != rows {
		t.Fatalf("%s: timing rows %d, want %d", what, r.timing.Rows, rows)
	}
}

func wantStatus(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	s, ok := status.FromError(err)
	if !ok || s.Code() != code || s.Message() != msg {
		t.Fatalf("%s: error %v\nwant %s %q", what, err, code, msg)
	}
}

func wantCall(t *testing.T, c call, size int, inputs [][]byte) {
	t.Helper()
	if c.size != size {
		t.Fatalf("executed at size %d, want %d", c.size, size)
	}
	for i := range inputs {
		if !bytes.Equal(c.inputs[i], inputs[i]) {
			t.Fatalf("input %d of the execution = %v\nwant %v", i, c.inputs[i], inputs[i])
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	exec := func(int, [][]byte) ([][]byte, error) { return nil, nil }
	cases := []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.BatchSizes = nil }, "batch_sizes must be positive integers, got []"},
		{func(c *Config) { c.BatchSizes = []int{0, 4} }, "batch_sizes must be positive integers, got [0, 4]"},
		{func(c *Config) { c.Preferred = []int{9, 2, 0} },
			"preferred batch sizes [0, 9] are outside 1..8 (the largest exported batch size)"},
		{func(c *Config) { c.MaxQueueDelay = -time.Millisecond }, "max_queue_delay_us must be >= 0, got -1000"},
		{func(c *Config) { c.MaxQueue = 0 }, "max_queue_size must be >= 1, got 0"},
		{func(c *Config) { c.InputRowBytes = []int{4} }, "model 'm/1': 2 input names, 1 row sizes and 0 batched flags disagree"},
		{func(c *Config) { c.OutputRowBytes = []int{4, -1} }, "model 'm/1': output 'z' has -1 bytes per row"},
		{func(c *Config) { c.BatchedInputs = []bool{true, false} },
			"model 'm/1': input 'b' has no batch dimension; dynamic batching needs one on every input and output"},
		{func(c *Config) { c.BatchedOutputs = []bool{false, true} },
			"model 'm/1': output 'y' has no batch dimension; dynamic batching needs one on every input and output"},
	}
	for _, tc := range cases {
		cfg := testConfig()
		tc.edit(&cfg)
		b, err := New(cfg, exec)
		if err == nil {
			b.Close()
			t.Fatalf("New accepted a config that should fail with %q", tc.want)
		}
		if err.Error() != tc.want {
			t.Fatalf("error %q, want %q", err, tc.want)
		}
	}
	if _, err := New(testConfig(), nil); err == nil || err.Error() != "model 'm/1': no Exec" {
		t.Fatalf("nil Exec: %v", err)
	}
	cfg := testConfig()
	cfg.BatchedInputs, cfg.BatchedOutputs = []bool{true, true}, []bool{true, true}
	b, err := New(cfg, exec)
	if err != nil {
		t.Fatalf("all batched: %v", err)
	}
	defer b.Close()
	if b.MaxBatchSize() != 8 {
		t.Fatalf("MaxBatchSize %d, want 8", b.MaxBatchSize())
	}
}

func TestConcatenatesPadsAndSplits(t *testing.T) {
	cfg := testConfig()
	cfg.Preferred = []int{5}
	h := newHarness(t, cfg)
	first := h.busy()
	a, b, c := req(2, 0x10), req(1, 0x20), req(2, 0x30)
	ra, rb, rc := h.submit(context.Background(), 2, a), h.submit(context.Background(), 1, b),
		h.submit(context.Background(), 2, c)
	h.release()
	wantOK(t, "busy", <-first, 8, req(8, 0xF0))
	got := map[string]result{"a": <-ra, "b": <-rb, "c": <-rc}
	wantOK(t, "a", got["a"], 2, a)
	wantOK(t, "b", got["b"], 1, b)
	wantOK(t, "c", got["c"], 2, c)
	// 5 rows (a preferred size: due at once) on the 8-row program, padded with c's last row.
	wantCall(t, h.rc.seen()[1], 8, padded(8, a, b, c))
	for name, first := range map[string]bool{"a": true, "b": false, "c": false} {
		tm := got[name].timing
		if tm.First != first || tm.BatchSize != 8 || tm.BatchRows != 5 || tm.Queue < 0 || tm.Execute < 0 {
			t.Fatalf("%s: timing %+v (first %v, batch size 8, batch rows 5)", name, tm, first)
		}
	}
	st := h.b.Stats()
	want := Stats{Requests: 4, Batches: 2, Rows: 13, PaddedRows: 3, BatchSizeCounts: map[int]int{8: 2}, Immediate: 1}
	if fmt.Sprint(st) != fmt.Sprint(want) {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
}

func TestNextRequestThatDoesNotFitCutsTheBatch(t *testing.T) {
	cfg := testConfig()
	cfg.BatchSizes = []int{1, 4}
	h := newHarness(t, cfg)
	h.submit(context.Background(), 4, req(4, 0xF0)) // due at once (the largest size)
	<-h.rc.entered
	a, b, c := req(3, 0x10), req(2, 0x20), req(1, 0x30)
	ra, rb, rc := h.submit(context.Background(), 3, a), h.submit(context.Background(), 2, b),
		h.submit(context.Background(), 1, c)
	h.release()
	wantOK(t, "a", <-ra, 3, a) // b does not fit beside a: a runs alone, never split
	// b and c (3 rows) wait for company (the delay never expires) until Close sends them.
	h.b.Close()
	wantOK(t, "b", <-rb, 2, b)
	wantOK(t, "c", <-rc, 1, c)
	calls := h.rc.seen()
	if len(calls) != 3 {
		t.Fatalf("%d executions, want 3", len(calls))
	}
	wantCall(t, calls[1], 4, padded(4, a))
	wantCall(t, calls[2], 4, padded(4, b, c))
}

func TestPreferredSizesDispatchWithoutWaiting(t *testing.T) {
	cfg := testConfig()
	cfg.BatchSizes = []int{1, 2, 4, 8}
	cfg.Preferred = []int{2}
	h := newHarness(t, cfg)
	first := h.busy()
	a, b := req(1, 0x10), req(1, 0x20)
	ra := h.submit(context.Background(), 1, a) // 1 row, behind an execution
	h.release()
	wantOK(t, "busy", <-first, 8, req(8, 0xF0))
	<-h.waiting                                // a waits for company (the delay never expires)
	rb := h.submit(context.Background(), 1, b) // 2 rows: a preferred size, due
	wantOK(t, "a", <-ra, 1, a)
	wantOK(t, "b", <-rb, 1, b)
	wantCall(t, h.rc.seen()[1], 2, padded(2, a, b))
	c := req(3, 0x30) // the batcher is idle again: due at once
	wantOK(t, "c", <-h.submit(context.Background(), 3, c), 3, c)
	wantCall(t, h.rc.seen()[2], 4, padded(4, c))
}

// The idle-engine rule: a request that finds the batcher idle and its queue empty runs at once,
// whatever its delay; one that arrives behind an execution waits for company (Triton's rule).
// Asserted through the batcher's own events and counters: a lone request is executed before
// the batcher ever waits.
func TestLoneRequestIsExecutedWithoutWaitingItsWindow(t *testing.T) {
	cfg := testConfig() // the delay is an hour: a lone request that waited would never run
	h := newHarness(t, cfg)
	h.release()
	for i := range 3 { // each finds the batcher idle: it is idle again before it answers
		in := req(1, byte(0x10*i))
		ch := make(chan result, 1)
		go func() {
			out, timing, err := h.b.Submit(context.Background(), 1, in)
			ch <- result{out, timing, err}
		}()
		select {
		case r := <-ch:
			wantOK(t, fmt.Sprintf("lone request %d", i), r, 1, in)
			if !r.timing.First || r.timing.BatchSize != 1 || r.timing.BatchRows != 1 {
				t.Fatalf("lone request %d: timing %+v, want its own execution at size 1", i, r.timing)
			}
		case <-h.waiting:
			t.Fatalf("lone request %d: the batcher waited for company", i)
		}
	}
	if st := h.b.Stats(); st.Immediate != 3 || st.Batches != 3 || st.PaddedRows != 0 {
		t.Fatalf("stats %+v: want 3 requests run at once, 3 executions, no padding", st)
	}

	// Behind an execution, a request waits for company: the batcher says so, and the next
	// request joins it (Close sends the batch, its delay never expires).
	h2 := newHarness(t, cfg)
	first := h2.busy()
	a, b := req(1, 0x40), req(2, 0x50)
	ra := h2.submit(context.Background(), 1, a)
	h2.release()
	<-first
	<-h2.waiting
	rb := h2.submit(context.Background(), 2, b)
	h2.b.Close()
	wantOK(t, "a", <-ra, 1, a)
	wantOK(t, "b", <-rb, 2, b)
	wantCall(t, h2.rc.seen()[1], 4, padded(4, a, b))
	if st := h2.b.Stats(); st.Immediate != 1 {
		t.Fatalf("stats %+v: only the first request found the batcher idle", st)
	}
}

// Under load the batches fill: requests queued behind an execution run together, in one
// execution of the largest exported size they fill.
func TestUnderLoadTheBatchesFill(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueDelay = 0 // due at once: only the execution in progress makes them wait
	h := newHarness(t, cfg)
	first := h.busy()
	var ins [][][]byte
	var chs []chan result
	for i := range 8 {
		ins = append(ins, req(1, byte(0x10+i)))
		chs = append(chs, h.submit(context.Background(), 1, ins[i]))
	}
	h.release()
	<-first
	for i, ch := range chs {
		r := <-ch
		wantOK(t, fmt.Sprintf("request %d", i), r, 1, ins[i])
		if r.timing.BatchRows != 8 || r.timing.BatchSize != 8 {
			t.Fatalf("request %d: timing %+v, want a full batch of 8", i, r.timing)
		}
	}
	st := h.b.Stats()
	if st.Batches != 2 || st.Rows != 16 || st.PaddedRows != 0 || st.BatchSizeCounts[8] != 2 {
		t.Fatalf("stats %+v: want two full executions of 8 rows", st)
	}
}

// A due batch that is not an exported size runs padded, or as the largest exported size a
// prefix of it fills when that is cheaper per real row, by the execution times measured (here
// on the test's clock: the Exec moves it by the cost of its size). What is left runs next: it
// has waited as long as an execution costs, longer than company is worth waiting for.
func TestDueBatchRunsTheCheaperOfPaddingAndAFullSmallerProgram(t *testing.T) {
	steep := func(size int) time.Duration { return time.Duration(size) * time.Millisecond }
	flat := func(int) time.Duration { return time.Millisecond }
	for _, tc := range []struct {
		name  string
		cost  func(int) time.Duration
		sizes []int // executions after the busy one
		split int
	}{
		// 5 rows: 8 rows padded cost 8 ms (1.6 ms per real row), 4 full rows 4 ms (1 ms): split;
		// then the one left and the 4-row request (5 rows): 1 alone (1 ms a row) beats 8 padded
		// (1.6), then the 4-row request on its own program.
		{"cost grows with rows", steep, []int{4, 1, 4}, 2},
		// every program costs the same: padding runs the 5 rows once.
		{"cost flat", flat, []int{8, 4}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.BatchSizes = []int{1, 2, 4, 8}
			cfg.Costs = map[int]time.Duration{}
			for _, s := range cfg.BatchSizes {
				cfg.Costs[s] = tc.cost(s)
			}
			h := newClockHarness(t, cfg, &testClock{t: time.Unix(1000, 0)})
			h.rc.cost = tc.cost
			first := h.busy()
			var chs []chan result
			for i := range 5 {
				chs = append(chs, h.submit(context.Background(), 1, req(1, byte(0x10+i))))
			}
			four := req(4, 0x60)
			rf := h.submit(context.Background(), 4, four) // does not fit beside 5 rows: 5 are due
			h.release()
			<-first
			for i, ch := range chs {
				wantOK(t, fmt.Sprintf("request %d", i), <-ch, 1, req(1, byte(0x10+i)))
			}
			wantOK(t, "four", <-rf, 4, four)
			var sizes []int
			for _, c := range h.rc.seen()[1:] {
				sizes = append(sizes, c.size)
			}
			if !slices.Equal(sizes, tc.sizes) {
				t.Fatalf("executions at sizes %v, want %v", sizes, tc.sizes)
			}
			if st := h.b.Stats(); st.Splits != tc.split {
				t.Fatalf("stats %+v: want %d splits", st, tc.split)
			}
		})
	}
}

// A partial batch waits for company no longer than one execution of it costs (the measured
// cost, when shorter than the delay): here 2 ms on the test's clock, which the execution in
// progress has used up, so the request behind it runs next, alone, its delay (an hour) unused.
func TestCheapExecutionsDoNotWaitTheirDelay(t *testing.T) {
	cfg := testConfig()
	cost := func(int) time.Duration { return 2 * time.Millisecond }
	cfg.Costs = map[int]time.Duration{1: cost(1), 4: cost(4), 8: cost(8)}
	h := newClockHarness(t, cfg, &testClock{t: time.Unix(1000, 0)})
	h.rc.cost = cost
	first := h.busy()
	a := req(1, 0x10)
	ra := h.submit(context.Background(), 1, a)
	h.release()
	<-first
	r := <-ra
	wantOK(t, "a", r, 1, a)
	if r.timing.BatchSize != 1 || r.timing.Queue != 2*time.Millisecond {
		t.Fatalf("timing %+v: want its own execution at size 1 after 2 ms queued", r.timing)
	}
}

func TestQueueDelayDispatchesAPartialBatch(t *testing.T) {
	for _, delay := range []time.Duration{0, time.Nanosecond} {
		cfg := testConfig()
		cfg.MaxQueueDelay = delay
		h := newHarness(t, cfg)
		first := h.busy()
		a, b := req(1, 0x10), req(2, 0x20)
		ra, rb := h.submit(context.Background(), 1, a), h.submit(context.Background(), 2, b)
		h.release()
		<-first
		// Both queued before the busy execution ended: one batch of 3 rows, though 8 preferred.
		wantOK(t, "a", <-ra, 1, a)
		wantOK(t, "b", <-rb, 2, b)
		wantCall(t, h.rc.seen()[1], 4, padded(4, a, b))
		c := req(1, 0x30) // alone: its delay expires and it runs at the smallest size
		wantOK(t, "c", <-h.submit(context.Background(), 1, c), 1, c)
		wantCall(t, h.rc.seen()[2], 1, c)
	}
}

// A finite delay (20 ms here, not 0 or 1 ns, so the batcher really waits on its timer) sends a
// partial batch once the oldest request has waited it, by the batcher's clock: here the test's,
// which only the test moves. While that clock stands still the timer firing changes nothing
// (the batcher waits again: a second "waiting" event, the batch still unexecuted); once the
// test moves it past the delay the 3 queued rows run as one batch on the 4-row program, though
// 8 rows are preferred, and each request's queue time is exactly the delay. No real duration
// is asserted; the 60 s bounds only turn a hang into a failure.
func TestAFiniteQueueDelayDispatchesAPartialBatchOnceItHasElapsed(t *testing.T) {
	const delay = 20 * time.Millisecond
	cfg := testConfig() // executions estimated at an hour each: the delay, not a cost, decides
	cfg.MaxQueueDelay = delay
	clock := &testClock{t: time.Unix(1000, 0)}
	h := newClockHarness(t, cfg, clock)
	first := h.busy()
	a, b := req(1, 0x10), req(2, 0x20)
	ra, rb := h.submit(context.Background(), 1, a), h.submit(context.Background(), 2, b)
	h.release()
	wantOK(t, "busy", <-first, 8, req(8, 0xF0))
	for i := range 2 { // waits for company; its timer fires; it waits again: the delay is unspent
		select {
		case <-h.waiting:
		case r := <-ra:
			t.Fatalf("a was answered before its delay had elapsed on the batcher's clock (wait %d): %+v", i, r)
		case <-time.After(60 * time.Second):
			t.Fatalf("the batcher never waited for company (wait %d)", i)
		}
	}
	if n := len(h.rc.seen()); n != 1 {
		t.Fatalf("%d executions before the delay elapsed, want only the busy one", n)
	}
	clock.advance(delay)
	var got [2]result
	for i, ch := range []chan result{ra, rb} {
		select {
		case got[i] = <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("the partial batch was never sent after its delay elapsed")
		}
	}
	wantOK(t, "a", got[0], 1, a)
	wantOK(t, "b", got[1], 2, b)
	wantCall(t, h.rc.seen()[1], 4, padded(4, a, b))
	for i, r := range got {
		if r.timing.Queue != delay || r.timing.BatchSize != 4 || r.timing.BatchRows != 3 {
			t.Fatalf("request %d: timing %+v, want %v queued then one execution of 3 rows at size 4", i, r.timing, delay)
		}
	}
	if st := h.b.Stats(); st.Batches != 2 || st.Rows != 11 || st.PaddedRows != 1 || st.BatchSizeCounts[4] != 1 || st.Immediate != 1 {
		t.Fatalf("stats %+v: want the busy batch and one partial batch of 3 rows padded to 4", st)
	}
}

func TestQueueFullIsUnavailable(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueue = 2
	cfg.MaxQueueDelay = 0
	h := newHarness(t, cfg)
	first := h.busy() // executing: not in the queue
	a, b := req(1, 0x10), req(1, 0x20)
	ra, rb := h.submit(context.Background(), 1, a), h.submit(context.Background(), 1, b)
	_, _, err := h.b.Submit(context.Background(), 1, req(1, 0x30))
	wantStatus(t, "third queued", err, codes.Unavailable,
		"model 'm/1': batching queue is full (2 requests waiting); retry later")
	h.release()
	<-first
	wantOK(t, "a", <-ra, 1, a)
	wantOK(t, "b", <-rb, 1, b)
	if st := h.b.Stats(); st.RejectedQueueFull != 1 || st.Requests != 3 {
		t.Fatalf("stats %+v: want 1 rejected, 3 requests", st)
	}
}

// manualCtx is a context the test ends itself, with the error it chooses; noDone leaves
// Done nil (never closed) so only the batcher's own check of Err can see the end.
type manualCtx struct {
	context.Context
	done   chan struct{}
	noDone bool
	err    atomic.Value
}

func newManualCtx(noDone bool) *manualCtx {
	return &manualCtx{Context: context.Background(), done: make(chan struct{}), noDone: noDone}
}

func (c *manualCtx) Done() <-chan struct{} {
	if c.noDone {
		return nil
	}
	return c.done
}

func (c *manualCtx) Err() error {
	if err, ok := c.err.Load().(error); ok {
		return err
	}
	return nil
}

func (c *manualCtx) end(err error) {
	c.err.Store(err)
	close(c.done)
}

func TestCallerGoneOrLateWhileQueuedIsNotExecuted(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
		msg  string
		stat func(Stats) int
	}{
		{context.Canceled, codes.Canceled,
			"model 'm/1': caller went away while waiting to be batched; request not executed",
			func(s Stats) int { return s.Cancelled }},
		{context.DeadlineExceeded, codes.DeadlineExceeded,
			"model 'm/1': deadline exceeded while waiting to be batched; request not executed",
			func(s Stats) int { return s.Expired }},
	}
	for _, tc := range cases {
		for _, byWorker := range []bool{false, true} {
			cfg := testConfig()
			cfg.MaxQueueDelay = 0
			h := newHarness(t, cfg)
			first := h.busy()
			ctx := newManualCtx(byWorker)
			late, b := req(2, 0x10), req(1, 0x20)
			rl := h.submit(ctx, 2, late)
			rb := h.submit(context.Background(), 1, b)
			ctx.end(tc.err)
			if !byWorker { // Submit sees its ctx end and leaves the queue at once
				r := <-rl
				wantStatus(t, "left", r.err, tc.code, tc.msg)
			}
			h.release() // by the worker: it drops the request when it forms the next batch
			<-first
			wantOK(t, "b", <-rb, 1, b)
			if byWorker {
				r := <-rl
				wantStatus(t, "dropped by the worker", r.err, tc.code, tc.msg)
			}
			calls := h.rc.seen()
			if len(calls) != 2 {
				t.Fatalf("%d executions, want 2", len(calls))
			}
			wantCall(t, calls[1], 1, b) // the late request's rows never reached Exec
			if n := tc.stat(h.b.Stats()); n != 1 {
				t.Fatalf("%v counted %d times, want 1", tc.err, n)
			}
		}
	}
}

func TestDoneCtxIsRefusedWithoutQueueing(t *testing.T) {
	h := newHarness(t, testConfig())
	h.release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := h.b.Submit(ctx, 1, req(1, 0x10))
	wantStatus(t, "cancelled before", err, codes.Canceled,
		"model 'm/1': caller went away while waiting to be batched; request not executed")
	ctx, cancel = context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	_, _, err = h.b.Submit(ctx, 1, req(1, 0x10))
	wantStatus(t, "past deadline", err, codes.DeadlineExceeded,
		"model 'm/1': deadline exceeded while waiting to be batched; request not executed")
	if st := h.b.Stats(); st.Requests != 0 || st.Cancelled != 1 || st.Expired != 1 || len(h.rc.seen()) != 0 {
		t.Fatalf("stats %+v, %d executions: want nothing queued or executed", st, len(h.rc.seen()))
	}
}

var errPoison = status.Error(codes.InvalidArgument, "poisoned row")

func TestExecutionFailureIsIsolatedToItsRequest(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueDelay = 0
	h := newHarness(t, cfg)
	h.rc.fail = func(_ int, inputs [][]byte) error {
		if bytes.IndexByte(inputs[0], 0xEE) >= 0 {
			return errPoison
		}
		return nil
	}
	first := h.busy()
	a, c := req(1, 0x10), req(2, 0x20)
	poison := req(1, 0x30)
	poison[0][2] = 0xEE
	ra, rp, rc := h.submit(context.Background(), 1, a), h.submit(context.Background(), 1, poison),
		h.submit(context.Background(), 2, c)
	h.release()
	<-first
	ok := <-ra
	wantOK(t, "a", ok, 1, a)
	if p := <-rp; !errors.Is(p.err, errPoison) {
		t.Fatalf("poisoned request: %v, want Exec's own error", p.err)
	}
	cr := <-rc
	wantOK(t, "c", cr, 2, c)
	// One failed batch of 4 rows, then each request alone on its own program.
	var sizes []int
	for _, c := range h.rc.seen() {
		sizes = append(sizes, c.size)
	}
	if !slices.Equal(sizes, []int{8, 4, 1, 1, 4}) {
		t.Fatalf("executions at sizes %v, want [8 4 1 1 4]", sizes)
	}
	if !ok.timing.First || ok.timing.BatchRows != 1 || !cr.timing.First || cr.timing.BatchRows != 2 {
		t.Fatalf("re-run timings %+v %+v: each is its own execution", ok.timing, cr.timing)
	}
	if st := h.b.Stats(); st.IsolatedReruns != 1 || st.Batches != 3 {
		t.Fatalf("stats %+v: want 1 isolated re-run, 3 successful executions", st)
	}
}

func TestExecutionFailureReachesEveryRequest(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueDelay = 0
	h := newHarness(t, cfg)
	broken := status.Error(codes.Internal, "device lost")
	h.rc.fail = func(size int, _ [][]byte) error {
		if size == 8 {
			return nil // the busy batch
		}
		return broken
	}
	first := h.busy()
	rs := []chan result{h.submit(context.Background(), 1, req(1, 0x10)),
		h.submit(context.Background(), 3, req(3, 0x20))}
	h.release()
	<-first
	for i, ch := range rs {
		if r := <-ch; r.err != broken || r.out != nil {
			t.Fatalf("request %d: %v, want Exec's error", i, r.err)
		}
	}
	// A lone request that fails is not re-run.
	_, _, err := h.b.Submit(context.Background(), 1, req(1, 0x30))
	if err != broken {
		t.Fatalf("lone request: %v", err)
	}
	if n, st := len(h.rc.seen()), h.b.Stats(); n != 5 || st.IsolatedReruns != 1 {
		t.Fatalf("%d executions, stats %+v: want 5 (busy, batch, 2 re-runs, lone) and 1 re-run", n, st)
	}
}

func TestBadProgramOutputIsInternal(t *testing.T) {
	cases := []struct {
		outs func(size int) [][]byte
		want string
	}{
		{func(size int) [][]byte { return [][]byte{make([]byte, size*4)} },
			"model 'm/1': the program returned 1 outputs, expected 2 (y, z)"},
		{func(size int) [][]byte { return [][]byte{make([]byte, size*4), make([]byte, 3)} },
			"model 'm/1': output 'z' has 3 bytes, expected a leading batch dimension of 4 (4 rows of 3 bytes)"},
	}
	cfg := testConfig()
	cfg.MaxQueueDelay = 0
	for _, tc := range cases {
		b, err := New(cfg, func(size int, _ [][]byte) ([][]byte, error) { return tc.outs(size), nil })
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = b.Submit(context.Background(), 3, req(3, 0x10))
		wantStatus(t, "bad output", err, codes.Internal, tc.want)
		b.Close()
	}
}

func TestExecPanicIsInternalAndTheBatcherGoesOn(t *testing.T) {
	var calls atomic.Int32
	cfg := testConfig()
	cfg.MaxQueueDelay = 0
	b, err := New(cfg, func(size int, in [][]byte) ([][]byte, error) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		return rowwise(size, in), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, _, err = b.Submit(context.Background(), 1, req(1, 0x10))
	wantStatus(t, "panic", err, codes.Internal, "model 'm/1': execution at batch size 1 panicked: boom")
	in := req(1, 0x20)
	out, _, err := b.Submit(context.Background(), 1, in)
	wantOK(t, "after the panic", result{out, Timing{Rows: 1}, err}, 1, in)
}

func TestSubmitRefusesWhatCannotBeBatched(t *testing.T) {
	h := newHarness(t, testConfig())
	h.release()
	cases := []struct {
		rows   int
		inputs [][]byte
		want   string
	}{
		{9, req(9, 0), "model 'm/1': request batch size 9 exceeds the model's max_batch_size 8 " +
			"(exported batch sizes [1, 4, 8]); split the request"},
		{0, [][]byte{{}, {}}, "model 'm/1': batch dimension of input 'a' is 0; send >= 1 row"},
		{1, req(1, 0)[:1], "model 'm/1': 1 inputs given, the model takes 2 (a, b)"},
		{2, [][]byte{make([]byte, 8), make([]byte, 3)},
			"model 'm/1': input 'b' of 3 bytes cannot be batched: 2 rows of 2 bytes are 4"},
	}
	for _, tc := range cases {
		_, _, err := h.b.Submit(context.Background(), tc.rows, tc.inputs)
		wantStatus(t, "refused", err, codes.InvalidArgument, tc.want)
	}
	if len(h.rc.seen()) != 0 || h.b.Stats().Requests != 0 {
		t.Fatal("a refused request was queued or executed")
	}
}

func TestCloseDrainsTheQueueThenRefuses(t *testing.T) {
	h := newHarness(t, testConfig())
	first := h.busy()
	a := req(2, 0x10)
	ra := h.submit(context.Background(), 2, a) // waits for company: the delay never expires
	closed := make(chan struct{})
	go func() {
		h.b.Close()
		close(closed)
	}()
	if e := <-h.events; e != "closing" {
		t.Fatalf("event %q, want closing", e)
	}
	_, _, err := h.b.Submit(context.Background(), 1, req(1, 0x20))
	wantStatus(t, "after Close", err, codes.Unavailable, "model 'm/1' is shutting down")
	select {
	case <-closed:
		t.Fatal("Close returned while an execution was running")
	default:
	}
	h.release()
	<-closed
	<-first
	wantOK(t, "queued before Close", <-ra, 2, a)
	wantCall(t, h.rc.seen()[1], 4, padded(4, a))
	h.b.Close() // again: returns at once
}

// Many callers at once: every request gets exactly its own rows back, whatever the batches.
func TestConcurrentRequestsGetTheirOwnRows(t *testing.T) {
	cfg := testConfig()
	cfg.MaxQueueDelay = 20 * time.Microsecond
	cfg.MaxQueue = 1024
	b, err := New(cfg, func(size int, in [][]byte) ([][]byte, error) { return rowwise(size, in), nil })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const callers, each = 64, 40
	var wg sync.WaitGroup
	var rows atomic.Int64
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range each {
				n := 1 + rng.IntN(8)
				in := req(n, byte(g*each+i))
				out, tm, err := b.Submit(context.Background(), n, in)
				if err != nil {
					errs <- err
					return
				}
				want := rowwise(n, in)
				if !bytes.Equal(out[0], want[0]) || !bytes.Equal(out[1], want[1]) || tm.Rows != n ||
					tm.BatchRows < n || tm.BatchSize < tm.BatchRows {
					errs <- fmt.Errorf("caller %d request %d: wrong rows or timing %+v", g, i, tm)
					return
				}
				rows.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.Requests != callers*each || int64(st.Rows) != rows.Load() {
		t.Fatalf("stats %+v: want %d requests, %d rows", st, callers*each, rows.Load())
	}
}

func TestPyRepr(t *testing.T) {
	for in, want := range map[string]string{
		"mlp/1": `'mlp/1'`, "it's": `"it's"`, `a'b"c`: `'a\'b"c'`, "a\\b\n": `'a\\b\n'`, "\x01": `'\x01'`,
	} {
		if got := pyRepr(in); got != want {
			t.Fatalf("pyRepr(%q) = %s, want %s", in, got, want)
		}
	}
}

// BenchmarkSubmit: 64 callers of 1 row each against an Exec of ~40 us (the MLP's); the
// rows/s it reports is what batching buys over 1/40us = 25,000 unbatched executions/s.
func BenchmarkSubmit(b *testing.B) {
	cfg := testConfig()
	cfg.BatchSizes = []int{1, 8, 32, 64}
	cfg.MaxQueueDelay = 100 * time.Microsecond
	cfg.MaxQueue = 1024
	bt, err := New(cfg, func(size int, in [][]byte) ([][]byte, error) {
		for start := time.Now(); time.Since(start) < 40*time.Microsecond; {
		}
		return rowwise(size, in), nil
	})
	if err != nil {
		b.Fatal(err)
	}
	defer bt.Close()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 callers in all
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		in := req(1, 1)
		for pb.Next() {
			if _, _, err := bt.Submit(context.Background(), 1, in); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func TestCostEstimates(t *testing.T) {
	ms := func(f float64) float64 { return f / 1e3 }
	c := newCosts([]int{1, 2, 4, 8, 16})
	if got := c.estimate(8); got != 0 {
		t.Fatalf("nothing measured: %v, want 0 (every size the same)", got)
	}
	c.observe(4, 4*time.Millisecond)
	for size, want := range map[int]float64{1: ms(4), 2: ms(4), 4: ms(4), 8: ms(4), 16: ms(4)} {
		if got := c.estimate(size); math.Abs(got-want) > 1e-12 {
			t.Fatalf("one size measured: estimate(%d) = %v, want %v", size, got, want)
		}
	}
	c.observe(16, 10*time.Millisecond)
	c.seed(16, time.Second) // measured already: a seed does not replace it
	if got, want := c.estimate(8), ms(6); math.Abs(got-want) > 1e-12 {
		t.Fatalf("between 4 and 16: estimate(8) = %v, want %v (the line through them)", got, want)
	}
	c.observe(4, 8*time.Millisecond) // exponential average: a quarter of the way to 8 ms
	if got, want := c.estimate(4), ms(5); math.Abs(got-want) > 1e-12 {
		t.Fatalf("after a slower run: estimate(4) = %v, want %v", got, want)
	}
	if !c.cheaperPerRow(4, 4, 16, 5) || c.cheaperPerRow(16, 5, 4, 4) {
		t.Fatal("4 full rows at 5 ms should beat 5 rows padded to 16 at 10 ms")
	}
}
