//go:build !cgo

package engine

// dlopenGlobal cannot load a library in a CGO_ENABLED=0 build (LoadPlugin fails there too).
func dlopenGlobal(string) error { return errNoCgo }
