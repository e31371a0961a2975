package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/jaxport/jaxport/clients/go/conformance"
	"github.com/x448/float16"
)

// npyRead is the conformance suite's .npy reader (one of each).
var npyRead = conformance.ReadNpy

// tolerance is `jaxport verify`'s plain rule |actual - expected| <= atol + rtol*|expected|
// (docs/artifact-format.md, Tolerances); integers, bool and check outputs are exact. The
// f32-reference rule verify adds for bf16/f16 is not applied here: those outputs get the plain
// bound only.
type tolerance struct {
	name       string
	atol, rtol float64
}

func toleranceOf(dtype string) tolerance {
	switch dtype {
	case "float64":
		return tolerance{"float64 1e-12+1e-10", 1e-12, 1e-10}
	case "float32":
		return tolerance{"float32 1e-5+1e-4", 1e-5, 1e-4}
	case "float16":
		return tolerance{"float16 2e-3+2e-3", 2e-3, 2e-3}
	case "bfloat16":
		return tolerance{"bfloat16 1.6e-2+1.6e-2", 1.6e-2, 1.6e-2}
	}
	return tolerance{name: "exact"}
}

// floats decodes little-endian floats of dtype; ok false for a non-float dtype.
func floats(raw []byte, dtype string) ([]float64, bool) {
	var size int
	switch dtype {
	case "float64":
		size = 8
	case "float32":
		size = 4
	case "float16", "bfloat16":
		size = 2
	default:
		return nil, false
	}
	out := make([]float64, len(raw)/size)
	for i := range out {
		b := raw[i*size : (i+1)*size]
		switch dtype {
		case "float64":
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case "float32":
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case "float16":
			out[i] = float64(float16.Frombits(binary.LittleEndian.Uint16(b)).Float32())
		case "bfloat16":
			out[i] = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16))
		}
	}
	return out, true
}

// compare returns the largest |actual - expected| over finite pairs and how many elements miss
// the tolerance: NaN must meet NaN and an infinity the same infinity; exact compares bytes.
func compare(actual, expected []byte, dtype string, tol tolerance) (float64, int, error) {
	if len(actual) != len(expected) {
		return 0, 0, fmt.Errorf("%d bytes, the golden has %d", len(actual), len(expected))
	}
	a, isFloat := floats(actual, dtype)
	e, _ := floats(expected, dtype)
	if tol.name == "exact" || !isFloat {
		if tol.name != "exact" {
			return 0, 0, fmt.Errorf("tolerance %s for dtype %s", tol.name, dtype)
		}
		if isFloat {
			return exactFloats(a, e, actual, expected, dtype)
		}
		bad := 0
		if !bytes.Equal(actual, expected) {
			bad = 1
		}
		return 0, bad, nil
	}
	maxErr, bad := 0.0, 0
	for i := range a {
		switch {
		case math.IsNaN(e[i]) || math.IsNaN(a[i]):
			if math.IsNaN(e[i]) != math.IsNaN(a[i]) {
				bad++
			}
		case math.IsInf(e[i], 0) || math.IsInf(a[i], 0):
			if a[i] != e[i] {
				bad++
			}
		default:
			d := math.Abs(a[i] - e[i])
			maxErr = max(maxErr, d)
			if d > tol.atol+tol.rtol*math.Abs(e[i]) {
				bad++
			}
		}
	}
	return maxErr, bad, nil
}

// exactFloats compares float results bit for bit and counts differing elements.
func exactFloats(a, e []float64, actual, expected []byte, dtype string) (float64, int, error) {
	size := len(actual) / max(1, len(a))
	maxErr, bad := 0.0, 0
	for i := range a {
		if !bytes.Equal(actual[i*size:(i+1)*size], expected[i*size:(i+1)*size]) {
			bad++
			if !math.IsNaN(a[i]) && !math.IsNaN(e[i]) {
				maxErr = max(maxErr, math.Abs(a[i]-e[i]))
			}
		}
	}
	return maxErr, bad, nil
}
