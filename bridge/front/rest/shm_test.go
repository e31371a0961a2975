package rest

// Unit tests of rest_shm.go (the shared-memory REST codec); the live tests, with
// tritonclient.http's shared-memory calls against a real front, are
// tests/front/test_rest_shared_memory.py and tests/front/test_triton_http_clients.py.

import (
	"github.com/jaxport/jaxport/bridge/front/status"
	"net/http"
	"strings"
	"testing"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/proto"
)

func TestDecodeShmRegister(t *testing.T) {
	got, err := decodeShmRegister("SystemSharedMemoryRegister", "in", []byte(`{"key": "/k", "offset": 64, "byte_size": 18446744073709551615}`))
	want := &inferencepb.SystemSharedMemoryRegisterRequest{Name: "in", Key: "/k", Offset: 64, ByteSize: 1<<64 - 1}
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, err := decodeShmRegister("SystemSharedMemoryRegister", "in", []byte(`{"key": "/k", "byte_size": 8}`)); err != nil ||
		got.(*inferencepb.SystemSharedMemoryRegisterRequest).Offset != 0 {
		t.Fatalf("offset is optional: %v, %v", got, err)
	}
	for body, words := range map[string][]string{
		`{"byte_size": 8}`:                             {`"key" is required`},
		`{"key": "/k"}`:                                {`"byte_size" is required`},
		`{"key": 3, "byte_size": 8}`:                   {"request.key", "expected a string", "3"},
		`{"key": "/k", "byte_size": -1}`:               {"request.byte_size", "integer >= 0", "-1"},
		`{"key": "/k", "byte_size": 8, "offset": 1.5}`: {"request.offset", "integer >= 0", "1.5"},
		`{"key": "/k", "byte_size": "8"}`:              {"request.byte_size", `"8"`},
		`[1]`:                                          {"request body", "expected a JSON object"},
		`{"key": `:                                     {"request body"},
	} {
		_, err := decodeShmRegister("SystemSharedMemoryRegister", "in", []byte(body))
		wantRestError(t, err, http.StatusBadRequest, words...)
	}
}

func TestDecodeCudaShmRegister(t *testing.T) {
	got, err := decodeShmRegister("CudaSharedMemoryRegister", "g", []byte(`{"raw_handle": {"b64": "AAEC"}, "device_id": 1, "byte_size": 64}`))
	want := &inferencepb.CudaSharedMemoryRegisterRequest{Name: "g", RawHandle: []byte{0, 1, 2}, DeviceId: 1, ByteSize: 64}
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("got %v, %v", got, err)
	}
	for body, words := range map[string][]string{
		`{"device_id": 0, "byte_size": 8}`:                              {`"raw_handle" is required`},
		`{"raw_handle": "AAEC", "device_id": 0, "byte_size": 8}`:        {"request.raw_handle", "expected a JSON object"},
		`{"raw_handle": {}, "device_id": 0, "byte_size": 8}`:            {"request.raw_handle", `"b64" is required`},
		`{"raw_handle": {"b64": "%%"}, "device_id": 0, "byte_size": 8}`: {"request.raw_handle.b64", "not base64"},
		`{"raw_handle": {"b64": ""}, "byte_size": 8}`:                   {`"device_id" is required`},
		`{"raw_handle": {"b64": ""}, "device_id": 0}`:                   {`"byte_size" is required`},
	} {
		_, err := decodeShmRegister("CudaSharedMemoryRegister", "g", []byte(body))
		wantRestError(t, err, http.StatusBadRequest, words...)
	}
}

func TestShmStatusJSON(t *testing.T) {
	resp := &inferencepb.SystemSharedMemoryStatusResponse{Regions: map[string]*inferencepb.SystemSharedMemoryStatusResponse_RegionStatus{
		"out": {Name: "out", Key: "/o", Offset: 64, ByteSize: 1024},
		"in":  {Name: "in", Key: "/i", ByteSize: 4096},
	}}
	want := `[{"name":"in","key":"/i","offset":0,"byte_size":4096},{"name":"out","key":"/o","offset":64,"byte_size":1024}]`
	if got := string(shmStatusJSON(resp)); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if got := string(shmStatusJSON(&inferencepb.SystemSharedMemoryStatusResponse{})); got != "[]" {
		t.Fatalf("no regions: %s", got)
	}
	cuda := &inferencepb.CudaSharedMemoryStatusResponse{Regions: map[string]*inferencepb.CudaSharedMemoryStatusResponse_RegionStatus{
		"g": {Name: "g", DeviceId: 2, ByteSize: 8},
	}}
	if got, want := string(shmStatusJSON(cuda)), `[{"name":"g","device_id":2,"byte_size":8}]`; got != want {
		t.Fatalf("cuda: got %s, want %s", got, want)
	}
}

func wantRestError(t *testing.T, err error, code int, words ...string) {
	t.Helper()
	re, ok := err.(*status.HTTPError)
	if !ok || re.Status != code {
		t.Fatalf("got %v, want HTTP %d", err, code)
	}
	for _, w := range words {
		if !strings.Contains(re.Msg, w) {
			t.Errorf("message %q does not name %q", re.Msg, w)
		}
	}
}
