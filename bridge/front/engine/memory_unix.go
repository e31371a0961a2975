//go:build cgo && unix

package engine

import (
	"unsafe"

	"github.com/gomlx/gopjrt/dtypes"
	"github.com/gomlx/gopjrt/pjrt"
	"golang.org/x/sys/unix"
)

// deviceMemory is a CPU device buffer over memory of ours, mapped with its pages populated up
// front: a parameter read into it then meets no page fault (the faults on fresh memory cost
// most of the reads when it was calloc'ed). unmap is called once the buffer is destroyed.
func deviceMemory(client *pjrt.Client, dt dtypes.DType, dims []int, size int64) (*pjrt.Buffer, []byte, func(), error) {
	mem, free, err := hostMemory(size)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := client.CreateViewOfDeviceBuffer(unsafe.Pointer(unsafe.SliceData(mem)), dt, dims)
	if err != nil {
		free()
		return nil, nil, nil, err
	}
	return b, mem, free, nil
}

// hostMemory is size bytes of zeroed memory, its pages populated up front, and the function
// that gives them back to the system.
func hostMemory(size int64) ([]byte, func(), error) {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, err
	}
	return mem, func() { _ = unix.Munmap(mem) }, nil
}
