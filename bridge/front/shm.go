package main

// Large frame payloads travel in a memfd instead of through the socket: the rule (SHM bit,
// one descriptor per frame in arrival order, read-only mapping, malformed cases, why 1 MiB)
// is specified in docs/frames.md. Here: sending a payload in a memfd and mapping one received;
// the front hands the mapped reply to gRPC without another copy (the mapping is unmapped once
// gRPC has sent it).

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/mem"
)

const (
	// shmFlag marks a frame type whose payload is in the memfd sent with the header.
	shmFlag = 0x80
	// shmThreshold: payloads of at least this many bytes go through a memfd. Below it the
	// socket is cheaper: a few hundred KiB fit the socket buffer (one copy each way, no
	// wake-up in between), while a memfd costs ~6 system calls and a mapping.
	shmThreshold = 1 << 20
	// maxFdsPerRead bounds the descriptors accepted by one read (frames are read ahead).
	maxFdsPerRead = 64
)

var errNoFd = errors.New("shared-memory frame without a file descriptor")

// newMemfd returns a memfd holding payload (written with write(2): the kernel allocates its
// pages, no page faults in this process).
func newMemfd(payload mem.BufferSlice) (int, error) {
	fd, err := unix.MemfdCreate("jaxport-frame", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	for _, b := range payload {
		data := b.ReadOnlyData()
		for len(data) > 0 {
			n, err := syscall.Write(fd, data)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				syscall.Close(fd)
				return -1, err
			}
			data = data[n:]
		}
	}
	return fd, nil
}

// writeShm sends header h (type|shmFlag, length = payload length) with a memfd holding the
// payload; false (nothing sent) if no memfd could be made, so the caller sends it inline.
func writeShm(uc *net.UnixConn, h header, payload mem.BufferSlice) (bool, error) {
	fd, err := newMemfd(payload)
	if err != nil {
		return false, nil
	}
	defer syscall.Close(fd) // the descriptor in flight holds its own reference
	h.ftype |= shmFlag
	h.length = uint32(payload.Len())
	var hb [headerSize]byte
	h.encode(hb[:])
	n, _, err := uc.WriteMsgUnix(hb[:], syscall.UnixRights(fd), nil)
	if err == nil && n < headerSize {
		_, err = uc.Write(hb[n:])
	}
	return true, err
}

// fdReader reads a Unix socket and keeps the descriptors that arrive with the bytes, in
// order (each belongs to the next shared-memory frame header read).
type fdReader struct {
	uc  *net.UnixConn
	oob []byte
	fds []int
}

func newFdReader(uc *net.UnixConn) *fdReader {
	return &fdReader{uc: uc, oob: make([]byte, syscall.CmsgSpace(4*maxFdsPerRead))}
}

func (r *fdReader) Read(b []byte) (int, error) {
	n, oobn, flags, _, err := r.uc.ReadMsgUnix(b, r.oob)
	if n < 0 {
		// On a failed recvmsg (e.g. ECONNRESET as a worker exits) ReadMsgUnix passes the
		// syscall's -1 through; io.Reader must return 0 <= n (bufio panics otherwise).
		n = 0
	}
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(r.oob[:oobn])
		if perr == nil {
			for _, m := range msgs {
				if fds, ferr := syscall.ParseUnixRights(&m); ferr == nil {
					r.fds = append(r.fds, fds...)
				}
			}
		}
	}
	if err == nil && flags&syscall.MSG_CTRUNC != 0 {
		return n, errors.New("worker sent more file descriptors than one read accepts")
	}
	return n, err
}

// next returns the descriptor of the next shared-memory frame.
func (r *fdReader) next() (int, error) {
	if len(r.fds) == 0 {
		return -1, errNoFd
	}
	fd := r.fds[0]
	r.fds = r.fds[1:]
	return fd, nil
}

// close closes descriptors received but never used (the connection ended).
func (r *fdReader) close() {
	for _, fd := range r.fds {
		syscall.Close(fd)
	}
	r.fds = nil
}

// mapping is a read-only memfd mapping handed to gRPC as a mem.Buffer: unmapped when freed.
type mapping struct{ data []byte }

func (m *mapping) Get(int) *[]byte { panic("mapping: Get") }
func (m *mapping) Put(*[]byte) {
	if m.data != nil {
		_ = syscall.Munmap(m.data)
		m.data = nil
	}
}

// mapFd maps the n bytes of memfd fd (read-only, pages populated at once) and closes fd.
func mapFd(fd, n int) (*mapping, error) {
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < int64(n) {
		return nil, fmt.Errorf("shared-memory frame of %d bytes in a memfd of %d", n, st.Size)
	}
	data, err := syscall.Mmap(fd, 0, n, syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return &mapping{data: data}, nil
}

// buffer returns bytes [from:] of the mapping as a gRPC buffer that unmaps it when freed.
func (m *mapping) buffer(from int) mem.Buffer {
	b := m.data[from:]
	return mem.NewBuffer(&b, m)
}
