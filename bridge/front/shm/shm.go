// Package shm is the registry of system (POSIX) shared-memory regions: Triton's
// system_shared_memory extension. A client on the same host creates an object in /dev/shm
// (shm_open), registers a region of it under a name (SystemSharedMemoryRegister: name, key,
// offset, byte_size), then sends tensors by reference: an input's bytes are read from the
// region, a requested output is written into it, and only metadata crosses the transport.
//
// Trust boundary (docs/security.md):
//   - A key names an object directly in /dev/shm: one plain name (an optional leading '/', as
//     shm_open takes it, then letters, digits and `._-`), opened without following symlinks,
//     regular files only. Anything the server user can read and write there can be
//     registered, so the extension is OFF unless --system-shared-memory is given (Disabled
//     answers every use, naming the flag).
//   - The region stays shared with the client, which may write it at any time. Inputs are used
//     in place; the server never writes an input region and reads no region except for the
//     request that names it.
//   - A client that truncates the object below the registered range would make the server
//     fault (SIGBUS) when it touches the missing pages: every access first checks the
//     object's current size and refuses with FAILED_PRECONDITION (a truncation racing the
//     check remains: enable this for trusted local clients only).
//   - A region unregistered while a request still uses its bytes stays mapped until that
//     request releases it (Resolve's release), so no request reads unmapped memory.
package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

// Extension is the extension's name in ServerMetadata.
const Extension = "system_shared_memory"

// Root is where keys name objects.
const Root = "/dev/shm"

// MaxRegions: each registered region holds one file descriptor and one mapping.
const MaxRegions = 1024

const maxName = 256

var keyRule = regexp.MustCompile(`^/?([A-Za-z0-9._-]{1,255})$`)

// DisabledHint is the end of every error a shared-memory use gets while the extension is off.
const DisabledHint = "system shared memory is disabled on this server; start it with --system-shared-memory " +
	"(env JAXPORT_SYSTEM_SHARED_MEMORY=1) to allow same-host clients to pass tensors through " +
	"/dev/shm (see docs/security.md)"

// DisabledError is the one error every shared-memory use gets while the extension is off;
// what says which use (an RPC's name, "input 'x' uses shared memory").
func DisabledError(what string) error {
	return status.Errorf(codes.FailedPrecondition, "%s: %s", status.ClipN(what, 160), DisabledHint)
}

// Ref is where a tensor's bytes live: ByteSize bytes at Offset of registered Region
// (Triton's shared_memory_* parameters of a tensor).
type Ref struct {
	Region   string
	ByteSize uint64
	Offset   uint64
}

// Disabled answers every request tensor in shared memory with DisabledError.
type Disabled struct{}

// Resolve refuses: the extension is off.
func (Disabled) Resolve(kind, tensor string, _ Ref) ([]byte, func(), error) {
	return nil, nil, DisabledError(fmt.Sprintf("%s '%s' uses shared memory", kind, status.Clip(tensor, false)))
}

// RegionStatus is one registered region as SystemSharedMemoryStatus reports it.
type RegionStatus struct {
	Name, Key        string
	Offset, ByteSize uint64
}

// region is an open object and the mapping of [offset, offset+byteSize) of it (from a page
// boundary: data[delta:] is the region).
type region struct {
	RegionStatus
	fd    int
	data  []byte
	delta int
	refs  int  // requests holding its bytes (Registry.mu)
	gone  bool // unregistered: unmapped when refs reaches 0
}

// Registry is the thread-safe table of named regions; Resolve hands tensors their bytes.
type Registry struct {
	root string
	max  int

	mu      sync.Mutex
	regions map[string]*region
}

// New is an empty registry over root (Root; tests give their own directory).
func New(root string, maxRegions int) *Registry {
	return &Registry{root: root, max: maxRegions, regions: map[string]*region{}}
}

// KeyFileName is the /dev/shm file name a key designates; INVALID_ARGUMENT unless it is a
// plain name.
func KeyFileName(key string) (string, error) {
	m := keyRule.FindStringSubmatch(key)
	if m == nil || m[1] == "." || m[1] == ".." {
		return "", status.Invalid("shared memory key %s is not a plain name: expected an optional leading '/' and "+
			"then 1-255 letters, digits, '.', '_' or '-' (a POSIX shm_open name like '/input0'); keys name objects "+
			"directly in /dev/shm", status.PyRepr(status.Clip(key, false)))
	}
	return m[1], nil
}

// Register maps [offset, offset+byteSize) of <root>/<key> under name. INVALID_ARGUMENT for a
// bad name/key/size, a key that does not exist or cannot be opened read-write, or a range
// beyond the object; ALREADY_EXISTS for a taken name (as Triton); RESOURCE_EXHAUSTED beyond
// MaxRegions.
func (r *Registry) Register(name, key string, offset, byteSize uint64) error {
	if n := utf8.RuneCountInString(name); n == 0 || n > maxName {
		return status.Invalid("shared memory region name must be 1-%d characters, got %d", maxName, n)
	}
	file, err := KeyFileName(key)
	if err != nil {
		return err
	}
	if byteSize == 0 {
		return status.Invalid("shared memory region '%s': byte_size must be > 0, got 0", status.Clip(name, false))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.regions[name]; ok {
		return status.Errorf(codes.AlreadyExists, "shared memory region '%s' is already registered (key %s); "+
			"unregister it first or use another name", status.Clip(name, false), status.PyRepr(old.Key))
	}
	if len(r.regions) >= r.max {
		return status.Errorf(codes.ResourceExhausted, "cannot register shared memory region '%s': %d regions are "+
			"registered already; unregister some first", status.Clip(name, false), r.max)
	}
	reg, err := r.open(name, key, file, offset, byteSize)
	if err != nil {
		return err
	}
	r.regions[name] = reg
	return nil
}

// strerror is an errno's text as C's strerror (and Python's OSError.strerror) spell it.
func strerror(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}

func (r *Registry) open(name, key, file string, offset, byteSize uint64) (*region, error) {
	where := fmt.Sprintf("shared memory region '%s'", status.Clip(name, false))
	path := filepath.Join(r.root, file)
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err == syscall.ENOENT {
		return nil, status.Invalid("%s: shared memory key %s does not exist (no %s); create it (shm_open / "+
			"tritonclient.utils.shared_memory.create_shared_memory_region) before registering", where, status.PyRepr(key), path)
	}
	if err != nil {
		reason := strerror(err)
		if err == syscall.ELOOP {
			reason = "it is a symbolic link (not followed)"
		}
		return nil, status.Invalid("%s: cannot open shared memory key %s read-write: %s", where, status.PyRepr(key), reason)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, status.Invalid("%s: cannot stat shared memory key %s: %s", where, status.PyRepr(key), strerror(err))
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, status.Invalid("%s: shared memory key %s is not a shared memory object", where, status.PyRepr(key))
	}
	end := offset + byteSize
	if end < offset || end > uint64(st.Size) {
		syscall.Close(fd)
		return nil, status.Invalid("%s: offset %d + byte_size %d = %d bytes lies beyond shared memory key %s, which holds %d bytes",
			where, offset, byteSize, offset+byteSize, status.PyRepr(key), st.Size)
	}
	page := uint64(os.Getpagesize())
	start := offset - offset%page
	data, err := syscall.Mmap(fd, int64(start), int(end-start), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		syscall.Close(fd)
		return nil, status.Invalid("%s: cannot map shared memory key %s: %s", where, status.PyRepr(key), strerror(err))
	}
	return &region{RegionStatus: RegionStatus{Name: name, Key: key, Offset: offset, ByteSize: byteSize},
		fd: fd, data: data, delta: int(offset - start)}, nil
}

// Unregister forgets one region, or every region when name is "". An unknown name is not an
// error (Triton's behaviour), so cleanup code may run twice. Requests already holding a
// region's bytes finish on them.
func (r *Registry) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, reg := range r.regions {
		if name == "" || n == name {
			delete(r.regions, n)
			reg.gone = true
			if reg.refs == 0 {
				reg.free()
			}
		}
	}
}

func (reg *region) free() {
	_ = syscall.Munmap(reg.data)
	_ = syscall.Close(reg.fd)
	reg.data = nil
}

// Status is one region (NOT_FOUND if unknown, as Triton) or all, sorted by name.
func (r *Registry) Status(name string) ([]RegionStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name != "" {
		reg, ok := r.regions[name]
		if !ok {
			return nil, status.Errorf(codes.NotFound, "shared memory region '%s' is not registered", status.Clip(name, false))
		}
		return []RegionStatus{reg.RegionStatus}, nil
	}
	out := make([]RegionStatus, 0, len(r.regions))
	for _, reg := range r.regions {
		out = append(out, reg.RegionStatus)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Close unregisters everything (server shutdown, tests).
func (r *Registry) Close() { r.Unregister("") }

// Resolve implements request.SharedMemory: the writable bytes [ref.Offset, ref.Offset +
// ref.ByteSize) of region ref.Region and the release that lets go of them. NOT_FOUND for an
// unknown region (as Triton), INVALID_ARGUMENT for a range beyond it, FAILED_PRECONDITION
// when the object was truncated after registering.
func (r *Registry) Resolve(kind, tensor string, ref Ref) ([]byte, func(), error) {
	where := fmt.Sprintf("%s '%s'", kind, status.Clip(tensor, false))
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.regions[ref.Region]
	if !ok {
		return nil, nil, status.Errorf(codes.NotFound, "%s: shared memory region '%s' is not registered "+
			"(SystemSharedMemoryRegister it first)", where, status.Clip(ref.Region, false))
	}
	end := ref.Offset + ref.ByteSize
	if end < ref.Offset || end > reg.ByteSize {
		return nil, nil, status.Invalid("%s: shared_memory_offset %d + shared_memory_byte_size %d = %d bytes lies beyond "+
			"shared memory region '%s' (%d bytes)", where, ref.Offset, ref.ByteSize, ref.Offset+ref.ByteSize,
			status.Clip(ref.Region, false), reg.ByteSize)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(reg.fd, &st); err != nil || uint64(st.Size) < reg.Offset+reg.ByteSize {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "%s: shared memory key %s of region '%s' now holds %d bytes, "+
			"less than the %d registered (truncated after registering); re-create it and register the region again",
			where, status.PyRepr(reg.Key), status.Clip(ref.Region, false), st.Size, reg.Offset+reg.ByteSize)
	}
	reg.refs++
	start := reg.delta + int(ref.Offset)
	var once sync.Once
	release := func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			reg.refs--
			if reg.refs == 0 && reg.gone {
				reg.free()
			}
		})
	}
	return reg.data[start : start+int(ref.ByteSize) : start+int(ref.ByteSize)], release, nil
}
