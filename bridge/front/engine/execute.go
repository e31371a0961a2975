//go:build cgo

package engine

// The execute hot path (issue 36): what one call of a compiled program costs beyond the
// program itself.
//
// On the CPU plugin device memory is host memory, so a call needs no PJRT transfer at all:
//   - inputs: each program keeps sets of host memory (one region per input, pages populated
//     up front) with CPU device buffers viewing them, created once and reused call after
//     call; a call copies its inputs into a free set (one host copy, as PJRT's own upload
//     made) and runs the program on that set's buffers: no buffer created, uploaded or
//     destroyed per call;
//   - outputs: each result is copied once, straight from the result buffer's memory
//     (PJRT_Buffer_UnsafePointer), into one slab of Go memory holding every output of the
//     call. PJRT_Buffer_ToHostBuffer did the same copy through the plugin's transfer path: on
//     the 8-row MLP 64-256-16 it cost ~75 us per call against ~1.5 us for the copy, four times
//     the program's own ~20 us (docs/performance.md, "The engine's call").
//
// The first call of each program also reads its results through ToHostBuffer and compares:
// a program whose results would not be laid out as the manifest's row-major C order (no XLA
// CPU program here has been) keeps the plugin's transfer path from then on.
//
// Other plugins (device memory elsewhere) upload each input and read each result back through
// PJRT per call.

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gomlx/gopjrt/pjrt"
)

// maxPooledSets bounds the input sets a program keeps between calls (one per call running at
// once; beyond, a set is freed when its call ends).
const maxPooledSets = 16

// calls is a program's pool of input sets and what its first call found about its results.
type calls struct {
	mu     sync.Mutex
	free   []*inputSet
	closed bool
	// checked: the first call compared the direct read with ToHostBuffer; viaPJRT: they
	// differed, results are read through the plugin.
	checked, viaPJRT atomic.Bool
}

// inputSet is host memory for one call's inputs with the device buffers viewing it.
type inputSet struct {
	mem     [][]byte       // per input (Program.Inputs order)
	args    []*pjrt.Buffer // the program's @main arguments with this set's inputs in place
	buffers []*pjrt.Buffer // this set's own buffers (destroyed with it)
	unmap   []func()
}

// Execute runs the program on raw little-endian C-order inputs (one per Inputs entry, exactly
// its byteSize) and returns every result's raw bytes in @main order (outputs, then checks),
// freshly allocated (the caller keeps them). Safe for concurrent use.
func (prog *Program) Execute(inputs [][]byte) ([][]byte, error) {
	if len(inputs) != len(prog.Inputs) {
		return nil, fmt.Errorf("%s takes %d inputs, got %d", prog.Spec.GetMlirbcFile(), len(prog.Inputs), len(inputs))
	}
	for k, in := range inputs {
		if a := prog.Inputs[k]; uint64(len(in)) != a.GetByteSize() {
			return nil, fmt.Errorf("input %s: %d bytes, shape %v of %s needs %d",
				a.GetName(), len(in), a.GetShape(), a.GetDtype().GetNumpy(), a.GetByteSize())
		}
	}
	if prog.client.Platform() != "cpu" {
		return prog.executeUploading(inputs)
	}
	set, err := prog.takeSet()
	if err != nil {
		return nil, err
	}
	for k, in := range inputs {
		copy(set.mem[k], in)
	}
	results, err := prog.exe.Execute(set.args...).DonateNone().Done()
	prog.giveSet(set) // the call has ended (synchronous CPU execution): the inputs are free
	if err != nil {
		return nil, fmt.Errorf("execute %s: %v", prog.Spec.GetMlirbcFile(), oneLine(err.Error()))
	}
	defer destroyAll(results)
	return prog.readResults(results)
}

// readResults copies every result into one slab of Go memory.
func (prog *Program) readResults(results []*pjrt.Buffer) ([][]byte, error) {
	if prog.calls.viaPJRT.Load() {
		return prog.resultsToHost(results)
	}
	out := prog.resultSlices()
	for i, r := range results {
		if len(out[i]) == 0 {
			continue
		}
		ptr, err := r.UnsafePointer()
		if err != nil {
			return nil, fmt.Errorf("result %s: %v", prog.Results[i].GetName(), oneLine(err.Error()))
		}
		copy(out[i], unsafe.Slice((*byte)(ptr), len(out[i])))
	}
	if !prog.calls.checked.Load() {
		via, err := prog.resultsToHost(results)
		if err != nil {
			return nil, err
		}
		for i := range out {
			if !bytes.Equal(out[i], via[i]) {
				prog.calls.viaPJRT.Store(true)
				prog.calls.checked.Store(true)
				return via, nil
			}
		}
		prog.calls.checked.Store(true)
	}
	return out, nil
}

// resultSlices: one slice per result (its byteSize), all in one allocation.
func (prog *Program) resultSlices() [][]byte {
	total := 0
	for _, r := range prog.Results {
		total += int(r.GetByteSize())
	}
	slab := make([]byte, total)
	out := make([][]byte, len(prog.Results))
	off := 0
	for i, r := range prog.Results {
		n := int(r.GetByteSize())
		out[i] = slab[off : off+n : off+n]
		off += n
	}
	return out
}

// resultsToHost reads every result through PJRT_Buffer_ToHostBuffer.
func (prog *Program) resultsToHost(results []*pjrt.Buffer) ([][]byte, error) {
	out := prog.resultSlices()
	for i, r := range results {
		if err := r.ToHost(out[i]); err != nil {
			return nil, fmt.Errorf("result %s: %v", prog.Results[i].GetName(), err)
		}
	}
	return out, nil
}

// executeUploading is a call on a plugin whose device memory is not the host's: every input
// uploaded, every result read back, through PJRT.
func (prog *Program) executeUploading(inputs [][]byte) ([][]byte, error) {
	args := append([]*pjrt.Buffer(nil), prog.args...)
	var uploaded []*pjrt.Buffer
	defer func() { destroyAll(uploaded) }()
	for k, in := range inputs {
		a := prog.Inputs[k]
		b, err := upload(prog.client, in, a.GetDtype(), a.GetShape())
		if err != nil {
			return nil, fmt.Errorf("input %s: %v", a.GetName(), err)
		}
		uploaded = append(uploaded, b)
		args[prog.inputAt[k]] = b
	}
	results, err := prog.exe.Execute(args...).DonateNone().Done()
	if err != nil {
		return nil, fmt.Errorf("execute %s: %v", prog.Spec.GetMlirbcFile(), oneLine(err.Error()))
	}
	defer destroyAll(results)
	return prog.resultsToHost(results)
}

func destroyAll(buffers []*pjrt.Buffer) {
	for _, b := range buffers {
		if b != nil {
			_ = b.Destroy()
		}
	}
}

// takeSet: a free input set, or a new one.
func (prog *Program) takeSet() (*inputSet, error) {
	c := &prog.calls
	c.mu.Lock()
	if n := len(c.free); n > 0 {
		set := c.free[n-1]
		c.free = c.free[:n-1]
		c.mu.Unlock()
		return set, nil
	}
	c.mu.Unlock()
	return prog.newSet()
}

// giveSet returns a set to the pool (freed when the pool is full or closed).
func (prog *Program) giveSet(set *inputSet) {
	c := &prog.calls
	c.mu.Lock()
	if !c.closed && len(c.free) < maxPooledSets {
		c.free = append(c.free, set)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	set.destroy()
}

// newSet: host memory for every input, populated, with a CPU device buffer viewing it.
func (prog *Program) newSet() (*inputSet, error) {
	set := &inputSet{mem: make([][]byte, len(prog.Inputs)), args: append([]*pjrt.Buffer(nil), prog.args...)}
	for k, a := range prog.Inputs {
		dt, dims, err := bufferShape(a)
		if err != nil {
			set.destroy()
			return nil, err
		}
		var b *pjrt.Buffer
		if size := int64(a.GetByteSize()); size == 0 {
			b, err = uploadBytes(prog.client, make([]byte, 1)[:0], dt, dims)
		} else {
			var unmap func()
			b, set.mem[k], unmap, err = deviceMemory(prog.client, dt, dims, size)
			if unmap != nil {
				set.unmap = append(set.unmap, unmap)
			}
		}
		if err != nil {
			set.destroy()
			return nil, fmt.Errorf("input %s: device buffer of %d bytes: %v", a.GetName(), a.GetByteSize(), oneLine(err.Error()))
		}
		set.buffers = append(set.buffers, b)
		set.args[prog.inputAt[k]] = b
	}
	return set, nil
}

// destroy frees the set's buffers, then the memory under them.
func (set *inputSet) destroy() {
	destroyAll(set.buffers)
	for _, unmap := range set.unmap {
		unmap()
	}
	set.buffers, set.unmap = nil, nil
}

// closeCalls frees every pooled set; sets of calls still running are freed as they end (the
// model's Close runs after its calls have ended).
func (prog *Program) closeCalls() {
	c := &prog.calls
	c.mu.Lock()
	free := c.free
	c.free, c.closed = nil, true
	c.mu.Unlock()
	for _, set := range free {
		set.destroy()
	}
}
