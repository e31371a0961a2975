package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// errWorkerGone answers calls in flight on a worker that exited (or whose socket broke).
const workerGoneMessage = "execution worker exited while handling the request"

// reply is a worker's answer to one unary call or the end of one stream.
type reply struct {
	code    uint16
	message string
	body    mem.Buffer // nil when empty; pooled: ownership passes to whoever sends it
}

// free returns the body's buffer to its pool (a reply that will not be sent).
func (r *reply) free() {
	if r.body != nil {
		r.body.Free()
		r.body = nil
	}
}

func (r *reply) bodySlice() mem.BufferSlice {
	if r.body == nil {
		return mem.BufferSlice{}
	}
	return mem.BufferSlice{r.body}
}

func (r *reply) err() error {
	if r.code == 0 {
		return nil
	}
	return status.Error(codes.Code(r.code), r.message)
}

// streamCall is the front's side of one ModelStreamInfer call on a worker: responses arrive
// in order on an unbounded queue so the connection's reader never blocks on a slow client.
type streamCall struct {
	mu      sync.Mutex
	items   []mem.Buffer
	end     *reply
	notify  chan struct{}
	workerN int
}

func newStreamCall() *streamCall { return &streamCall{notify: make(chan struct{}, 1)} }

func (s *streamCall) push(body mem.Buffer, end *reply) {
	s.mu.Lock()
	if end != nil {
		s.end = end
	} else {
		s.items = append(s.items, body)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// next returns the next response (body != nil), or the end of the stream.
func (s *streamCall) next() (mem.Buffer, *reply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) > 0 {
		b := s.items[0]
		s.items[0] = nil
		s.items = s.items[1:]
		return b, nil, true
	}
	if s.end != nil {
		return nil, s.end, true
	}
	return nil, nil, false
}

// conn is one connection to one worker process, multiplexing calls by id.
type conn struct {
	c        net.Conn
	uc       *net.UnixConn // c as a Unix socket (payloads >= shmThreshold go in a memfd), or nil
	wmu      sync.Mutex
	mu       sync.Mutex
	pending  map[uint64]chan *reply
	streams  map[uint64]*streamCall
	nextID   atomic.Uint64
	inflight atomic.Int64
	dead     chan struct{}
	maxFrame int
}

func newConn(c net.Conn, maxFrame int) *conn {
	uc, _ := c.(*net.UnixConn)
	return &conn{c: c, uc: uc, pending: map[uint64]chan *reply{}, streams: map[uint64]*streamCall{},
		dead: make(chan struct{}), maxFrame: maxFrame}
}

func (k *conn) write(h header, payload mem.BufferSlice) error {
	if k.uc != nil && payload.Len() >= shmThreshold {
		k.wmu.Lock()
		sent, err := writeShm(k.uc, h, payload)
		k.wmu.Unlock()
		if sent {
			return err
		}
	}
	var hb [headerSize]byte
	h.length = uint32(payload.Len())
	h.encode(hb[:])
	bufs := make(net.Buffers, 0, 1+len(payload))
	bufs = append(bufs, hb[:])
	for _, b := range payload {
		bufs = append(bufs, b.ReadOnlyData())
	}
	k.wmu.Lock()
	defer k.wmu.Unlock()
	_, err := bufs.WriteTo(k.c)
	return err
}

func (k *conn) writeBytes(h header, payload []byte) error {
	if payload == nil {
		return k.write(h, nil)
	}
	return k.write(h, mem.BufferSlice{mem.SliceBuffer(payload)})
}

// readLoop reads frames until the worker goes away; onReady is called on READY.
func (k *conn) readLoop(onReady func()) error {
	var fdr *fdReader
	var r *bufio.Reader
	if k.uc != nil {
		fdr = newFdReader(k.uc)
		defer fdr.close()
		r = bufio.NewReaderSize(fdr, 64*1024)
	} else {
		r = bufio.NewReaderSize(k.c, 64*1024)
	}
	var hb [headerSize]byte
	defer k.fail()
	for {
		h, err := readHeader(r, hb[:])
		if err != nil {
			return err
		}
		if int(h.length) > k.maxFrame {
			return fmt.Errorf("worker frame of %d bytes exceeds %d", h.length, k.maxFrame)
		}
		// The payload: from the socket, or (shmFlag) from the memfd sent with the header.
		var shm *mapping
		if h.ftype&shmFlag != 0 {
			h.ftype &^= shmFlag
			if fdr == nil {
				return errNoFd
			}
			fd, err := fdr.next()
			if err != nil {
				return err
			}
			if shm, err = mapFd(fd, int(h.length)); err != nil {
				return err
			}
		}
		switch h.ftype {
		case frameReady:
			if shm != nil {
				shm.Put(nil)
			} else if _, err := r.Discard(int(h.length)); err != nil {
				return err
			}
			onReady()
		case frameReply, frameStreamEnd:
			if h.aux < 0 || h.aux > int64(h.length) {
				if shm != nil {
					shm.Put(nil)
				}
				return fmt.Errorf("status message length %d beyond payload %d", h.aux, h.length)
			}
			var msg string
			var body mem.Buffer
			if shm != nil {
				msg = string(shm.data[:h.aux])
				if int64(h.length) > h.aux {
					body = shm.buffer(int(h.aux))
				} else {
					shm.Put(nil)
				}
			} else {
				m := make([]byte, h.aux)
				if _, err := io.ReadFull(r, m); err != nil {
					return err
				}
				msg = string(m)
				if body, err = readPooled(r, int(h.length)-int(h.aux)); err != nil {
					return err
				}
			}
			rep := &reply{code: h.code, message: msg, body: body}
			k.mu.Lock()
			var ch chan *reply
			var s *streamCall
			if h.ftype == frameReply {
				ch = k.pending[h.id]
				delete(k.pending, h.id)
			} else {
				s = k.streams[h.id]
				delete(k.streams, h.id)
			}
			k.mu.Unlock()
			switch {
			case ch != nil:
				ch <- rep
			case s != nil:
				rep.free()
				s.push(nil, rep)
			default:
				rep.free() // the caller already went away
			}
		case frameStreamReply:
			var body mem.Buffer
			if shm != nil {
				body = shm.buffer(0)
			} else if body, err = readPooled(r, int(h.length)); err != nil {
				return err
			}
			k.mu.Lock()
			s := k.streams[h.id]
			k.mu.Unlock()
			if s == nil {
				if body != nil {
					body.Free()
				}
				continue
			}
			s.push(body, nil)
		default:
			if shm != nil {
				shm.Put(nil)
			}
			return fmt.Errorf("unexpected frame type %d from worker", h.ftype)
		}
	}
}

// readPooled reads n bytes into a buffer from gRPC's pool (large responses reuse memory
// instead of faulting in fresh pages each time); nil for n == 0.
func readPooled(r io.Reader, n int) (mem.Buffer, error) {
	if n == 0 {
		return nil, nil
	}
	pool := mem.DefaultBufferPool()
	bp := pool.Get(n)
	if _, err := io.ReadFull(r, *bp); err != nil {
		pool.Put(bp)
		return nil, err
	}
	return mem.NewBuffer(bp, pool), nil
}

// fail ends every call in flight with UNAVAILABLE (the worker is gone).
func (k *conn) fail() {
	k.mu.Lock()
	select {
	case <-k.dead:
	default:
		close(k.dead)
	}
	gone := &reply{code: uint16(codes.Unavailable), message: workerGoneMessage}
	for id, ch := range k.pending {
		ch <- gone
		delete(k.pending, id)
	}
	for id, s := range k.streams {
		s.push(nil, gone)
		delete(k.streams, id)
	}
	k.mu.Unlock()
	k.c.Close()
}

func timeoutMicros(ctx context.Context) int64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return noDeadline
	}
	return max(0, time.Until(dl).Microseconds())
}

// call forwards one unary RPC and waits for the worker's reply, the caller going away, or the
// worker dying.
func (k *conn) call(ctx context.Context, method uint8, payload mem.BufferSlice) (*reply, error) {
	ctx, span := startWorkerSpan(ctx, method)
	r, err := k.callFrame(ctx, frameCall, method, payload)
	if err == nil {
		endSpan(span, r.err())
	} else {
		endSpan(span, err)
	}
	return r, err
}

// callFrame sends one request frame of type ftype and waits for its REPLY.
func (k *conn) callFrame(ctx context.Context, ftype uint8, method uint8, payload mem.BufferSlice) (*reply, error) {
	id := k.nextID.Add(1)
	ch := make(chan *reply, 1)
	k.mu.Lock()
	select {
	case <-k.dead:
		k.mu.Unlock()
		return nil, status.Error(codes.Unavailable, workerGoneMessage)
	default:
	}
	k.pending[id] = ch
	k.mu.Unlock()
	k.inflight.Add(1)
	defer k.inflight.Add(-1)
	if err := k.write(header{ftype: ftype, method: method, id: id, aux: timeoutMicros(ctx)}, payload); err != nil {
		k.fail()
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		k.mu.Lock()
		delete(k.pending, id)
		k.mu.Unlock()
		_ = k.writeBytes(header{ftype: frameCancel, method: method, id: id}, nil)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// openStream registers a stream and sends STREAM_OPEN.
func (k *conn) openStream(ctx context.Context, method uint8) (uint64, *streamCall, error) {
	id := k.nextID.Add(1)
	s := newStreamCall()
	k.mu.Lock()
	select {
	case <-k.dead:
		k.mu.Unlock()
		return 0, nil, status.Error(codes.Unavailable, workerGoneMessage)
	default:
	}
	k.streams[id] = s
	k.mu.Unlock()
	if err := k.writeBytes(header{ftype: frameStreamOpen, method: method, id: id, aux: timeoutMicros(ctx)}, nil); err != nil {
		k.fail()
	}
	return id, s, nil
}

func (k *conn) forgetStream(id uint64) {
	k.mu.Lock()
	delete(k.streams, id)
	k.mu.Unlock()
}

// worker supervises one worker process: start, connect, restart when it dies.
type worker struct {
	index   int
	cmd     []string
	sockDir string
	front   *front
	stop    <-chan struct{}

	mu    sync.Mutex
	conn  *conn
	ready bool
	proc  *os.Process
}

func (w *worker) current() (*conn, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.conn, w.ready
}

// supervise runs the worker until the front stops, restarting it whenever it exits.
func (w *worker) supervise() {
	stop := w.stop
	backoff := 100 * time.Millisecond
	for {
		started := time.Now()
		err := w.runOnce()
		select {
		case <-stop:
			return
		default:
		}
		if time.Since(started) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		workerRestarts.Add(1)
		slog.Warn("worker exited; restarting", "worker", w.index, "error", errString(err),
			"restart_in_s", backoff.Seconds())
		select {
		case <-stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runOnce starts one worker process on a fresh listening socket, connects to it, and returns
// when the process has exited.
func (w *worker) runOnce() error {
	path := filepath.Join(w.sockDir, fmt.Sprintf("w%d.sock", w.index))
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	ln.SetUnlinkOnClose(false)
	lf, err := ln.File()
	if err != nil {
		ln.Close()
		return err
	}
	args := append(append([]string{}, w.cmd[1:]...), "--listen-fd", "3")
	args = append(args, w.front.workerArgs...)
	cmd := exec.Command(w.cmd[0], args...)
	cmd.Stdout = os.Stderr // the worker's stdout is not the front's report channel
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{lf}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		lf.Close()
		ln.Close()
		return err
	}
	lf.Close()
	// Connect before anyone else can: the socket is ours until unlinked; the connection waits
	// in the listen backlog until the worker accepts it.
	c, err := net.Dial("unix", path)
	ln.Close()
	_ = os.Remove(path)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	k := newConn(c, w.front.maxMessageBytes+frameSlack)
	w.mu.Lock()
	w.conn, w.ready, w.proc = k, false, cmd.Process
	w.mu.Unlock()
	select {
	case <-w.stop: // the front began stopping while this worker started
		_ = cmd.Process.Signal(syscall.SIGTERM)
	default:
	}
	slog.Info("worker started", "worker", w.index, "pid", cmd.Process.Pid)
	readDone := make(chan error, 1)
	go func() {
		readDone <- k.readLoop(func() {
			w.mu.Lock()
			w.ready = true
			w.mu.Unlock()
			slog.Info("worker ready", "worker", w.index, "pid", cmd.Process.Pid)
			w.front.updateHealth()
			go func() { // which models the front runs natively (native.go), then health again
				w.front.native.sync(context.Background())
				w.front.updateHealth()
			}()
		})
	}()
	waitErr := cmd.Wait()
	k.fail() // also ends the reader
	<-readDone
	w.mu.Lock()
	w.conn, w.ready, w.proc = nil, false, nil
	w.mu.Unlock()
	w.front.updateHealth()
	if waitErr == nil {
		return errors.New("exited with status 0")
	}
	return waitErr
}

// signal sends sig to the running worker process, if any.
func (w *worker) signal(sig os.Signal) {
	w.mu.Lock()
	p := w.proc
	w.mu.Unlock()
	if p != nil {
		_ = p.Signal(sig)
	}
}
