package request

// Tensors in system shared memory, through a real registry (package shm over a temporary
// directory standing for /dev/shm): inputs read in place, outputs written into their
// region and answered by reference, and the refusals with their codes.

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

func registry(t *testing.T, size int) (*shm.Registry, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "obj"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	r := shm.New(dir, 8)
	if err := r.Register("r", "/obj", 0, uint64(size)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, filepath.Join(dir, "obj")
}

func shmParams(region string, size, offset int64) Params {
	p := Params{ParamShmRegion: {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: region}},
		ParamShmByteSize: {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: size}}}
	if offset != 0 {
		p[ParamShmOffset] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: offset}}
	}
	return p
}

func TestSharedMemoryInputsInPlaceOutputsByReference(t *testing.T) {
	r, path := registry(t, 256)
	s := testSignature(t, "rows") // a FP32 [-1, 2], b INT32 [-1], c FP32 [3]; y FP32 [-1, 3], s FP64 []
	// a (2 rows) at offset 0 of the region, b raw in the message, c at offset 16.
	data, release, _ := r.Resolve("input", "setup", shm.Ref{Region: "r", ByteSize: 256})
	for i, v := range []float32{1, 2, 3, 4, 0.5, 0.25, 0.125} {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	release()
	req := &Request{Model: "rows",
		Inputs: []Input{{Name: "a", Datatype: "FP32", Shape: []int64{2, 2}, Params: shmParams("r", 16, 0)},
			{Name: "b", Datatype: "INT32", Shape: []int64{2}},
			{Name: "c", Datatype: "FP32", Shape: []int64{3}, Params: shmParams("r", 12, 16)}},
		Outputs: []Output{{Name: "y", Params: shmParams("r", 24, 64)}, {Name: "s"}},
		Raw:     [][]byte{i32(7, -8)}}
	p, err := s.Prepare(req, r)
	if err != nil {
		t.Fatal(err)
	}
	if math.Float32frombits(binary.LittleEndian.Uint32(p.Inputs[0][12:])) != 4 || len(p.Inputs[2]) != 12 || p.Rows != 2 {
		t.Fatalf("inputs %v rows %d", p.Inputs, p.Rows)
	}
	y := make([]byte, 24)
	for i := range y {
		y[i] = byte(100 + i)
	}
	resp, err := s.Response(req, p, []Tensor{{Shape: []int64{2, 3}, Data: y}, {Data: make([]byte, 8)}})
	p.Release()
	if err != nil {
		t.Fatal(err)
	}
	out := resp.Outputs[0]
	if len(out.Data) != 0 || out.Params[ParamShmRegion].GetStringParam() != "r" ||
		out.Params[ParamShmByteSize].GetInt64Param() != 24 || out.Params[ParamShmOffset].GetInt64Param() != 64 {
		t.Fatalf("output y answered %+v", out)
	}
	written, _ := os.ReadFile(path)
	if written[64] != 100 || written[87] != 123 {
		t.Fatalf("y not written into the region: %v", written[64:88])
	}
	if len(resp.Outputs[1].Data) != 8 {
		t.Fatal("s: in the response")
	}
	// A batched output whose region is too small is refused once its rows are known.
	req.Outputs[0].Params = shmParams("r", 20, 64)
	p, err = s.Prepare(req, r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Response(req, p, []Tensor{{Shape: []int64{2, 3}, Data: y}, {Data: make([]byte, 8)}})
	p.Release()
	wantInvalid(t, err, "output 'y': needs 24 bytes (shape [2, 3] x 4 bytes per FP32 element) but shared_memory_byte_size for shared memory region 'r' is 20")
}

func TestSharedMemoryRefusals(t *testing.T) {
	r, _ := registry(t, 64)
	mlp := testSignature(t, "mlp") // x FP32 [2, 3], ids INT8 [4], h FP16 [2]; logits FP32 [2, 4], flag BOOL [2], count INT64 []
	in := func(params Params, contents *inferencepb.InferTensorContents) *Request {
		return &Request{Inputs: []Input{{Name: "x", Datatype: "FP32", Shape: []int64{2, 3}, Params: params, Contents: contents},
			{Name: "ids", Datatype: "INT8", Shape: []int64{4}}, {Name: "h", Datatype: "FP16", Shape: []int64{2}}},
			Raw: [][]byte{make([]byte, 4), make([]byte, 4)}}
	}
	for _, c := range []struct {
		req   *Request
		shm   SharedMemory
		code  codes.Code
		parts []string
	}{
		{in(shmParams("r", 20, 0), nil), r, codes.InvalidArgument, []string{"input 'x': shared_memory_byte_size is 20; expected 24 (shape [2, 3] x 4 bytes per FP32 element)"}},
		{in(shmParams("nope", 24, 0), nil), r, codes.NotFound, []string{"input 'x': shared memory region 'nope' is not registered"}},
		{in(shmParams("r", 24, 48), nil), r, codes.InvalidArgument, []string{"shared_memory_offset 48 + shared_memory_byte_size 24 = 72 bytes lies beyond shared memory region 'r' (64 bytes)"}},
		{in(shmParams("r", 24, 0), nil), shm.Disabled{}, codes.FailedPrecondition, []string{"input 'x' uses shared memory: system shared memory is disabled"}},
		{in(shmParams("r", 24, 0), &inferencepb.InferTensorContents{Fp32Contents: []float32{1}}), r, codes.InvalidArgument,
			[]string{"input 'x': has typed contents and shared memory parameters; send its data one way, not both"}},
		{in(Params{ParamShmByteSize: shmParams("r", 1, 0)[ParamShmByteSize]}, nil), r, codes.InvalidArgument,
			[]string{"input 'x': parameter 'shared_memory_byte_size' given without 'shared_memory_region'; name the shared memory region too"}},
		{in(Params{ParamShmRegion: shmParams("r", 1, 0)[ParamShmRegion]}, nil), r, codes.InvalidArgument,
			[]string{"input 'x': shared memory region 'r' given without 'shared_memory_byte_size'"}},
		{in(Params{ParamShmRegion: shmParams("r", 1, 0)[ParamShmRegion],
			ParamShmByteSize: {ParameterChoice: &inferencepb.InferParameter_StringParam{StringParam: "24"}}}, nil), r, codes.InvalidArgument,
			[]string{"input 'x': parameter 'shared_memory_byte_size' must be an int64_param, got string_param"}},
	} {
		p, err := mlp.Prepare(c.req, c.shm)
		if status.Code(err) != c.code || p != nil {
			t.Errorf("%v: %v, want %s", c.req.Inputs[0].Params, err, c.code)
			continue
		}
		for _, part := range c.parts {
			if msg := status.Convert(err).Message(); !strings.Contains(msg, part) {
				t.Errorf("%q does not say %q", msg, part)
			}
		}
	}
	// The raw entries count only the inputs that are not in shared memory.
	req := in(shmParams("r", 24, 0), nil)
	req.Raw = append(req.Raw, make([]byte, 4))
	_, err := mlp.Prepare(req, r)
	wantInvalid(t, err, "raw_input_contents has 3 entries; expected 2 (one per input not in shared memory")
	// Classified outputs cannot go to shared memory; a fixed-shape output must fit at once.
	req = in(shmParams("r", 24, 0), nil)
	params := shmParams("r", 8, 0)
	params[ParamClassification] = &inferencepb.InferParameter{ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: 1}}
	req.Outputs = []Output{{Name: "logits", Params: params}}
	_, err = mlp.Prepare(req, r)
	wantInvalid(t, err, "requested output 'logits': classification into shared memory is not supported; request it in the response")
	req.Outputs = []Output{{Name: "logits", Params: shmParams("r", 16, 0)}}
	_, err = mlp.Prepare(req, r)
	wantInvalid(t, err, "output 'logits': needs 32 bytes (shape [2, 4] x 4 bytes per FP32 element) but shared_memory_byte_size for shared memory region 'r' is 16")
}
