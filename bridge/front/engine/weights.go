package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Weights: one zarr v3 array per parameter under the artifact's weights/ (docs/artifact-format.md),
// read through the artifact's Store (a directory or a URL), its chunks read and hashed in
// parallel straight into the memory the parameter will live in (a CPU plugin's device buffer:
// no host copy at all), every chunk file checked against the manifest's sha256 as it is read
// and the assembled array against the parameter's own sha256.

// zarrArray is the part of a zarr v3 array's zarr.json the exporter writes and this reader
// accepts: a regular chunk grid, default or v2 chunk keys, one `bytes` codec, little-endian.
type zarrArray struct {
	ZarrFormat int     `json:"zarr_format"`
	NodeType   string  `json:"node_type"`
	Shape      []int64 `json:"shape"`
	DataType   string  `json:"data_type"`
	ChunkGrid  struct {
		Name          string `json:"name"`
		Configuration struct {
			ChunkShape []int64 `json:"chunk_shape"`
		} `json:"configuration"`
	} `json:"chunk_grid"`
	ChunkKeyEncoding struct {
		Name          string `json:"name"`
		Configuration struct {
			Separator string `json:"separator"`
		} `json:"configuration"`
	} `json:"chunk_key_encoding"`
	Codecs []struct {
		Name          string `json:"name"`
		Configuration struct {
			Endian string `json:"endian"`
		} `json:"configuration"`
	} `json:"codecs"`
	FillValue any `json:"fill_value"`
}

// LoadStats is what opening a model cost: the weights read (bytes, each parameter once, and
// chunk files), the phases' wall seconds and the weights' throughput, for the load log line.
type LoadStats struct {
	Bytes   int64 // parameter bytes read, checked and placed
	Chunks  int   // chunk files read
	Seconds float64
	// WeightsSeconds: reading, hashing and placing every parameter (concurrent with compiling
	// and with checking the artifact's other files).
	WeightsSeconds float64
	GiBPerSecond   float64 // Bytes / WeightsSeconds
	// Phases: "checksum" (the listed files the engine does not read), "weights", "compile".
	Phases map[string]float64
}

// paramPlan is one parameter to read: its array's metadata and every chunk file.
type paramPlan struct {
	arg      *jaxportv1.Argument
	dir      string // the array's directory relative to the artifact
	z        zarrArray
	itemsize int64
	size     int64 // bytes of the assembled array
}

// planParameter reads and checks a parameter's zarr.json (a listed file: sha256-checked).
func planParameter(ctx context.Context, a *artifact.Artifact, arg *jaxportv1.Argument) (*paramPlan, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("reading weights: parameter '%s': %s", arg.GetName(), fmt.Sprintf(format, args...))
	}
	var spec artifact.TensorstoreSpec
	if err := json.Unmarshal([]byte(arg.GetTensorstoreSpecJson()), &spec); err != nil {
		return nil, fail("tensorstoreSpecJson is not JSON: %v", err)
	}
	if spec.Driver != "zarr3" || spec.Kvstore.Driver != "file" {
		return nil, fail("tensorstore driver %q on kvstore %q, this reader reads zarr3 on file", spec.Driver, spec.Kvstore.Driver)
	}
	dir, err := artifact.WeightsDir(arg)
	if err != nil {
		return nil, err
	}
	if err := artifact.CheckRelative(dir, "parameter '"+arg.GetName()+"'"); err != nil {
		return nil, err
	}
	meta := path.Join(dir, "zarr.json")
	var raw []byte
	if _, listed := a.File(meta); listed {
		raw, err = a.ReadListed(ctx, meta)
	} else {
		raw, err = artifact.ReadFile(ctx, a.Store, meta)
	}
	if err != nil {
		return nil, err
	}
	p := &paramPlan{arg: arg, dir: dir, itemsize: int64(arg.GetDtype().GetItemsize())}
	if err := json.Unmarshal(raw, &p.z); err != nil {
		return nil, fail("zarr.json: %v", err)
	}
	if err := p.z.check(arg, p.itemsize); err != nil {
		return nil, fail("zarr.json: %v", err)
	}
	p.size = p.itemsize
	for _, d := range p.z.Shape {
		p.size *= d
	}
	return p, nil
}

// check refuses what the reader does not implement or what disagrees with the manifest.
func (z *zarrArray) check(arg *jaxportv1.Argument, itemsize int64) error {
	switch {
	case z.ZarrFormat != 3 || z.NodeType != "array":
		return fmt.Errorf("zarr_format %d node_type %q, want a zarr v3 array", z.ZarrFormat, z.NodeType)
	case z.DataType != arg.GetDtype().GetNumpy():
		return fmt.Errorf("data_type %s, the manifest says %s", z.DataType, arg.GetDtype().GetNumpy())
	case !slices.Equal(z.Shape, arg.GetShape()):
		return fmt.Errorf("shape %v, the manifest says %v", z.Shape, arg.GetShape())
	case z.ChunkGrid.Name != "regular" || len(z.ChunkGrid.Configuration.ChunkShape) != len(z.Shape):
		return fmt.Errorf("chunk grid %q of rank %d, want a regular grid of rank %d",
			z.ChunkGrid.Name, len(z.ChunkGrid.Configuration.ChunkShape), len(z.Shape))
	case len(z.Codecs) != 1 || z.Codecs[0].Name != "bytes":
		return fmt.Errorf("codecs %+v, this reader reads one uncompressed bytes codec", z.Codecs)
	case itemsize > 1 && z.Codecs[0].Configuration.Endian != "little":
		return fmt.Errorf("bytes codec endian %q, want little", z.Codecs[0].Configuration.Endian)
	case itemsize < 1:
		return fmt.Errorf("dtype %s has item size %d", arg.GetDtype().GetNumpy(), itemsize)
	}
	for _, c := range z.ChunkGrid.Configuration.ChunkShape {
		if c < 1 {
			return fmt.Errorf("chunk shape %v", z.ChunkGrid.Configuration.ChunkShape)
		}
	}
	switch z.ChunkKeyEncoding.Name {
	case "default", "v2":
	default:
		return fmt.Errorf("chunk_key_encoding %q", z.ChunkKeyEncoding.Name)
	}
	return nil
}

// chunkKey is a chunk's file path under the array (zarr v3 default: c/i/j; v2: i.j).
func (z *zarrArray) chunkKey(index []int64) string {
	parts := make([]string, len(index))
	for i, v := range index {
		parts[i] = strconv.FormatInt(v, 10)
	}
	sep := z.ChunkKeyEncoding.Configuration.Separator
	if z.ChunkKeyEncoding.Name == "v2" {
		if sep == "" {
			sep = "."
		}
		if len(parts) == 0 {
			return "0"
		}
		return strings.Join(parts, sep)
	}
	if sep == "" {
		sep = "/"
	}
	return strings.Join(append([]string{"c"}, parts...), sep)
}

// zeroFill says whether the array's fill_value is all-zero bytes (0, 0.0, false).
func (z *zarrArray) zeroFill() bool {
	switch v := z.FillValue.(type) {
	case float64:
		return v == 0
	case bool:
		return !v
	}
	return false
}

// grid is the number of chunks along each axis.
func (z *zarrArray) grid() []int64 {
	g := make([]int64, len(z.Shape))
	for i, d := range z.Shape {
		c := z.ChunkGrid.Configuration.ChunkShape[i]
		g[i] = (d + c - 1) / c
	}
	return g
}

// contiguous says whether every chunk's elements are one run of the C-order array: the axes
// before the first split one are cut in ones, the axes after it whole (the exporter cuts
// leading axes first, so its chunks are row slabs). Then chunks in grid order are the array in
// memory order, and a whole chunk file is read straight into its place.
func (z *zarrArray) contiguous() bool {
	chunk := z.ChunkGrid.Configuration.ChunkShape
	a := 0
	for a < len(chunk) && chunk[a] == 1 {
		a++
	}
	for j := a + 1; j < len(chunk); j++ {
		if chunk[j] != z.Shape[j] {
			return false
		}
	}
	return true
}

// chunkPlace is where chunk index goes: its byte offset in the C-order array and its length
// when it is a contiguous run filling its whole file (an edge chunk stored padded is not).
func (z *zarrArray) chunkPlace(index []int64, itemsize int64) (off, n int64, whole bool) {
	shape, chunk := z.Shape, z.ChunkGrid.Configuration.ChunkShape
	stride := itemsize
	n = itemsize
	whole = true
	for i := len(shape) - 1; i >= 0; i-- {
		off += index[i] * chunk[i] * stride
		extent := min(chunk[i], shape[i]-index[i]*chunk[i])
		whole = whole && extent == chunk[i]
		n *= extent
		stride *= shape[i]
	}
	return off, n, whole
}

// weightReader reads parameters' chunks with at most `parallel` chunk reads at once, across
// every parameter of a model.
type weightReader struct {
	a       *artifact.Artifact
	slots   chan struct{}
	scratch sync.Pool // staging buffers of chunks that are no contiguous run
	mu      sync.Mutex
	bytes   int64
	chunks  int
}

func newWeightReader(a *artifact.Artifact, parallel int) *weightReader {
	if parallel < 1 {
		parallel = artifact.Parallelism(a.Store)
	}
	return &weightReader{a: a, slots: make(chan struct{}, parallel)}
}

// files is every file the plan reads (so a verifier of the rest skips them).
func (p *paramPlan) files() []string {
	out := []string{path.Join(p.dir, "zarr.json")}
	grid := p.z.grid()
	if p.size == 0 {
		return out
	}
	index := make([]int64, len(grid))
	for {
		out = append(out, path.Join(p.dir, p.z.chunkKey(index)))
		if !next(index, grid) {
			return out
		}
	}
}

// read fills dst (the array's size, zeroed) with the parameter's elements: chunks read in
// parallel (each chunk file checked against the manifest as it is read), the array's sha256
// computed as contiguous chunks land in order (else over the whole array at the end) and
// checked against the argument's (a ChecksumError naming the parameter, as the Python
// reader's).
func (r *weightReader) read(ctx context.Context, p *paramPlan, dst []byte) error {
	if int64(len(dst)) != p.size {
		return fmt.Errorf("reading weights: parameter '%s': %d bytes of memory for an array of %d", p.arg.GetName(), len(dst), p.size)
	}
	h := sha256.New()
	if p.size == 0 {
		return r.checkSum(p, h.Sum(nil))
	}
	contiguous := p.z.contiguous()
	grid := p.z.grid()
	var indices [][]int64
	for index := make([]int64, len(grid)); ; {
		indices = append(indices, slices.Clone(index))
		if !next(index, grid) {
			break
		}
	}
	// In-order hashing of contiguous chunks: whoever completes the next chunk in line hashes
	// it and every completed one after it.
	var (
		mu      sync.Mutex
		done    = make([]bool, len(indices))
		nextOne int
		hashing bool
	)
	advance := func(i int) {
		mu.Lock()
		done[i] = true
		if hashing {
			mu.Unlock()
			return
		}
		hashing = true
		for nextOne < len(indices) && done[nextOne] {
			k := nextOne
			mu.Unlock()
			off, n, _ := p.z.chunkPlace(indices[k], p.itemsize)
			h.Write(dst[off : off+n])
			mu.Lock()
			nextOne++
		}
		hashing = false
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var first error
	fail := func(err error) {
		errMu.Lock()
		if first == nil {
			first = err
		}
		errMu.Unlock()
		cancel()
	}
	for i, index := range indices {
		acquired := false
		select {
		case r.slots <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			if acquired {
				<-r.slots
			}
			break
		}
		wg.Go(func() {
			defer func() { <-r.slots }()
			if err := r.readChunk(ctx, p, index, dst, contiguous); err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
			if contiguous {
				advance(i)
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !contiguous {
		h.Write(dst)
	}
	return r.checkSum(p, h.Sum(nil))
}

func (r *weightReader) checkSum(p *paramPlan, sum []byte) error {
	if got := hex.EncodeToString(sum); got != p.arg.GetSha256() {
		return artifact.ParameterMismatch(r.a.Store, p.arg, got)
	}
	r.mu.Lock()
	r.bytes += p.size
	r.mu.Unlock()
	return nil
}

// readChunk puts one chunk's in-bounds elements into dst: a contiguous whole chunk straight
// from its file, any other through a staging buffer. A missing chunk is the fill value
// (zarr's rule; only an all-zero fill, which dst already holds).
func (r *weightReader) readChunk(ctx context.Context, p *paramPlan, index []int64, dst []byte, contiguous bool) error {
	key := p.z.chunkKey(index)
	rel := path.Join(p.dir, key)
	chunkBytes := p.itemsize
	for _, c := range p.z.ChunkGrid.Configuration.ChunkShape {
		chunkBytes *= c
	}
	off, n, whole := p.z.chunkPlace(index, p.itemsize)
	var err error
	if contiguous && whole {
		err = r.a.ReadInto(ctx, rel, dst[off:off+n])
	} else {
		buf := r.stage(chunkBytes)
		if err = r.a.ReadInto(ctx, rel, buf); err == nil {
			copyChunk(dst, buf, index, p.z.Shape, p.z.ChunkGrid.Configuration.ChunkShape, strides(p.z.Shape, p.itemsize),
				strides(p.z.ChunkGrid.Configuration.ChunkShape, p.itemsize), p.itemsize)
		}
		r.scratch.Put(&buf)
	}
	var ae *artifact.Error
	switch {
	case errors.Is(err, fs.ErrNotExist) && p.z.zeroFill():
		// zeros already
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading weights: parameter '%s': chunk %s is missing and the fill value is not zero", p.arg.GetName(), key)
	case err != nil && !errors.As(err, &ae) && ctx.Err() == nil:
		return fmt.Errorf("reading weights: parameter '%s': chunk %s: %v", p.arg.GetName(), key, err)
	case err != nil:
		return err
	}
	r.mu.Lock()
	r.chunks++
	r.mu.Unlock()
	return nil
}

// stage is a scratch buffer of n bytes.
func (r *weightReader) stage(n int64) []byte {
	if b, ok := r.scratch.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func strides(shape []int64, itemsize int64) []int64 {
	out := make([]int64, len(shape))
	for i, s := len(shape)-1, itemsize; i >= 0; i-- {
		out[i] = s
		s *= shape[i]
	}
	return out
}

// copyChunk copies the in-bounds part of chunk `index` into out, one run along the last axis
// at a time.
func copyChunk(out, data []byte, index, shape, chunk, outStride, chunkStride []int64, itemsize int64) {
	rank := len(shape)
	if rank == 0 {
		copy(out, data)
		return
	}
	extent := make([]int64, rank) // in-bounds size of this chunk along each axis
	for i := range rank {
		extent[i] = min(chunk[i], shape[i]-index[i]*chunk[i])
	}
	pos := make([]int64, rank-1) // position inside the chunk, all axes but the last
	run := extent[rank-1] * itemsize
	for {
		src, dst := int64(0), int64(0)
		for i := range rank - 1 {
			src += pos[i] * chunkStride[i]
			dst += (index[i]*chunk[i] + pos[i]) * outStride[i]
		}
		dst += index[rank-1] * chunk[rank-1] * outStride[rank-1]
		copy(out[dst:dst+run], data[src:src+run])
		if !next(pos, extent[:rank-1]) {
			return
		}
	}
}

// next advances a row-major multi-index below limits; false once it wraps around.
func next(index, limits []int64) bool {
	for i := len(index) - 1; i >= 0; i-- {
		index[i]++
		if index[i] < limits[i] {
			return true
		}
		index[i] = 0
	}
	return false
}

// ReadParameter is a parameter argument's array as raw little-endian C-order bytes, read
// through the artifact (chunks in parallel, every checksum checked): for tools and tests; the
// engine reads parameters straight into their device buffers.
func ReadParameter(ctx context.Context, a *artifact.Artifact, arg *jaxportv1.Argument) ([]byte, error) {
	p, err := planParameter(ctx, a, arg)
	if err != nil {
		return nil, err
	}
	dst := make([]byte, p.size)
	if err := newWeightReader(a, 0).read(ctx, p, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// since is the seconds from t.
func since(t time.Time) float64 { return time.Since(t).Seconds() }
