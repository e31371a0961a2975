package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// writeZarr writes a uint8 array of `shape` (values 0, 1, 2, ... in C order) as zarr3 with
// `chunk` under dir/weights/p, every chunk whole (edge chunks padded with 255), and returns
// its manifest argument.
func writeZarr(t *testing.T, dir string, shape, chunk []int64, keyEncoding string) *jaxportv1.Argument {
	t.Helper()
	root := filepath.Join(dir, "weights", "p")
	meta := map[string]any{
		"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint8",
		"chunk_grid":         map[string]any{"name": "regular", "configuration": map[string]any{"chunk_shape": chunk}},
		"chunk_key_encoding": map[string]any{"name": keyEncoding},
		"codecs":             []any{map[string]any{"name": "bytes"}},
		"fill_value":         0,
	}
	raw, _ := json.Marshal(meta)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "zarr.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	rank := len(shape)
	grid := make([]int64, rank)
	var want []byte
	total := int64(1)
	for i := range rank {
		grid[i] = (shape[i] + chunk[i] - 1) / chunk[i]
		total *= shape[i]
	}
	for i := range total {
		want = append(want, byte(i))
	}
	z := zarrArray{}
	z.ChunkKeyEncoding.Name = keyEncoding
	index := make([]int64, rank)
	for {
		var data []byte
		inner := make([]int64, rank)
		for {
			flat, inside := int64(0), true
			for i := range rank {
				g := index[i]*chunk[i] + inner[i]
				inside = inside && g < shape[i]
				flat = flat*shape[i] + g
			}
			if inside {
				data = append(data, byte(flat))
			} else {
				data = append(data, 255)
			}
			if !next(inner, chunk) {
				break
			}
		}
		path := filepath.Join(root, filepath.FromSlash(z.chunkKey(index)))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if !next(index, grid) {
			break
		}
	}
	sum := sha256.Sum256(want)
	return &jaxportv1.Argument{
		Name: "params.p", Shape: shape, Sha256: hex.EncodeToString(sum[:]),
		Dtype:               &jaxportv1.DType{Numpy: "uint8", Itemsize: 1},
		TensorstoreSpecJson: `{"driver": "zarr3", "dtype": "uint8", "kvstore": {"driver": "file", "path": "weights/p/"}}`,
	}
}

// unlisted is the artifact of dir with a manifest that lists no files: only the arrays'
// own sha256 guard the chunks (the zarr reader's own checks).
func unlisted(t *testing.T, dir string) *artifact.Artifact {
	t.Helper()
	s, err := artifact.Locate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &artifact.Artifact{Store: s, Manifest: &jaxportv1.Manifest{}}
}

var ctx = context.Background()

func TestReadParameterAssemblesChunks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		shape, chunk []int64
		encoding     string
	}{
		{"scalar", []int64{}, []int64{}, "default"},
		{"one chunk", []int64{3, 4}, []int64{3, 4}, "default"},
		{"row slabs", []int64{6, 4}, []int64{2, 4}, "default"},
		{"row slabs, padded last", []int64{7, 4}, []int64{2, 4}, "default"},
		{"edge chunks", []int64{5, 7}, []int64{2, 3}, "default"},
		{"rank 3", []int64{3, 2, 5}, []int64{2, 2, 2}, "default"},
		{"rank 3 ones first", []int64{3, 2, 5}, []int64{1, 1, 5}, "default"},
		{"v2 keys", []int64{5, 3}, []int64{2, 2}, "v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			arg := writeZarr(t, dir, tc.shape, tc.chunk, tc.encoding)
			for _, parallel := range []int{1, 3} {
				a := unlisted(t, dir)
				p, err := planParameter(ctx, a, arg)
				if err != nil {
					t.Fatal(err)
				}
				data := make([]byte, p.size)
				if err := newWeightReader(a, parallel).read(ctx, p, data); err != nil {
					t.Fatal(err)
				}
				for i, b := range data {
					if b != byte(i) {
						t.Fatalf("element %d is %d", i, b)
					}
				}
			}
		})
	}
}

func TestReadParameterRefusesTamperedChunk(t *testing.T) {
	dir := t.TempDir()
	arg := writeZarr(t, dir, []int64{4, 4}, []int64{2, 4}, "default")
	chunk := filepath.Join(dir, "weights", "p", "c", "1", "0")
	data, _ := os.ReadFile(chunk)
	data[0] ^= 1
	if err := os.WriteFile(chunk, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadParameter(ctx, unlisted(t, dir), arg)
	want := dir + ": parameter 'params.p' (weights/p/) sha256 mismatch: expected " + arg.GetSha256() + ", actual "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %s...", err, want)
	}
}

// TestTamperedChunkOfARealArtifactIsNamed: the chunk files the manifest lists are checked as
// they are read, so a tampered one is named as the Python reader names it.
func TestTamperedChunkOfARealArtifactIsNamed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "1")
	artifacttest.CopyTree(t, artifacttest.Backcompat(), dir)
	chunk := artifacttest.FirstChunk(t, dir)
	artifacttest.FlipByte(t, filepath.Join(dir, chunk))
	s, _ := artifact.Locate(dir)
	a, err := artifact.Open(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var arg *jaxportv1.Argument
	for _, x := range a.Manifest.GetPrograms()[0].GetArguments() {
		if x.GetRole() == jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER && strings.HasPrefix(chunk, strings.TrimSuffix(mustDir(t, x), "/")+"/") {
			arg = x
		}
	}
	_, err = ReadParameter(ctx, a, arg)
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, chunk)+": sha256 mismatch: expected ") ||
		!strings.HasPrefix(artifact.LoadReason(err), "checksum verification failed: ") {
		t.Fatalf("got %v", err)
	}
}

func mustDir(t *testing.T, arg *jaxportv1.Argument) string {
	d, err := artifact.WeightsDir(arg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReadParameterRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	arg := writeZarr(t, dir, []int64{4}, []int64{2}, "default")
	for _, tc := range []struct {
		edit func(*jaxportv1.Argument)
		want string
	}{
		{func(a *jaxportv1.Argument) { a.Shape = []int64{5} }, "reading weights: parameter 'params.p': zarr.json: shape [4], the manifest says [5]"},
		{func(a *jaxportv1.Argument) { a.Dtype = &jaxportv1.DType{Numpy: "int8", Itemsize: 1} }, "data_type uint8, the manifest says int8"},
		{func(a *jaxportv1.Argument) {
			a.TensorstoreSpecJson = `{"driver": "zarr3", "kvstore": {"driver": "file", "path": "../p/"}}`
		}, "parameter 'params.p': path '../p' contains '..'; refused"},
		{func(a *jaxportv1.Argument) {
			a.TensorstoreSpecJson = `{"driver": "zarr", "kvstore": {"driver": "file", "path": "weights/p/"}}`
		}, `tensorstore driver "zarr"`},
	} {
		a := &jaxportv1.Argument{Name: arg.Name, Shape: arg.Shape, Dtype: arg.Dtype, Sha256: arg.Sha256,
			TensorstoreSpecJson: arg.TensorstoreSpecJson}
		tc.edit(a)
		if _, err := ReadParameter(ctx, unlisted(t, dir), a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	// A chunk of the wrong size is named.
	if err := os.WriteFile(filepath.Join(dir, "weights", "p", "c", "1"), []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadParameter(ctx, unlisted(t, dir), arg); err == nil ||
		err.Error() != filepath.Join(dir, "weights", "p", "c", "1")+": 1 bytes, the reader needs 2" {
		t.Errorf("got %v", err)
	}
	// A missing chunk is the (zero) fill value: the array's sha256 then says it is wrong.
	if err := os.Remove(filepath.Join(dir, "weights", "p", "c", "1")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadParameter(ctx, unlisted(t, dir), arg); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("got %v", err)
	}
}
