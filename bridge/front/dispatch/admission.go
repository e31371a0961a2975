package dispatch

// Admission control of every unbatched model's executions, whichever engine executes them.
//
// Each model version (key "name/version") gets maxInflight execution slots and a FIFO waiting
// line of at most maxQueue requests. A request that finds both full is shed at once
// (RESOURCE_EXHAUSTED): a burst above capacity costs the excess callers a fast, retryable
// error instead of costing everyone memory and latency.
//
// A request is never executed for a caller that can no longer use the answer: if its
// context's deadline passes while it waits (or before it gets here) it fails
// DEADLINE_EXCEEDED; if the caller cancels or disconnects while it waits it fails CANCELLED.
// Both are checked again right before the slot is handed to the caller. Work already running
// is not interrupted (a compiled XLA call cannot be), so maxInflight bounds that waste.
//
// Cost: an uncontended acquire + release is two lock/unlock pairs, a map lookup and counter
// updates, with no allocation and no goroutine. Only a request that has to wait takes a
// pooled waiter (a 1-buffered channel) and blocks in one select on it and ctx.Done().
//
// A key's state (a few counters) is kept after the key goes idle: it carries the cumulative
// outcome totals (jaxport_admission_total), and keeping it spares the uncontended path an
// allocation. Keys are model versions the front resolved (never a caller's invented name), so
// the state is bounded by the versions ever served.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

// Outcomes of one acquire, indices into admissionLine.counts; the names are the
// `outcome` label values of jaxport_admission_total.
const (
	outcomeAdmitted = iota
	outcomeShed
	outcomeExpired
	outcomeCancelled
	numOutcomes
	noRefusal = -1
)

var admissionOutcomes = [numOutcomes]string{"admitted", "shed", "expired", "cancelled"}

// admission holds the slots and waiting lines of every model version; safe for concurrent use.
type Admission struct {
	maxInflight int
	maxQueue    int
	log         *slog.Logger // nil: slog.Default() at the time of logging (main sets it)

	mu      sync.Mutex
	lines   map[string]*admissionLine
	waiters sync.Pool // *admissionWaiter, reused: a waiting request allocates nothing either
}

// admissionLine is one key's state: slots in use, the FIFO line, cumulative outcome counts.
type admissionLine struct {
	inflight int
	waiters  []*admissionWaiter // oldest first
	counts   [numOutcomes]uint64
}

// admissionWaiter is one request waiting in a line. release hands it the slot by setting
// granted and sending on ready, both under admission.mu.
type admissionWaiter struct {
	ready   chan struct{} // capacity 1: the one grant never blocks the releaser
	granted bool
}

// admissionTotal names one jaxport_admission_total sample: model is the model's name (the
// key without its "/version", as the workers label it), outcome one of admissionOutcomes.
type admissionTotal struct {
	model   string
	outcome string
}

// NewAdmission gives each model version maxInflight slots (>= 1) and a line of maxQueue
// (>= 0). The configuration is validated before (package config), so other values are a
// programming error: it panics.
func NewAdmission(maxInflight, maxQueue int) *Admission {
	if maxInflight < 1 {
		panic(fmt.Sprintf("max in-flight requests per model must be >= 1, got %d", maxInflight))
	}
	if maxQueue < 0 {
		panic(fmt.Sprintf("max queued requests per model must be >= 0, got %d", maxQueue))
	}
	a := &Admission{maxInflight: maxInflight, maxQueue: maxQueue, lines: map[string]*admissionLine{}}
	a.waiters.New = func() any { return &admissionWaiter{ready: make(chan struct{}, 1)} }
	return a
}

// Acquire takes one execution slot of key ("name/version", a model version the front
// serves) or returns the status error the workers give: RESOURCE_EXHAUSTED (shed),
// DEADLINE_EXCEEDED (ctx's deadline passed before the slot was ours) or CANCELLED (ctx was
// cancelled first). Every nil return needs exactly one Release(key).
func (a *Admission) Acquire(ctx context.Context, key string) error {
	refusal := refusalOf(ctx)
	a.mu.Lock()
	line := a.lines[key]
	if line == nil {
		line = &admissionLine{}
		a.lines[key] = line
	}
	if refusal != noRefusal {
		line.counts[refusal]++
		a.mu.Unlock()
		return a.refuse(key, refusal, "")
	}
	if line.inflight < a.maxInflight && len(line.waiters) == 0 {
		line.inflight++
		line.counts[outcomeAdmitted]++
		a.mu.Unlock()
		return nil
	}
	if len(line.waiters) >= a.maxQueue {
		line.counts[outcomeShed]++
		a.mu.Unlock()
		return status.New(codes.ResourceExhausted, fmt.Sprintf(
			"model '%s' is at capacity (%d running, %d waiting); retry later with backoff",
			key, a.maxInflight, a.maxQueue))
	}
	w := a.waiters.Get().(*admissionWaiter)
	line.waiters = append(line.waiters, w)
	a.mu.Unlock()
	return a.wait(ctx, key, line, w)
}

// wait blocks a queued request until release hands it a slot or its ctx is done.
func (a *Admission) wait(ctx context.Context, key string, line *admissionLine, w *admissionWaiter) error {
	select {
	case <-w.ready:
	case <-ctx.Done():
		refusal := refusalOf(ctx)
		a.mu.Lock()
		if !w.granted {
			line.remove(w)
			line.counts[refusal]++
			a.mu.Unlock()
			a.waiters.Put(w)
			return a.refuse(key, refusal, " (while queued)")
		}
		// The slot was handed over meanwhile; its grant is already in the channel (sent
		// under the lock): take it out before the waiter is reused.
		a.mu.Unlock()
		<-w.ready
	}
	w.granted = false
	a.waiters.Put(w)
	// The slot is ours; a caller that is gone or late by now still must not run.
	refusal := refusalOf(ctx)
	a.mu.Lock()
	if refusal == noRefusal {
		line.counts[outcomeAdmitted]++
		a.mu.Unlock()
		return nil
	}
	line.counts[refusal]++
	a.mu.Unlock()
	a.Release(key)
	return a.refuse(key, refusal, " (at start)")
}

// Release gives back the slot an acquire took: straight to the oldest waiter if there is
// one (FIFO, no thundering herd), else it is freed. Releasing a slot never acquired is a
// programming error and panics.
func (a *Admission) Release(key string) {
	a.mu.Lock()
	line := a.lines[key]
	if line == nil || line.inflight == 0 {
		a.mu.Unlock()
		panic(fmt.Sprintf("admission: release of %q, which holds no slot", key))
	}
	if len(line.waiters) > 0 {
		line.handOff()
	} else {
		line.inflight--
	}
	a.mu.Unlock()
}

// handOff passes a held slot to the oldest waiter (admission.mu held, waiters not empty).
func (l *admissionLine) handOff() {
	w := l.waiters[0]
	n := copy(l.waiters, l.waiters[1:])
	l.waiters[n] = nil
	l.waiters = l.waiters[:n]
	w.granted = true
	w.ready <- struct{}{}
}

// remove takes w out of the line, keeping the others' order (admission.mu held).
func (l *admissionLine) remove(w *admissionWaiter) {
	for i, x := range l.waiters {
		if x == w {
			n := copy(l.waiters[i:], l.waiters[i+1:])
			l.waiters[i+n] = nil
			l.waiters = l.waiters[:i+n]
			return
		}
	}
}

// Load reports key's requests executing and waiting right now (limits.ModelLoad).
func (a *Admission) Load(key string) (inflight, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if line := a.lines[key]; line != nil {
		return line.inflight, len(line.waiters)
	}
	return 0, 0
}

// Totals is a snapshot of the cumulative outcome counts since start, summed per model name
// over its versions (the labels of jaxport_admission_total{model,outcome}); an outcome that
// never happened for a model is absent, as a Prometheus child that was never incremented.
func (a *Admission) Totals() map[admissionTotal]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[admissionTotal]uint64)
	for key, line := range a.lines {
		model := key
		if i := strings.LastIndexByte(key, '/'); i >= 0 {
			model = key[:i]
		}
		for o, n := range line.counts {
			if n > 0 {
				out[admissionTotal{model, admissionOutcomes[o]}] += n
			}
		}
	}
	return out
}

// refusalOf says whether the caller can no longer use an answer: outcomeExpired once ctx's
// deadline has passed, else outcomeCancelled once ctx is done, else noRefusal (the deadline
// first, as limits.py checks it first).
func refusalOf(ctx context.Context) int {
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return outcomeExpired
	}
	switch ctx.Err() {
	case nil:
		return noRefusal
	case context.DeadlineExceeded:
		return outcomeExpired
	default:
		return outcomeCancelled
	}
}

// refuse logs a request that will not be executed (the line tests and operators look for)
// and gives its status error. when: "", " (while queued)", " (at start)".
// A served model's name and version hold no quote or backslash (the repository's name rule),
// so "'key'" needs no escaping.
func (a *Admission) refuse(key string, outcome int, when string) error {
	logger := a.log
	if logger == nil {
		logger = slog.Default()
	}
	logger.Info(fmt.Sprintf("request not executed: model=%s outcome=%s%s", key, admissionOutcomes[outcome], when))
	if outcome == outcomeExpired {
		return status.New(codes.DeadlineExceeded, fmt.Sprintf(
			"deadline exceeded before model '%s' could run the request; not executed", key))
	}
	return status.New(codes.Canceled, fmt.Sprintf(
		"caller went away before model '%s' ran the request; not executed", key))
}

// TotalsByModel: Totals keyed (model, outcome), as /metrics writes them.
func (a *Admission) TotalsByModel() map[[2]string]uint64 {
	out := map[[2]string]uint64{}
	for k, v := range a.Totals() {
		out[[2]string{k.model, k.outcome}] = v
	}
	return out
}
