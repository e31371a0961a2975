//go:build cgo

package engine

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"unsafe"
)

// dlopenGlobal loads the shared library at path with RTLD_NOW|RTLD_GLOBAL (prepareCUDA).
func dlopenGlobal(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if C.dlopen(cpath, C.RTLD_NOW|C.RTLD_GLOBAL) == nil {
		return errors.New(C.GoString(C.dlerror()))
	}
	return nil
}
