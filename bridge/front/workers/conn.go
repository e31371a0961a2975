package workers

// One connection to one worker process: requests multiplexed by id, one REPLY each
// (docs/frames.md, version 2). The process around it is process.go.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GoneMessage answers the requests in flight on a worker that exited (or whose connection
// broke): UNAVAILABLE with this text.
const GoneMessage = "execution worker exited while handling the request"

// errNotSent: the connection was dead before the request was written (it may be retried).
var errNotSent = errors.New("connection closed before the request was sent")

// reply is a worker's answer: its code and the body (code 0) or the status message.
type reply struct {
	code    uint16
	payload []byte
}

func (r reply) err() error {
	if r.code == 0 {
		return nil
	}
	return status.Error(codes.Code(r.code), string(r.payload))
}

var gone = reply{code: uint16(codes.Unavailable), payload: []byte(GoneMessage)}

// hello is the worker's HELLO payload.
type hello struct {
	Version  int    `json:"version"`
	PID      int    `json:"pid"`
	Platform string `json:"platform"`
	Devices  int    `json:"devices"`
	Jax      string `json:"jax"`
}

type conn struct {
	c        *net.UnixConn
	maxFrame int
	wmu      sync.Mutex
	mu       sync.Mutex
	pending  map[uint64]chan reply
	nextID   atomic.Uint64
	inflight atomic.Int64 // EXECUTEs sent and not answered
	dead     chan struct{}
	r        *bufio.Reader
	fdr      *fdReader
	counts   *counts
}

// counts are the pool's frame counters (memfd payloads each way), for tests and logs.
type counts struct {
	memfdSent, memfdReceived atomic.Int64
}

func newConn(c *net.UnixConn, maxFrame int, n *counts) *conn {
	fdr := newFdReader(c)
	return &conn{c: c, maxFrame: maxFrame, pending: map[uint64]chan reply{}, dead: make(chan struct{}),
		fdr: fdr, r: bufio.NewReaderSize(fdr, 64*1024), counts: n}
}

// write sends one frame whose payload is parts back to back (in a memfd from shmThreshold).
func (k *conn) write(h header, parts [][]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	h.length = uint32(n)
	k.wmu.Lock()
	defer k.wmu.Unlock()
	if n >= shmThreshold {
		if sent, err := writeShm(k.c, h, parts); sent {
			k.counts.memfdSent.Add(1)
			return err
		}
	}
	var hb [headerSize]byte
	h.encode(hb[:])
	bufs := make(net.Buffers, 0, 1+len(parts))
	bufs = append(bufs, hb[:])
	bufs = append(bufs, parts...)
	_, err := bufs.WriteTo(k.c)
	return err
}

// readFrame reads the next frame; its payload is the caller's.
func (k *conn) readFrame() (header, []byte, error) {
	var hb [headerSize]byte
	h, err := readHeader(k.r, hb[:])
	if err != nil {
		return h, nil, err
	}
	if int64(h.length) > int64(k.maxFrame) {
		return h, nil, fmt.Errorf("worker frame of %d bytes exceeds the frame limit of %d", h.length, k.maxFrame)
	}
	if h.ftype&shmFlag != 0 {
		h.ftype &^= shmFlag
		fd, err := k.fdr.next()
		if err != nil {
			return h, nil, err
		}
		k.counts.memfdReceived.Add(1)
		payload, err := readFd(fd, int(h.length))
		return h, payload, err
	}
	payload := make([]byte, h.length)
	_, err = io.ReadFull(k.r, payload)
	return h, payload, err
}

// readHello reads the worker's first frame, which must be a HELLO of this protocol version.
func (k *conn) readHello() (hello, error) {
	h, payload, err := k.readFrame()
	if err != nil {
		return hello{}, err
	}
	if h.ftype != frameHello {
		return hello{}, fmt.Errorf("worker's first frame is of type %d, not HELLO", h.ftype)
	}
	if h.aux != protocolVersion {
		return hello{}, fmt.Errorf("worker speaks frame protocol version %d, the front version %d (docs/frames.md)", h.aux, protocolVersion)
	}
	var hi hello
	if err := json.Unmarshal(payload, &hi); err != nil {
		return hello{}, fmt.Errorf("worker's HELLO: %v", err)
	}
	return hi, nil
}

// readLoop reads REPLYs until the worker goes away or sends a malformed frame; then every
// request in flight fails UNAVAILABLE. The one reader of the connection (readHello first).
func (k *conn) readLoop() error {
	defer k.fail()
	for {
		h, payload, err := k.readFrame()
		if err != nil {
			return err
		}
		if h.ftype != frameReply {
			return fmt.Errorf("unexpected frame type %d from the worker", h.ftype)
		}
		k.mu.Lock()
		ch := k.pending[h.id]
		delete(k.pending, h.id)
		k.mu.Unlock()
		if ch != nil {
			ch <- reply{code: h.code, payload: payload}
		} // else: its caller went away (a cancelled execution, a load given up)
	}
}

// fail ends every request in flight with UNAVAILABLE and closes the connection.
func (k *conn) fail() {
	k.mu.Lock()
	select {
	case <-k.dead:
	default:
		close(k.dead)
	}
	for id, ch := range k.pending {
		ch <- gone
		delete(k.pending, id)
	}
	k.mu.Unlock()
	k.c.Close() // the reader's next read fails; it closes the descriptors it holds
}

// send writes one request and returns the channel its REPLY arrives on (errNotSent when the
// connection was closed before).
func (k *conn) send(ftype uint8, aux int64, parts [][]byte) (uint64, chan reply, error) {
	id := k.nextID.Add(1)
	ch := make(chan reply, 1)
	k.mu.Lock()
	select {
	case <-k.dead:
		k.mu.Unlock()
		return 0, nil, errNotSent
	default:
	}
	k.pending[id] = ch
	k.mu.Unlock()
	if err := k.write(header{ftype: ftype, id: id, aux: aux}, parts); err != nil {
		k.fail() // the reader ends too; ch gets `gone`
	}
	return id, ch, nil
}

// forget drops a request whose caller went away (a late REPLY is discarded).
func (k *conn) forget(id uint64) {
	k.mu.Lock()
	delete(k.pending, id)
	k.mu.Unlock()
}

// execute sends one EXECUTE and waits for its REPLY, the caller going away (then CANCEL), or
// the worker dying. sent (tests only; nil otherwise) runs once the request is written.
func (k *conn) execute(ctx context.Context, parts [][]byte, sent func()) (reply, error) {
	aux := int64(noDeadline)
	if dl, ok := ctx.Deadline(); ok {
		aux = max(0, time.Until(dl).Microseconds())
	}
	k.inflight.Add(1)
	defer k.inflight.Add(-1)
	id, ch, err := k.send(frameExecute, aux, parts)
	if err != nil {
		return reply{}, err
	}
	if sent != nil {
		sent()
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		k.forget(id)
		_ = k.write(header{ftype: frameCancel, id: id}, nil)
		return reply{}, status.FromContextError(ctx.Err()).Err()
	}
}

// request sends a LOAD or UNLOAD with a JSON payload and waits for its REPLY (not cancelled:
// the worker finishes a load it started; see process.go).
func (k *conn) request(ftype uint8, body any) (reply, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return reply{}, err
	}
	_, ch, err := k.send(ftype, 0, [][]byte{payload})
	if err != nil {
		return reply{}, err
	}
	return <-ch, nil
}
