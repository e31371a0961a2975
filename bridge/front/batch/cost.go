package batch

import (
	"slices"
	"time"
)

// costs estimates what one execution of each exported size takes, from the executions the
// batcher has timed: an exponential average per size (weight costWeight for the newest), so a
// machine that gets busier or quieter moves the estimates within a few executions.
//
// A size not run yet is estimated from the measured ones so that every error leans towards
// padding (one execution instead of two, Triton's batch): between two measured sizes, the
// straight line through them; below the smallest measured size, that size's cost (a smaller
// program is assumed to save nothing); above the largest, the largest's cost (a larger one is
// assumed to cost nothing more). With nothing measured every size costs the same, so padding
// always wins.
type costs struct {
	sizes    []int     // exported sizes, ascending
	est      []float64 // seconds, by index into sizes
	measured []bool
}

const costWeight = 0.25

func newCosts(sizes []int) costs {
	return costs{sizes: sizes, est: make([]float64, len(sizes)), measured: make([]bool, len(sizes))}
}

// observe records one execution of the exported size `size` that took d.
func (c *costs) observe(size int, d time.Duration) {
	i, ok := slices.BinarySearch(c.sizes, size)
	if !ok {
		return
	}
	if s := d.Seconds(); c.measured[i] {
		c.est[i] += costWeight * (s - c.est[i])
	} else {
		c.est[i], c.measured[i] = s, true
	}
}

// seed sets the estimate of a size not measured yet (a timing taken elsewhere, e.g. at load).
func (c *costs) seed(size int, d time.Duration) {
	if i, ok := slices.BinarySearch(c.sizes, size); ok && !c.measured[i] && d > 0 {
		c.est[i], c.measured[i] = d.Seconds(), true
	}
}

// estimate is the expected seconds of one execution of the exported size `size`.
func (c *costs) estimate(size int) float64 {
	i, _ := slices.BinarySearch(c.sizes, size)
	if c.measured[i] {
		return c.est[i]
	}
	lo, hi := -1, -1
	for j := i - 1; j >= 0; j-- {
		if c.measured[j] {
			lo = j
			break
		}
	}
	for j := i + 1; j < len(c.sizes); j++ {
		if c.measured[j] {
			hi = j
			break
		}
	}
	switch {
	case lo < 0 && hi < 0:
		return 0
	case lo < 0:
		return c.est[hi]
	case hi < 0:
		return c.est[lo]
	}
	f := float64(size-c.sizes[lo]) / float64(c.sizes[hi]-c.sizes[lo])
	return c.est[lo] + f*(c.est[hi]-c.est[lo])
}

// cheaperPerRow: does running `rows` real rows on exported size `size` cost less per real row
// than `otherRows` rows on `other`? Ties go to the other (the padded batch: one execution).
func (c *costs) cheaperPerRow(size, rows, other, otherRows int) bool {
	return c.estimate(size)*float64(otherRows) < c.estimate(other)*float64(rows)
}
