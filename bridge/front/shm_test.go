package main

import (
	"bytes"
	"errors"
	"math/rand"
	"net"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/mem"
)

// unixPair returns two connected Unix stream sockets (front side, worker side).
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	return conns[0], conns[1]
}

func payload16MiB() []byte {
	b := make([]byte, 16<<20)
	rand.New(rand.NewSource(3)).Read(b)
	return b
}

func TestLargePayloadGoesInAMemfdAndSmallOnesInline(t *testing.T) {
	front, worker := unixPair(t)
	k := newConn(front, 64<<20)
	want := payload16MiB()
	// Split across two buffers, as gRPC hands a request over.
	half := len(want) / 2
	in := mem.BufferSlice{mem.SliceBuffer(want[:half]), mem.SliceBuffer(want[half:])}
	go func() { _ = k.write(header{ftype: frameCall, method: 5, id: 3, aux: -1}, in) }()

	hb := make([]byte, headerSize+1)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := worker.ReadMsgUnix(hb, oob)
	if err != nil || n != headerSize {
		t.Fatalf("read %d bytes (%v): only the header goes through the socket", n, err)
	}
	h, _ := readHeader(bytes.NewReader(hb[:headerSize]), make([]byte, headerSize))
	if h.ftype != frameCall|shmFlag || h.length != uint32(len(want)) || h.id != 3 || h.aux != -1 {
		t.Fatalf("header %+v", h)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v %v", msgs, err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights %v %v", fds, err)
	}
	m, err := mapFd(fds[0], len(want))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.data, want) {
		t.Fatal("memfd payload differs from the bytes written")
	}
	m.Put(nil)

	small := []byte("tiny request")
	go func() { _ = k.writeBytes(header{ftype: frameCall, method: 5, id: 4}, small) }()
	got := make([]byte, headerSize+len(small))
	if _, err := readFull(worker, got); err != nil {
		t.Fatal(err)
	}
	if got[4] != frameCall || !bytes.Equal(got[headerSize:], small) {
		t.Fatalf("small frame %q", got)
	}
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	got := 0
	for got < len(b) {
		n, err := c.Read(b[got:])
		if err != nil {
			return got, err
		}
		got += n
	}
	return got, nil
}

func TestReadLoopMapsMemfdRepliesAndRefusesOneWithoutDescriptor(t *testing.T) {
	front, worker := unixPair(t)
	k := newConn(front, 64<<20)
	ch := make(chan *reply, 1)
	k.pending[7] = ch
	done := make(chan error, 1)
	go func() { done <- k.readLoop(func() {}) }()

	want := payload16MiB()
	status := []byte("") // a successful reply: empty status message, then the response
	sent, err := writeShm(worker, header{ftype: frameReply, id: 7, aux: int64(len(status))},
		mem.BufferSlice{mem.SliceBuffer(append(status, want...))})
	if !sent || err != nil {
		t.Fatalf("writeShm: sent %v, %v", sent, err)
	}
	r := <-ch
	if r.code != 0 || r.message != "" || !bytes.Equal(r.bodySlice().Materialize(), want) {
		t.Fatalf("reply code %d message %q body of %d bytes", r.code, r.message, r.bodySlice().Len())
	}
	r.free() // unmaps

	var hb [headerSize]byte
	header{ftype: frameReply | shmFlag, id: 8, length: 1 << 20}.encode(hb[:])
	if _, err := worker.Write(hb[:]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != errNoFd {
		t.Fatalf("readLoop error %v, want %v", err, errNoFd)
	}
}

// A worker that exits with bytes from the front still unread resets the connection: the
// front's read fails with ECONNRESET, and fdReader must report it as (0, err), never the -1
// ReadMsgUnix passes through (bufio.Reader panics on a negative count: a loaded test run's
// front died that way while draining).
func TestReadAfterTheWorkerResetsTheConnectionIsAnErrorNotANegativeCount(t *testing.T) {
	front, worker := unixPair(t)
	if _, err := front.Write([]byte("never read by the worker")); err != nil {
		t.Fatal(err)
	}
	worker.Close() // unread data in its receive buffer: the kernel resets the connection
	r := newFdReader(front)
	n, err := r.Read(make([]byte, 64))
	if n != 0 || err == nil {
		t.Fatalf("Read = %d, %v; want 0 and an error", n, err)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read error %v; want ECONNRESET", err)
	}
}
