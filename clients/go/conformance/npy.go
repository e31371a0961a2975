package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

var (
	npyMagic   = []byte("\x93NUMPY")
	descrRe    = regexp.MustCompile(`'descr':\s*'([^']+)'`)
	fortranRe  = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	shapeRe    = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
	descrSizes = map[string]int{"|b1": 1, "|u1": 1, "|i1": 1, "<u2": 2, "<i2": 2, "<f2": 2, "|V2": 2, "<V2": 2, "<u4": 4, "<i4": 4, "<f4": 4, "<u8": 8, "<i8": 8, "<f8": 8} // |V2: an artifact's bf16 goldens
)

// Npy is a parsed .npy file: its dtype descriptor, shape and C-order element bytes.
type Npy struct {
	Descr string
	Shape []int64
	Data  []byte
}

// ReadNpy reads a version 1.x/2.x .npy file holding a little-endian, C-order array of a
// fixed-size dtype (the only kind the suite writes; BF16 is stored as its <u2 bit patterns).
func ReadNpy(path string) (Npy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Npy{}, err
	}
	if len(raw) < 10 || !bytes.Equal(raw[:6], npyMagic) {
		return Npy{}, fmt.Errorf("%s: not a .npy file", path)
	}
	var headerLen, start int
	switch raw[6] {
	case 1:
		headerLen, start = int(binary.LittleEndian.Uint16(raw[8:10])), 10
	case 2, 3:
		if len(raw) < 12 {
			return Npy{}, fmt.Errorf("%s: truncated header", path)
		}
		headerLen, start = int(binary.LittleEndian.Uint32(raw[8:12])), 12
	default:
		return Npy{}, fmt.Errorf("%s: unsupported .npy version %d", path, raw[6])
	}
	if start+headerLen > len(raw) {
		return Npy{}, fmt.Errorf("%s: truncated header", path)
	}
	header := string(raw[start : start+headerLen])
	d := descrRe.FindStringSubmatch(header)
	f := fortranRe.FindStringSubmatch(header)
	s := shapeRe.FindStringSubmatch(header)
	if d == nil || f == nil || s == nil {
		return Npy{}, fmt.Errorf("%s: unreadable header %q", path, header)
	}
	if f[1] == "True" {
		return Npy{}, fmt.Errorf("%s: Fortran-order arrays are not supported", path)
	}
	size, ok := descrSizes[d[1]]
	if !ok {
		return Npy{}, fmt.Errorf("%s: unsupported dtype %q (little-endian fixed-size only)", path, d[1])
	}
	shape := []int64{}
	for _, part := range strings.Split(s[1], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.ParseInt(part, 10, 64)
		if err != nil {
			return Npy{}, fmt.Errorf("%s: bad shape %q", path, s[1])
		}
		shape = append(shape, n)
	}
	data := raw[start+headerLen:]
	count := int64(1)
	for _, n := range shape {
		count *= n
	}
	if int64(len(data)) != count*int64(size) {
		return Npy{}, fmt.Errorf("%s: %d data bytes, shape %v of %s needs %d", path, len(data), shape, d[1], count*int64(size))
	}
	return Npy{Descr: d[1], Shape: shape, Data: data}, nil
}
