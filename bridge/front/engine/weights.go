package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

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

// tensorstoreSpec is the part of Argument.tensorstoreSpecJson that locates the array.
type tensorstoreSpec struct {
	Driver  string `json:"driver"`
	Kvstore struct {
		Driver string `json:"driver"`
		Path   string `json:"path"`
	} `json:"kvstore"`
}

// ReadParameter reads a parameter argument's zarr3 array under dir as raw little-endian C-order
// bytes and checks them against the argument's sha256 (the manifest's digest of exactly those
// bytes). Errors name the parameter.
func ReadParameter(dir string, arg *jaxportv1.Argument) ([]byte, error) {
	data, err := readZarr(dir, arg)
	if err != nil {
		return nil, fmt.Errorf("parameter %s: %v", arg.GetName(), err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != arg.GetSha256() {
		return nil, fmt.Errorf("parameter %s: weights sha256 %s, the manifest says %s",
			arg.GetName(), got, arg.GetSha256())
	}
	return data, nil
}

func readZarr(dir string, arg *jaxportv1.Argument) ([]byte, error) {
	var spec tensorstoreSpec
	if err := json.Unmarshal([]byte(arg.GetTensorstoreSpecJson()), &spec); err != nil {
		return nil, fmt.Errorf("tensorstoreSpecJson is not JSON: %v", err)
	}
	if spec.Driver != "zarr3" || spec.Kvstore.Driver != "file" {
		return nil, fmt.Errorf("tensorstore driver %q on kvstore %q, this reader reads zarr3 on file",
			spec.Driver, spec.Kvstore.Driver)
	}
	root, err := artifactPath(dir, spec.Kvstore.Path)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(root, "zarr.json"))
	if err != nil {
		return nil, err
	}
	var z zarrArray
	if err := json.Unmarshal(raw, &z); err != nil {
		return nil, fmt.Errorf("zarr.json: %v", err)
	}
	itemsize := int64(arg.GetDtype().GetItemsize())
	if err := z.check(arg, itemsize); err != nil {
		return nil, fmt.Errorf("zarr.json: %v", err)
	}
	return z.assemble(root, itemsize)
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

// assemble reads every chunk (regular grid: edge chunks are stored whole) and copies its
// in-bounds part into one C-order array. A missing chunk is the fill value (zarr's rule); only
// an all-zero fill is supported, since the exporter writes every chunk anyway.
func (z *zarrArray) assemble(root string, itemsize int64) ([]byte, error) {
	shape, chunk := z.Shape, z.ChunkGrid.Configuration.ChunkShape
	rank := len(shape)
	total := itemsize
	grid := make([]int64, rank)
	for i := range rank {
		total *= shape[i]
		grid[i] = (shape[i] + chunk[i] - 1) / chunk[i]
	}
	out := make([]byte, total)
	if total == 0 {
		return out, nil
	}
	chunkBytes := itemsize
	for _, c := range chunk {
		chunkBytes *= c
	}
	// Strides in bytes of the array and of one chunk.
	outStride, chunkStride := make([]int64, rank), make([]int64, rank)
	for i, so, sc := rank-1, itemsize, itemsize; i >= 0; i-- {
		outStride[i], chunkStride[i] = so, sc
		so *= shape[i]
		sc *= chunk[i]
	}
	index := make([]int64, rank)
	for {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(z.chunkKey(index))))
		switch {
		case errors.Is(err, fs.ErrNotExist) && z.zeroFill():
			data = make([]byte, chunkBytes)
		case err != nil:
			return nil, fmt.Errorf("chunk %s: %v", z.chunkKey(index), err)
		case int64(len(data)) != chunkBytes:
			return nil, fmt.Errorf("chunk %s: %d bytes, chunk shape %v needs %d",
				z.chunkKey(index), len(data), chunk, chunkBytes)
		}
		copyChunk(out, data, index, shape, chunk, outStride, chunkStride, itemsize)
		if !next(index, grid) {
			return out, nil
		}
	}
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
