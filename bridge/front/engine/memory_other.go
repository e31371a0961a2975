//go:build cgo && !unix

package engine

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/gopjrt/dtypes"
	"github.com/gomlx/gopjrt/pjrt"
)

// deviceMemory is a CPU device buffer over memory the buffer owns (freed with it).
func deviceMemory(client *pjrt.Client, dt dtypes.DType, dims []int, size int64) (*pjrt.Buffer, []byte, func(), error) {
	b, flat, err := client.NewSharedBuffer(dt, dims)
	if err != nil {
		return nil, nil, nil, err
	}
	return b, unsafe.Slice((*byte)(reflect.ValueOf(flat).UnsafePointer()), size), func() {}, nil
}

// hostMemory is size bytes of zeroed memory and the function that frees it.
func hostMemory(size int64) ([]byte, func(), error) {
	ptr := pjrt.AlignedAlloc(uintptr(size)+1, pjrt.BufferAlignment)
	if ptr == nil {
		return nil, nil, fmt.Errorf("cannot allocate %d bytes", size)
	}
	return unsafe.Slice((*byte)(ptr), size), func() { pjrt.AlignedFree(ptr) }, nil
}
