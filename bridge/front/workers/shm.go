package workers

// Large payloads travel in a memfd instead of through the socket: the rule (SHM bit, one
// descriptor per frame in arrival order, read-only mapping, malformed cases, why 1 MiB) is
// specified in docs/frames.md. Here: sending a payload in a memfd and mapping one received.

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// shmFlag marks a frame type whose payload is in the memfd sent with the header.
	shmFlag = 0x80
	// shmThreshold: payloads of at least this many bytes go through a memfd.
	shmThreshold = 1 << 20
	// maxFdsPerRead bounds the descriptors accepted by one read.
	maxFdsPerRead = 64
)

var errNoFd = errors.New("shared-memory frame without a file descriptor")

// newMemfd returns a memfd holding parts back to back (written with write(2): the kernel
// allocates its pages, no page faults in this process).
func newMemfd(parts [][]byte) (int, error) {
	fd, err := unix.MemfdCreate("jaxport-frame", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	for _, data := range parts {
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

// writeShm sends header h (type|shmFlag) with a memfd holding the payload; false (nothing
// sent) if no memfd could be made, so the caller sends it through the socket.
func writeShm(uc *net.UnixConn, h header, parts [][]byte) (bool, error) {
	fd, err := newMemfd(parts)
	if err != nil {
		return false, nil
	}
	defer syscall.Close(fd) // the descriptor in flight holds its own reference
	h.ftype |= shmFlag
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
		// On a failed recvmsg ReadMsgUnix passes the syscall's -1 through; io.Reader must
		// return 0 <= n (bufio panics otherwise).
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

// readFd reads the n bytes of memfd fd into a new slice (pread: one copy, no mapping) and
// closes fd: the caller owns what it gets.
func readFd(fd, n int) ([]byte, error) {
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < int64(n) {
		return nil, fmt.Errorf("shared-memory frame of %d bytes in a memfd of %d", n, st.Size)
	}
	out := make([]byte, n)
	for got := 0; got < n; {
		k, err := syscall.Pread(fd, out[got:], int64(got))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, fmt.Errorf("shared-memory frame of %d bytes ended at %d", n, got)
		}
		got += k
	}
	return out, nil
}
