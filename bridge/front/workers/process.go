package workers

// One worker process and its successors: start, HELLO, the models loaded on it, restart
// with back-off when it exits (docs/frames.md, Connection and lifecycle).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	// stableAfter: a process that ran this long restarts after firstBackoff again.
	stableAfter = 10 * time.Second
	// exitGrace: how long a process stopped by closing its connection has to exit before
	// it is killed.
	exitGrace = 5 * time.Second
)

// process supervises one worker slot. inc and startErr are under pool.mu.
type process struct {
	pool  *Pool
	index int
	stop  chan struct{}

	inc      *incarnation // the running process, once it said HELLO; nil otherwise
	startErr error        // why the last start failed before HELLO (cleared by a HELLO)
}

// incarnation is one running process; models under pool.mu.
type incarnation struct {
	pool   *Pool
	k      *conn
	pid    int
	hello  hello
	models map[uint32]*loadState
}

// loadState is one model's LOAD on one incarnation: done once answered.
type loadState struct {
	done chan struct{}
	ans  *loadAnswer
	err  error
}

// startLoad sends LOAD of h unless this incarnation has it already (pool.mu held).
func (inc *incarnation) startLoad(h *Handle) {
	if inc.models[h.number] != nil {
		return
	}
	st := &loadState{done: make(chan struct{})}
	inc.models[h.number] = st
	go func() {
		r, err := inc.k.request(frameLoad, map[string]any{"model": h.number, "key": h.model.Key,
			"location": h.model.Location, "engine": h.model.Engine})
		var ans *loadAnswer
		switch {
		case err != nil || (r.code == gone.code && bytes.Equal(r.payload, gone.payload)):
			err = status.Errorf(codes.Unavailable, "execution worker exited while loading %s", h.model.Key)
		case r.code != 0:
			err = r.err()
		default:
			ans, err = decodeLoad(r)
		}
		p := inc.pool
		p.mu.Lock()
		st.ans, st.err = ans, err
		close(st.done)
		if inc.models[h.number] != st && err == nil {
			go inc.k.request(frameUnload, map[string]any{"model": h.number}) // closed meanwhile
		}
		p.broadcastLocked()
		p.mu.Unlock()
	}()
}

// unload forgets h on this incarnation and sends UNLOAD once its LOAD is answered
// (pool.mu held).
func (inc *incarnation) unload(h *Handle) {
	st := inc.models[h.number]
	if st == nil {
		return
	}
	delete(inc.models, h.number)
	select {
	case <-st.done:
		if st.err == nil {
			go inc.k.request(frameUnload, map[string]any{"model": h.number})
		}
	default: // startLoad's goroutine sends it
	}
}

// awaitLoad waits until this process has answered h's LOAD (starting first if it must).
func (pr *process) awaitLoad(ctx context.Context, h *Handle) (*loadAnswer, error) {
	p := pr.pool
	for {
		p.mu.Lock()
		var st *loadState
		if pr.inc != nil {
			st = pr.inc.models[h.number]
		}
		startErr, wait := pr.startErr, p.changed
		stopped := isClosed(pr.stop)
		p.mu.Unlock()
		switch {
		case st != nil:
			select {
			case <-st.done:
				return st.ans, st.err
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		case startErr != nil:
			return nil, startErr
		case stopped:
			return nil, status.Errorf(codes.Unavailable, "the execution workers stopped while loading %s", h.model.Key)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// supervise runs the process until stopped, starting it again whenever it exits. It keeps
// its OS thread: PDEATHSIG fires when the THREAD that started the child exits, and a thread
// that ran a goroutine that locked it and exited (cgo code may) is ended by the runtime; this
// one lives until every process it started has exited.
func (pr *process) supervise() {
	runtime.LockOSThread()
	p := pr.pool
	backoff := firstBackoff
	for {
		started := time.Now()
		helloed, err := pr.runOnce()
		if isClosed(pr.stop) {
			return
		}
		p.mu.Lock()
		if !helloed {
			pr.startErr = status.Errorf(codes.Unavailable, "execution worker could not start: %v", err)
		}
		p.broadcastLocked()
		p.mu.Unlock()
		p.restarts.Add(1)
		if time.Since(started) > stableAfter {
			backoff = firstBackoff
		}
		p.o.log.Warn("execution worker exited; restarting", "worker", pr.index, "error", errString(err), "restart_in_s", backoff.Seconds())
		select {
		case <-pr.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// args is the worker's command line after the interpreter.
func (o *options) args() []string {
	return []string{"-m", "jaxport.bridge.worker", "--listen-fd", "3",
		"--compiled-shapes", strconv.Itoa(o.compiledShapes),
		"--max-frame-bytes", strconv.Itoa(o.maxFrameBytes),
		"--cpu-devices", strconv.Itoa(o.cpuDevices),
		"--threads", strconv.Itoa(o.threads),
		"--log-level", o.logLevel}
}

// runOnce starts one process on a fresh listening socket, connects, waits for its HELLO,
// loads every open model on it and returns once it has exited (or was stopped). helloed
// tells whether it got as far as HELLO.
func (pr *process) runOnce() (helloed bool, err error) {
	p := pr.pool
	dir, err := os.MkdirTemp("", "jaxport-worker-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	addr := &net.UnixAddr{Name: filepath.Join(dir, "w.sock"), Net: "unix"}
	ln, err := net.ListenUnix("unix", addr)
	if err != nil {
		return false, err
	}
	ln.SetUnlinkOnClose(false)
	lf, err := ln.File()
	if err != nil {
		ln.Close()
		return false, err
	}
	tail := &tailWriter{w: p.o.stderr}
	cmd := exec.Command(p.o.python, p.o.args()...)
	cmd.Env = append(os.Environ(), p.o.env...)
	cmd.Stdout, cmd.Stderr = tail, tail
	cmd.ExtraFiles = []*os.File{lf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	lf.Close()
	if err != nil {
		ln.Close()
		return false, err
	}
	// Connect before anyone else can: the socket is ours (a private directory); the
	// connection waits in the listen backlog until the worker accepts it.
	c, err := net.DialUnix("unix", nil, addr)
	ln.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return false, err
	}
	k := newConn(c, p.o.maxFrameBytes, &p.counts)
	type helloResult struct {
		hi  hello
		err error
	}
	hellos := make(chan helloResult, 1)
	go func() { // the connection's one reader
		defer k.fdr.close()
		hi, err := k.readHello()
		hellos <- helloResult{hi, err}
		if err != nil {
			k.fail()
			return
		}
		_ = k.readLoop()
	}()
	var hi hello
	select {
	case res := <-hellos:
		if res.err != nil {
			werr := pr.end(cmd, exited, k)
			return false, fmt.Errorf("%v (%v)%s", res.err, werr, tail.last())
		}
		hi = res.hi
	case werr := <-exited:
		k.fail()
		return false, fmt.Errorf("exited before its HELLO (%v)%s", werr, tail.last())
	case <-pr.stop:
		pr.end(cmd, exited, k)
		return false, nil
	}

	inc := &incarnation{pool: p, k: k, pid: cmd.Process.Pid, hello: hi, models: map[uint32]*loadState{}}
	p.mu.Lock()
	pr.inc, pr.startErr = inc, nil
	for _, h := range p.models {
		inc.startLoad(h)
	}
	p.broadcastLocked()
	p.mu.Unlock()
	p.o.log.Info("execution worker started", "worker", pr.index, "pid", inc.pid, "platform", hi.Platform, "devices", hi.Devices)

	var werr error
	select {
	case werr = <-exited:
		k.fail()
		err = fmt.Errorf("exited (%v)%s", werr, tail.last())
	case <-k.dead: // a malformed frame, or the socket broke
		werr = pr.end(cmd, exited, k)
		err = fmt.Errorf("connection lost (%v)", werr)
	case <-pr.stop:
		pr.end(cmd, exited, k)
		err = nil
	}
	p.mu.Lock()
	pr.inc = nil
	p.broadcastLocked()
	p.mu.Unlock()
	return true, err
}

// end closes the connection (the worker exits when it sees that), kills the process if it
// has not exited within exitGrace, and returns its exit error.
func (pr *process) end(cmd *exec.Cmd, exited chan error, k *conn) error {
	k.fail()
	select {
	case err := <-exited:
		return err
	case <-time.After(exitGrace):
		_ = cmd.Process.Kill()
		return <-exited
	}
}

// tailWriter passes a process's output on and keeps its last bytes, for the one line that
// says why it could not start.
type tailWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4096

func (t *tailWriter) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	t.mu.Unlock()
	if t.w != nil {
		return t.w.Write(b)
	}
	return len(b), nil
}

// last returns ": <its last non-empty output line>", or "" when it printed nothing.
func (t *tailWriter) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := bytes.Split(bytes.TrimSpace(t.buf), []byte("\n"))
	if len(lines) == 0 || len(lines[len(lines)-1]) == 0 {
		return ""
	}
	return ": " + string(bytes.TrimSpace(lines[len(lines)-1]))
}
