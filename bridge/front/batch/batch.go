// Package batch is the server's dynamic batcher, the one for every model that batches
// whichever backend executes it (docs/performance.md "Batching policy" sets it beside
// Triton's).
//
// A model exported with `--batch-sizes 1,8,32` has one fixed-shape program per batch size.
// Submit queues one request of 1..max rows (its inputs: one raw little-endian C-order buffer
// per model input, rows*InputRowBytes[i] bytes each); one goroutine per Batcher forms batches,
// concatenates their rows into one buffer per input, pads up to an exported batch size, runs
// Exec once and hands every request its own rows of every output.
//
// Batch formation, each time the previous execution ended (the queue is taken in arrival
// order; a request is never split across executions):
//   - a request that arrives while the batcher is idle (no execution running) and its queue
//     is empty is executed at once, on its caller's goroutine: nothing else waits, so waiting
//     for company would only delay it (Triton's dynamic batcher waits max_queue_delay for it);
//   - otherwise the batch is due when its rows reach a preferred batch size (Config.Preferred,
//     default the largest exported size), when the next queued request would not fit in the
//     largest exported size, once the OLDEST queued request has waited MaxQueueDelay (0: at
//     once with whatever is queued) or, when that is shorter, as long as one execution of
//     the batch takes by the measured costs below (waiting longer for company than the
//     execution it could save costs more than it saves: a model whose execution is cheap
//     hardly waits), or when Close was called;
//   - a due batch whose rows are not an exported size runs either on the smallest exported
//     size holding them, padded, or, when a prefix of its requests fills a smaller exported
//     size exactly, on that size alone, full, the rest staying queued for the next execution
//     (with the requests that arrive meanwhile): whichever costs less per real row, by the
//     execution times this batcher has measured per size (an exponential average; sizes not
//     run yet estimated by a straight line through the measured ones; nothing measured: the
//     same cost for every size, so padding wins). Under load, executions so run the largest
//     exported size the queue fills and only the last program of a burst is padded; a model
//     whose cost hardly grows with its rows (the transport dominates) pads instead of running
//     twice;
//   - padding rows are copies of the batch's last real row (never zeros, so a row-wise runtime
//     check trips on padding only if it trips on a real row); they never reach a response.
//
// Executions of one Batcher run one at a time, on the Batcher's own goroutine (or, for a
// request that found it idle, on that request's); requests queue meanwhile and form the next
// batch.
//
// Errors (grpc status errors; <name> is Config.Name quoted as Python's repr quotes it, e.g.
// 'mlp/1', the words the workers' messages use):
//   - rows outside 1..max (callers normally refuse these before): INVALID_ARGUMENT "model
//     <name>: request batch size 9 exceeds the model's max_batch_size 8 (exported batch sizes
//     [1, 8]); split the request" and "model <name>: batch dimension of input 'x' is 0; send
//     >= 1 row"; inputs of the wrong count or byte length (a caller's bug): INVALID_ARGUMENT
//     naming the input;
//   - queue full (MaxQueue requests waiting, the executing batch not counted): UNAVAILABLE
//     "model <name>: batching queue is full (N requests waiting); retry later";
//   - after Close: UNAVAILABLE "model <name> is shutting down";
//   - a request whose ctx deadline passes while it is queued leaves the queue unexecuted:
//     DEADLINE_EXCEEDED "model <name>: deadline exceeded while waiting to be batched; request
//     not executed". A request whose caller went away (ctx cancelled) also leaves unexecuted:
//     CANCELLED "model <name>: caller went away while waiting to be batched; request not
//     executed"; its rows do not take space in a batch. Once its batch has been formed a
//     request runs to the end and Submit returns its outputs.
//   - Exec failing for a batch of several requests: each request is re-run alone (on the
//     smallest size holding its rows) so a failure caused by one request's rows (a runtime
//     check, a NaN) reaches only that request; a request gets the error Exec returned for the
//     execution that held it, unchanged (so a status error from Exec reaches the caller as
//     is). Exec returning outputs of the wrong count or length, or panicking: INTERNAL naming
//     the output.
//
// Statistics: Submit's Timing: Queue (submitted to its execution's start), Execute (that
// execution's wall time), BatchSize (the program run), Rows, First (the first request of its
// execution: the one that counts the execution) and BatchRows (real rows of the execution,
// padding excluded): ModelStatistics counts inference_count in rows and execution_count in
// executions from them. Stats gives the batcher's own counters.
//
// Every input and output has a leading batch dimension (Config.BatchedInputs/BatchedOutputs,
// nil = all): New refuses a model with one that has not (the exporter marks every input and
// output of a model exported with batch sizes as batched).
//
// Buffers: each execution's inputs are one buffer per input, reused from one execution to the
// next (executions are serialized), each request's rows copied into it once; a batch of one
// request with exactly an exported size is passed without a copy (the caller's buffers). Exec
// must neither modify nor keep its inputs, and must return freshly allocated outputs: each
// request gets sub-slices of them (capacity clipped to its own rows), no copy.
package batch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exec runs the program exported for batchSize on full batches: inputs[i] holds batchSize rows
// of input i; it returns every output of the model (batchSize rows each), in Config order.
type Exec func(batchSize int, inputs [][]byte) ([][]byte, error)

// Config says how one model batches: its exported sizes, the queue's rules and the row layout.
type Config struct {
	BatchSizes     []int         // exported batch sizes (any order; kept ascending)
	Preferred      []int         // dispatch at once at these rows; default: the largest size
	MaxQueueDelay  time.Duration // how long the oldest queued request may wait for others
	MaxQueue       int           // queued requests beyond which Submit refuses (>= 1)
	InputNames     []string      // the model's inputs, in Exec's order (for messages)
	InputRowBytes  []int         // bytes of one row of each input
	OutputNames    []string      // the model's outputs, in Exec's order (for messages)
	OutputRowBytes []int         // bytes of one row of each output
	BatchedInputs  []bool        // nil: all; a false entry is refused (see the package doc)
	BatchedOutputs []bool        // nil: all; a false entry is refused
	Name           string        // "model/version" as messages name it
	// Costs: what one execution of an exported size took where it was timed before (e.g. the
	// warm-up at load); optional, the first estimates of the sizes (see the package doc).
	Costs map[int]time.Duration
}

// Timing is where one request's time went.
type Timing struct {
	Queue     time.Duration // from Submit to the start of its execution
	Execute   time.Duration // its execution's wall time
	BatchSize int           // the exported batch size that ran (padding included)
	Rows      int           // this request's rows
	First     bool          // first request of its execution (counts the execution once)
	BatchRows int           // real rows of its execution (padding excluded)
}

// Stats are the batcher's counters.
type Stats struct {
	Requests          int         // requests queued
	Batches           int         // successful executions
	Rows              int         // real rows executed
	PaddedRows        int         // padding rows executed
	IsolatedReruns    int         // failed batches re-run request by request
	RejectedQueueFull int         // refused: queue full
	Expired           int         // left the queue unexecuted: deadline passed
	Cancelled         int         // left the queue unexecuted: caller went away
	BatchSizeCounts   map[int]int // successful executions by exported batch size
	Immediate         int         // requests that found the batcher idle and empty: run at once, inline
	Splits            int         // due batches run as a smaller full program, the rest left queued
}

// Batcher gathers concurrent requests of one model into executions of its exported sizes.
type Batcher struct {
	cfg       Config
	exec      Exec
	quoted    string // Config.Name as Python's repr
	sizes     []int  // ascending
	maxRows   int
	prefMax   int
	preferred []bool // indexed by rows 0..maxRows
	programOf []int  // smallest exported size >= rows, indexed by rows 0..maxRows
	exported  []bool // indexed by rows 0..maxRows: an exported size
	now       func() time.Time

	mu         sync.Mutex
	queue      []*request
	queuedRows int
	waiting    bool // the worker waits for a submit (wake) or the oldest's delay
	executing  bool // an execution is running (or its batch is being formed)
	closed     bool
	stats      Stats
	cost       costs
	// hook: tests only (nil otherwise), called with mu held on "queued", "closing" and
	// "waiting" (the worker waits for company or for the oldest's delay).
	hook func(event string)

	wake    chan struct{}  // cap 1: a waiting worker has something new to look at
	stopped chan struct{}  // closed when the worker has drained the queue and returned
	inline  sync.WaitGroup // executions on a caller's goroutine (Close waits for them)
	once    sync.Once

	// Worker-owned (only the worker goroutine touches them).
	bufs   [][]byte // per input: maxRows rows, reused by every execution
	inputs [][]byte // the execution's inputs (views of bufs), reused
	batch  []*request
	pool   sync.Pool
}

const (
	queued = iota // in b.queue
	taken         // popped by the worker: it will signal done
)

type request struct {
	ctx      context.Context
	rows     int
	inputs   [][]byte
	enqueued time.Time
	state    int
	done     chan struct{} // cap 1: the worker's one signal
	self     [1]*request   // a batch of this request alone (run inline)
	out      [][]byte
	timing   Timing
	err      error
}

// New checks cfg and starts the batcher's goroutine; Close stops it.
func New(cfg Config, exec Exec) (*Batcher, error) { return newBatcher(cfg, exec, time.Now) }

// newBatcher is New on the clock now (tests: a clock of their own).
func newBatcher(cfg Config, exec Exec, now func() time.Time) (*Batcher, error) {
	sizes := slices.Clone(cfg.BatchSizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	if len(sizes) == 0 || sizes[0] < 1 {
		return nil, fmt.Errorf("batch_sizes must be positive integers, got %s", pyList(cfg.BatchSizes))
	}
	maxRows := sizes[len(sizes)-1]
	preferred := slices.Clone(cfg.Preferred)
	slices.Sort(preferred)
	preferred = slices.Compact(preferred)
	if len(preferred) == 0 {
		preferred = []int{maxRows}
	}
	var bad []int
	for _, p := range preferred {
		if p < 1 || p > maxRows {
			bad = append(bad, p)
		}
	}
	if bad != nil {
		return nil, fmt.Errorf("preferred batch sizes %s are outside 1..%d (the largest exported batch size)",
			pyList(bad), maxRows)
	}
	if cfg.MaxQueueDelay < 0 {
		return nil, fmt.Errorf("max_queue_delay_us must be >= 0, got %d", cfg.MaxQueueDelay.Microseconds())
	}
	if cfg.MaxQueue < 1 {
		return nil, fmt.Errorf("max_queue_size must be >= 1, got %d", cfg.MaxQueue)
	}
	if exec == nil {
		return nil, fmt.Errorf("model %s: no Exec", pyRepr(cfg.Name))
	}
	if err := checkLayout(cfg.Name, "input", cfg.InputNames, cfg.InputRowBytes, cfg.BatchedInputs); err != nil {
		return nil, err
	}
	if err := checkLayout(cfg.Name, "output", cfg.OutputNames, cfg.OutputRowBytes, cfg.BatchedOutputs); err != nil {
		return nil, err
	}
	b := &Batcher{
		cfg: cfg, exec: exec, quoted: pyRepr(cfg.Name), sizes: sizes, maxRows: maxRows,
		prefMax:   preferred[len(preferred)-1],
		preferred: make([]bool, maxRows+1),
		programOf: make([]int, maxRows+1),
		exported:  make([]bool, maxRows+1),
		now:       now,
		cost:      newCosts(sizes),
		wake:      make(chan struct{}, 1),
		stopped:   make(chan struct{}),
		bufs:      make([][]byte, len(cfg.InputRowBytes)),
		inputs:    make([][]byte, len(cfg.InputRowBytes)),
		stats:     Stats{BatchSizeCounts: map[int]int{}},
	}
	b.pool.New = func() any { return &request{done: make(chan struct{}, 1)} }
	for _, p := range preferred {
		b.preferred[p] = true
	}
	for _, s := range sizes {
		b.exported[s] = true
	}
	for s, d := range cfg.Costs {
		b.cost.seed(s, d)
	}
	for rows, k := 1, 0; rows <= maxRows; rows++ {
		for sizes[k] < rows {
			k++
		}
		b.programOf[rows] = sizes[k]
	}
	go b.run()
	return b, nil
}

// checkLayout: names and row sizes agree in count, sizes are >= 0, every one is batched.
func checkLayout(model, kind string, names []string, rowBytes []int, batched []bool) error {
	if len(names) != len(rowBytes) || (batched != nil && len(batched) != len(rowBytes)) {
		return fmt.Errorf("model %s: %d %s names, %d row sizes and %d batched flags disagree",
			pyRepr(model), len(names), kind, len(rowBytes), len(batched))
	}
	for i, n := range rowBytes {
		if n < 0 {
			return fmt.Errorf("model %s: %s %s has %d bytes per row", pyRepr(model), kind, pyRepr(names[i]), n)
		}
		if batched != nil && !batched[i] {
			return fmt.Errorf("model %s: %s %s has no batch dimension; dynamic batching needs one on "+
				"every input and output", pyRepr(model), kind, pyRepr(names[i]))
		}
	}
	return nil
}

// MaxBatchSize is the largest exported batch size: the most rows one request may carry.
func (b *Batcher) MaxBatchSize() int { return b.maxRows }

// Stats returns a snapshot of the counters.
func (b *Batcher) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.BatchSizeCounts = make(map[int]int, len(b.stats.BatchSizeCounts))
	for k, v := range b.stats.BatchSizeCounts {
		s.BatchSizeCounts[k] = v
	}
	return s
}

// Submit queues one request of `rows` rows and waits for its execution: its own rows of every
// output (Exec's order), its Timing, or its error (see the package doc). inputs must stay
// unchanged until Submit returns.
func (b *Batcher) Submit(ctx context.Context, rows int, inputs [][]byte) ([][]byte, Timing, error) {
	if err := b.check(rows, inputs); err != nil {
		return nil, Timing{}, err
	}
	r := b.pool.Get().(*request)
	r.ctx, r.rows, r.inputs, r.state = ctx, rows, inputs, queued
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.put(r)
		return nil, Timing{}, status.Errorf(codes.Unavailable, "model %s is shutting down", b.quoted)
	}
	if err := ctx.Err(); err != nil { // late already: never queued, as the worker would expire it
		err = b.leftLocked(err)
		b.mu.Unlock()
		b.put(r)
		return nil, Timing{}, err
	}
	if len(b.queue) >= b.cfg.MaxQueue {
		b.stats.RejectedQueueFull++
		b.mu.Unlock()
		b.put(r)
		return nil, Timing{}, status.Errorf(codes.Unavailable,
			"model %s: batching queue is full (%d requests waiting); retry later", b.quoted, b.cfg.MaxQueue)
	}
	wasEmpty := len(b.queue) == 0
	r.enqueued = b.now()
	if wasEmpty && !b.executing { // idle, nothing waits: run it now, here
		b.executing, r.state = true, taken
		b.stats.Requests++
		b.stats.Immediate++
		b.inline.Add(1)
		if b.hook != nil {
			b.hook("queued")
		}
		b.mu.Unlock()
		r.self[0] = r
		b.dispatch(r.self[:], rows)
		<-r.done
		out, timing, err := r.out, r.timing, r.err
		b.put(r)
		b.inline.Done()
		return out, timing, err
	}
	b.queue = append(b.queue, r)
	b.queuedRows += rows
	b.stats.Requests++
	// Wake a waiting worker only when this request can change its decision: the queue was
	// empty (no delay running yet) or the queue's rows now make a batch due.
	if b.waiting && (wasEmpty || b.queuedRows >= b.prefMax || b.preferred[b.queuedRows]) {
		b.signalLocked()
	}
	if b.hook != nil {
		b.hook("queued")
	}
	b.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		b.mu.Lock()
		if r.state == queued {
			b.removeLocked(r)
			err := b.leftLocked(ctx.Err())
			b.signalLocked() // the queue's rows changed: a batch may be due now
			b.mu.Unlock()
			b.put(r)
			return nil, Timing{}, err
		}
		b.mu.Unlock()
		<-r.done // its batch is formed: it runs to the end
	}
	out, timing, err := r.out, r.timing, r.err
	b.put(r)
	return out, timing, err
}

// check refuses what cannot be batched.
func (b *Batcher) check(rows int, inputs [][]byte) error {
	if len(inputs) != len(b.cfg.InputRowBytes) {
		return status.Errorf(codes.InvalidArgument, "model %s: %d inputs given, the model takes %d (%s)",
			b.quoted, len(inputs), len(b.cfg.InputRowBytes), strings.Join(b.cfg.InputNames, ", "))
	}
	if rows < 1 {
		first := ""
		if len(b.cfg.InputNames) > 0 {
			first = b.cfg.InputNames[0]
		}
		return status.Errorf(codes.InvalidArgument,
			"model %s: batch dimension of input %s is %d; send >= 1 row", b.quoted, pyRepr(first), rows)
	}
	if rows > b.maxRows {
		return status.Errorf(codes.InvalidArgument,
			"model %s: request batch size %d exceeds the model's max_batch_size %d (exported batch sizes %s); split the request",
			b.quoted, rows, b.maxRows, pyList(b.sizes))
	}
	for i, in := range inputs {
		if want := rows * b.cfg.InputRowBytes[i]; len(in) != want {
			return status.Errorf(codes.InvalidArgument,
				"model %s: input %s of %d bytes cannot be batched: %d rows of %d bytes are %d",
				b.quoted, pyRepr(b.cfg.InputNames[i]), len(in), rows, b.cfg.InputRowBytes[i], want)
		}
	}
	return nil
}

// leftLocked counts a request leaving unexecuted because its ctx is done and gives its error.
func (b *Batcher) leftLocked(ctxErr error) error {
	if ctxErr == context.DeadlineExceeded {
		b.stats.Expired++
		return status.Errorf(codes.DeadlineExceeded,
			"model %s: deadline exceeded while waiting to be batched; request not executed", b.quoted)
	}
	b.stats.Cancelled++
	return status.Errorf(codes.Canceled,
		"model %s: caller went away while waiting to be batched; request not executed", b.quoted)
}

func (b *Batcher) removeLocked(r *request) {
	if i := slices.Index(b.queue, r); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.queuedRows -= r.rows
	}
}

func (b *Batcher) signalLocked() {
	if b.waiting {
		b.waiting = false
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

func (b *Batcher) put(r *request) {
	*r = request{done: r.done}
	r.self[0] = nil
	b.pool.Put(r)
}

// Close stops taking requests (UNAVAILABLE "... is shutting down"), executes the queued ones
// without waiting for company, and returns once the last execution has ended. Safe to call
// more than once.
func (b *Batcher) Close() {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.signalLocked()
		if b.hook != nil {
			b.hook("closing")
		}
		b.mu.Unlock()
	})
	<-b.stopped
	b.inline.Wait()
}

// run is the batcher's goroutine: form a batch, execute it, repeat; returns when closed and
// drained.
func (b *Batcher) run() {
	defer close(b.stopped)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		batch, rows := b.take(timer)
		if batch == nil {
			return
		}
		b.dispatch(batch, rows)
		clear(b.batch)
	}
}

// take blocks until a batch is due and no execution runs (one may run inline), and pops it;
// nil when the batcher is closed and its queue empty. A request whose ctx is done by now
// leaves unexecuted. The batch it returns is executing from here on (b.executing) until
// dispatch has run it.
func (b *Batcher) take(timer *time.Timer) ([]*request, int) {
	b.mu.Lock()
	for {
		rows, count, due := 0, 0, false
		for count < len(b.queue) {
			r := b.queue[count]
			if err := r.ctx.Err(); err != nil {
				b.queue = slices.Delete(b.queue, count, count+1)
				b.queuedRows -= r.rows
				r.err, r.state = b.leftLocked(err), taken
				r.done <- struct{}{}
				continue
			}
			if rows+r.rows > b.maxRows {
				due = true // the next request cannot join: this batch is full
				break
			}
			rows += r.rows
			count++
			if rows >= b.prefMax || b.preferred[rows] {
				due = true
				break
			}
		}
		if count == 0 {
			if b.closed {
				b.mu.Unlock()
				return nil, 0
			}
			b.waiting = true
			b.mu.Unlock()
			<-b.wake
			b.mu.Lock()
			b.waiting = false
			continue
		}
		if b.executing { // inline: its end wakes the worker
			b.waiting = true
			b.mu.Unlock()
			<-b.wake
			b.mu.Lock()
			b.waiting = false
			continue
		}
		var wait time.Duration
		if !due && !b.closed {
			delay := b.cfg.MaxQueueDelay
			if c := b.cost.estimate(b.programOf[rows]); c > 0 && c < delay.Seconds() {
				delay = time.Duration(c * float64(time.Second))
			}
			wait = b.queue[0].enqueued.Add(delay).Sub(b.now())
		}
		if wait <= 0 { // due, closing, or the oldest request has waited long enough
			count, rows = b.planLocked(count, rows)
			b.batch = append(b.batch[:0], b.queue[:count]...)
			for _, r := range b.batch {
				r.state = taken
			}
			n := copy(b.queue, b.queue[count:])
			clear(b.queue[n:])
			b.queue = b.queue[:n]
			b.queuedRows -= rows
			b.executing = true
			b.mu.Unlock()
			return b.batch, rows
		}
		b.waiting = true
		if b.hook != nil {
			b.hook("waiting")
		}
		b.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-b.wake:
		case <-timer.C:
		}
		timer.Stop()
		b.mu.Lock()
		b.waiting = false
	}
}

// planLocked chooses how much of a due batch (the queue's first count requests, rows rows)
// runs now: all of it on the smallest exported size holding it, or, when a prefix of it fills
// a smaller exported size exactly and that costs less per real row (b.cost), that prefix
// alone, full; the rest stays queued.
func (b *Batcher) planLocked(count, rows int) (int, int) {
	padded := b.programOf[rows]
	if padded == rows {
		return count, rows
	}
	fillCount, fill, sum := 0, 0, 0
	for k := 0; k < count-1; k++ {
		if sum += b.queue[k].rows; b.exported[sum] {
			fillCount, fill = k+1, sum
		}
	}
	if fillCount == 0 || !b.cost.cheaperPerRow(fill, fill, padded, rows) {
		return count, rows
	}
	b.stats.Splits++
	return fillCount, fill
}

// dispatch executes one batch (b.executing is set) and answers its requests; a failing batch
// of several requests is re-run request by request. The batcher is idle again (b.executing
// false, a waiting worker woken) before the requests are answered, so the next request of a
// caller that waited for this answer finds it idle.
func (b *Batcher) dispatch(batch []*request, rows int) {
	outs, t0, t1, size, err := b.execute(batch, rows)
	if err != nil && len(batch) > 1 {
		b.mu.Lock()
		b.stats.IsolatedReruns++
		b.mu.Unlock()
		for _, r := range batch {
			b.mu.Lock()
			b.executing = true
			b.mu.Unlock()
			b.dispatch([]*request{r}, r.rows)
		}
		return
	}
	b.mu.Lock()
	b.executing = false
	b.signalLocked()
	if err != nil {
		b.mu.Unlock()
		r := batch[0]
		r.err = err
		r.done <- struct{}{}
		return
	}
	st := &b.stats
	st.Batches++
	st.Rows += rows
	st.PaddedRows += size - rows
	st.BatchSizeCounts[size]++
	b.cost.observe(size, t1.Sub(t0))
	b.mu.Unlock()
	views := make([][]byte, len(batch)*len(outs)) // every request's outputs: one allocation
	offset := 0
	for i, r := range batch {
		own := views[i*len(outs) : (i+1)*len(outs) : (i+1)*len(outs)]
		for j, out := range outs {
			rb := b.cfg.OutputRowBytes[j]
			own[j] = out[offset*rb : (offset+r.rows)*rb : (offset+r.rows)*rb]
		}
		offset += r.rows
		r.out = own
		r.timing = Timing{Queue: t0.Sub(r.enqueued), Execute: t1.Sub(t0), BatchSize: size,
			Rows: r.rows, First: i == 0, BatchRows: rows}
		r.done <- struct{}{} // r belongs to its Submit from here on
	}
}

// execute concatenates and pads the batch's inputs, runs Exec once and checks its outputs.
func (b *Batcher) execute(batch []*request, rows int) (outs [][]byte, t0, t1 time.Time, size int, err error) {
	size = b.programOf[rows]
	var inputs [][]byte
	if len(batch) == 1 && rows == size {
		inputs = batch[0].inputs // already a full batch: no copy
	} else {
		inputs = b.assemble(batch, size)
	}
	t0 = b.now()
	outs, err = b.call(size, inputs)
	t1 = b.now()
	if err != nil {
		return nil, t0, t1, size, err
	}
	if len(outs) != len(b.cfg.OutputRowBytes) {
		return nil, t0, t1, size, status.Errorf(codes.Internal,
			"model %s: the program returned %d outputs, expected %d (%s)",
			b.quoted, len(outs), len(b.cfg.OutputRowBytes), strings.Join(b.cfg.OutputNames, ", "))
	}
	for j, out := range outs {
		if rb := b.cfg.OutputRowBytes[j]; len(out) != size*rb {
			return nil, t0, t1, size, status.Errorf(codes.Internal,
				"model %s: output %s has %d bytes, expected a leading batch dimension of %d (%d rows of %d bytes)",
				b.quoted, pyRepr(b.cfg.OutputNames[j]), len(out), size, size, rb)
		}
	}
	return outs, t0, t1, size, nil
}

// assemble copies the batch's rows into the reused input buffers, padded to size rows with
// copies of the last real row.
func (b *Batcher) assemble(batch []*request, size int) [][]byte {
	inputs := b.inputs
	for i, rb := range b.cfg.InputRowBytes {
		if b.bufs[i] == nil {
			b.bufs[i] = make([]byte, b.maxRows*rb)
		}
		buf := b.bufs[i][:size*rb]
		off := 0
		for _, r := range batch {
			off += copy(buf[off:], r.inputs[i])
		}
		if rb > 0 {
			last := buf[off-rb : off]
			for ; off < len(buf); off += rb {
				copy(buf[off:off+rb], last)
			}
		}
		inputs[i] = buf
	}
	return inputs
}

// call runs Exec; a panic becomes an INTERNAL error of the execution, so the batcher's
// goroutine never dies with requests waiting for it.
func (b *Batcher) call(size int, inputs [][]byte) (outs [][]byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			outs, err = nil, status.Errorf(codes.Internal, "model %s: execution at batch size %d panicked: %v",
				b.quoted, size, p)
		}
	}()
	return b.exec(size, inputs)
}

// pyRepr quotes s as Python's repr quotes a printable string (the words of the workers'
// messages).
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var sb strings.Builder
	sb.WriteByte(quote)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == quote:
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case c == '\n':
			sb.WriteString(`\n`)
		case c == '\t':
			sb.WriteString(`\t`)
		case c == '\r':
			sb.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, c)
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte(quote)
	return sb.String()
}

// pyList formats ints as Python's str(list) does: [1, 4, 8].
func pyList(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
