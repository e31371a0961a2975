package shm

// The registry over real files (a temporary directory standing for /dev/shm): register,
// status, resolve, unregister, and every refusal with its code and the name it names.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
)

func object(t *testing.T, dir, name string, size int) string {
	t.Helper()
	path := filepath.Join(dir, name)
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantCode(t *testing.T, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Errorf("%q does not say %q", status.Convert(err).Message(), p)
		}
	}
}

func TestRegisterResolveUnregister(t *testing.T) {
	dir := t.TempDir()
	object(t, dir, "in0", 10000)
	r := New(dir, 2)
	if err := r.Register("a", "/in0", 4097, 100); err != nil { // an offset off the page size
		t.Fatal(err)
	}
	regions, err := r.Status("")
	if err != nil || len(regions) != 1 || regions[0] != (RegionStatus{Name: "a", Key: "/in0", Offset: 4097, ByteSize: 100}) {
		t.Fatalf("status %v %v", regions, err)
	}
	data, release, err := r.Resolve("input", "x", Ref{Region: "a", ByteSize: 8, Offset: 2})
	if err != nil || len(data) != 8 || data[0] != byte(4099%256) {
		t.Fatalf("resolve: %v %v", data, err)
	}
	data[1] = 0xAB    // writable, shared with the object
	r.Unregister("a") // a request still holds it: the mapping stays until released
	if data[1] != 0xAB {
		t.Fatal("mapping gone under a held request")
	}
	release()
	release() // twice is harmless
	if got, _ := os.ReadFile(filepath.Join(dir, "in0")); got[4100] != 0xAB {
		t.Fatal("write did not reach the object")
	}
	_, _, err = r.Resolve("input", "x", Ref{Region: "a", ByteSize: 8})
	wantCode(t, err, codes.NotFound, "input 'x': shared memory region 'a' is not registered")
	r.Unregister("never") // unknown: no error
	_, err = r.Status("a")
	wantCode(t, err, codes.NotFound, "shared memory region 'a' is not registered")
}

func TestRegisterRefusals(t *testing.T) {
	dir := t.TempDir()
	object(t, dir, "obj", 64)
	if err := os.Symlink(filepath.Join(dir, "obj"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	r := New(dir, 2)
	wantCode(t, r.Register("", "obj", 0, 8), codes.InvalidArgument, "region name must be 1-256 characters, got 0")
	wantCode(t, r.Register("a", "../etc/passwd", 0, 8), codes.InvalidArgument, "shared memory key '../etc/passwd' is not a plain name")
	wantCode(t, r.Register("a", "..", 0, 8), codes.InvalidArgument, "is not a plain name")
	wantCode(t, r.Register("a", "obj", 0, 0), codes.InvalidArgument, "region 'a': byte_size must be > 0")
	wantCode(t, r.Register("a", "nope", 0, 8), codes.InvalidArgument, "shared memory key 'nope' does not exist")
	wantCode(t, r.Register("a", "link", 0, 8), codes.InvalidArgument, "it is a symbolic link (not followed)")
	wantCode(t, r.Register("a", "d", 0, 8), codes.InvalidArgument, "cannot open shared memory key 'd' read-write: Is a directory")
	wantCode(t, r.Register("a", "obj", 60, 8), codes.InvalidArgument, "offset 60 + byte_size 8 = 68 bytes lies beyond shared memory key 'obj', which holds 64 bytes")
	if err := r.Register("a", "obj", 0, 8); err != nil {
		t.Fatal(err)
	}
	wantCode(t, r.Register("a", "obj", 0, 8), codes.AlreadyExists, "region 'a' is already registered (key 'obj')")
	if err := r.Register("b", "obj", 8, 8); err != nil {
		t.Fatal(err)
	}
	wantCode(t, r.Register("c", "obj", 0, 8), codes.ResourceExhausted, "2 regions are registered already")
	_, _, err := r.Resolve("output", "y", Ref{Region: "a", ByteSize: 8, Offset: 4})
	wantCode(t, err, codes.InvalidArgument, "output 'y': shared_memory_offset 4 + shared_memory_byte_size 8 = 12 bytes lies beyond shared memory region 'a' (8 bytes)")
	if err := os.Truncate(filepath.Join(dir, "obj"), 4); err != nil {
		t.Fatal(err)
	}
	_, _, err = r.Resolve("input", "x", Ref{Region: "b", ByteSize: 8})
	wantCode(t, err, codes.FailedPrecondition, "shared memory key 'obj' of region 'b' now holds 4 bytes, less than the 16 registered")
	r.Close()
	if regions, _ := r.Status(""); len(regions) != 0 {
		t.Fatalf("after Close: %v", regions)
	}
}

func TestDisabled(t *testing.T) {
	_, _, err := Disabled{}.Resolve("input", "x", Ref{Region: "a"})
	wantCode(t, err, codes.FailedPrecondition, "input 'x' uses shared memory: system shared memory is disabled on this server; start it with --system-shared-memory")
}

// TestConcurrentRegisterResolveUnregister (run under -race by `go test -race ./shm`): clients
// register, resolve and unregister the same names at once while requests read and write the
// mappings they resolved; every resolve either fails NOT_FOUND naming the region or gets
// a mapping that stays valid until its release, whatever is unregistered meanwhile.
func TestConcurrentRegisterResolveUnregister(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"o0", "o1", "o2"} {
		object(t, dir, name, 1<<16)
	}
	r := New(dir, 4)
	defer r.Close()
	names := []string{"r0", "r1", "r2"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 { // registering and unregistering
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := names[(w+i)%len(names)]
				if err := r.Register(name, fmt.Sprintf("/o%d", i%3), 0, 1<<16); err != nil {
					if c := status.Code(err); c != codes.AlreadyExists && c != codes.ResourceExhausted {
						t.Errorf("register %s: %v", name, err)
						return
					}
				}
				if _, err := r.Status(""); err != nil {
					t.Errorf("status: %v", err)
					return
				}
				if i%2 == 1 {
					r.Unregister(name)
				}
				if i%7 == 6 {
					r.Unregister("")
				}
			}
		}()
	}
	resolved := 0
	var mu sync.Mutex
	for w := range 4 { // requests
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				name := names[(w+i)%len(names)]
				data, release, err := r.Resolve("input", "x", Ref{Region: name, ByteSize: 64, Offset: uint64(i % 1000)})
				if err != nil {
					if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "'"+name+"' is not registered") {
						t.Errorf("resolve %s: %v", name, err)
						return
					}
					continue
				}
				for j := range data { // read and write the whole mapping while others unregister
					data[j] ^= 0xFF
					data[j] ^= 0xFF
				}
				release()
				mu.Lock()
				resolved++
				mu.Unlock()
			}
		}()
	}
	go func() { time.Sleep(2 * time.Second); close(stop) }()
	wg.Wait()
	if resolved == 0 {
		t.Fatal("no resolve ever found its region registered: the test raced nothing")
	}
}
