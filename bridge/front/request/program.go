package request

import (
	"fmt"
	"slices"
)

// Tensor is one tensor's bytes (raw little-endian, C order) and shape, as programs take and
// give them.
type Tensor struct {
	Shape []int64
	Data  []byte
}

// ProgramInputs are p's inputs as program p.Program takes them (manifest input order): a
// partial batch padded up to the program's batch size with copies of the last row (a
// row-wise check trips on padding only if it trips on a real row, as bridge/batcher.py's
// pad_rows), or zeros after the request's end along the padded dimensions of a bucket (False
// or 0 in the mask input: padding); unchanged otherwise (views, no copy). batchSize is the
// program's (0: unbatched).
func (s *Signature) ProgramInputs(p *Prepared, batchSize int) []Tensor {
	out := make([]Tensor, len(s.inputs))
	for i := range s.inputs {
		sig := &s.inputs[i]
		t := Tensor{Shape: p.Shapes[i], Data: p.Inputs[i]}
		switch {
		case sig.batched && batchSize > p.Rows:
			t = Tensor{Shape: slices.Clone(t.Shape), Data: PadRows(t.Data, p.Rows, batchSize)}
			t.Shape[0] = int64(batchSize)
		case p.Padded && sig.dimNames != nil:
			want := slices.Clone(t.Shape)
			for axis, n := range sig.dimNames {
				if n != "" {
					want[axis] = p.Bucket.Dims[n]
				}
			}
			if !slices.Equal(want, t.Shape) {
				data := make([]byte, byteCount(want, sig.Itemsize))
				copyBlock(data, want, t.Data, t.Shape, sig.Itemsize)
				t = Tensor{Shape: want, Data: data}
			}
		}
		out[i] = t
	}
	return out
}

// PadRows extends `rows` rows of data up to `size` rows with copies of the last row.
func PadRows(data []byte, rows, size int) []byte {
	row := len(data) / rows
	out := make([]byte, row*size)
	copy(out, data)
	last := data[len(data)-row:]
	for r := rows; r < size; r++ {
		copy(out[r*row:], last)
	}
	return out
}

// OutputShape is manifest output i's shape in p's answer: its declared shape with the batch
// dimension at p's rows and each symbolic dimension at the request's size.
func (s *Signature) OutputShape(p *Prepared, i int) []int64 {
	sig := &s.outputs[i]
	if sig.fixed {
		return sig.shape
	}
	shape := slices.Clone(sig.shape)
	if sig.batched {
		shape[0] = int64(p.Rows)
	}
	for axis, n := range sig.dimNames {
		if n != "" {
			shape[axis] = p.Sizes[n]
		}
	}
	return shape
}

// cut is output i of a program (shape got) as the answer has it (OutputShape): the first
// rows of a padded batch (a view), the request's extent along padded dimensions (a copy).
func (s *Signature) cut(p *Prepared, i int, t Tensor) ([]int64, []byte, error) {
	sig := &s.outputs[i]
	want := s.OutputShape(p, i)
	if slices.Equal(want, t.Shape) {
		if n := byteCount(want, sig.Itemsize); n != len(t.Data) {
			return nil, nil, fmt.Errorf("output %s holds %d bytes; shape %v needs %d", sig.name, len(t.Data), want, n)
		}
		return want, t.Data, nil
	}
	if len(want) != len(t.Shape) {
		return nil, nil, fmt.Errorf("output %s has shape %v; expected rank %d", sig.name, t.Shape, len(want))
	}
	for a := range want {
		if t.Shape[a] < want[a] {
			return nil, nil, fmt.Errorf("output %s has shape %v; expected at least %v", sig.name, t.Shape, want)
		}
	}
	if n := byteCount(t.Shape, sig.Itemsize); n != len(t.Data) {
		return nil, nil, fmt.Errorf("output %s holds %d bytes; shape %v needs %d", sig.name, len(t.Data), t.Shape, n)
	}
	if len(want) > 0 && slices.Equal(want[1:], t.Shape[1:]) { // rows of a padded batch: a prefix
		return want, t.Data[:byteCount(want, sig.Itemsize)], nil
	}
	data := make([]byte, byteCount(want, sig.Itemsize))
	copyBlock(data, want, t.Data, t.Shape, sig.Itemsize)
	return want, data, nil
}

func byteCount(shape []int64, itemsize int) int {
	n := itemsize
	for _, d := range shape {
		n *= int(d)
	}
	return n
}

// copyBlock copies the leading block both shapes share (min along every axis) from src
// (C order, srcShape) into dst (C order, dstShape); the rest of dst is left as it is.
func copyBlock(dst []byte, dstShape []int64, src []byte, srcShape []int64, itemsize int) {
	rank := len(dstShape)
	if rank == 0 {
		copy(dst, src[:itemsize])
		return
	}
	common := make([]int64, rank)
	for a := range common {
		common[a] = min(dstShape[a], srcShape[a])
		if common[a] == 0 {
			return
		}
	}
	dstStride := strides(dstShape, itemsize)
	srcStride := strides(srcShape, itemsize)
	run := int(common[rank-1]) * itemsize
	index := make([]int64, rank-1)
	for {
		d, sOff := 0, 0
		for a, v := range index {
			d += int(v) * dstStride[a]
			sOff += int(v) * srcStride[a]
		}
		copy(dst[d:d+run], src[sOff:sOff+run])
		a := rank - 2
		for ; a >= 0; a-- {
			index[a]++
			if index[a] < common[a] {
				break
			}
			index[a] = 0
		}
		if a < 0 {
			return
		}
	}
}

func strides(shape []int64, itemsize int) []int {
	out := make([]int, len(shape))
	n := itemsize
	for a := len(shape) - 1; a >= 0; a-- {
		out[a] = n
		n *= int(shape[a])
	}
	return out
}
