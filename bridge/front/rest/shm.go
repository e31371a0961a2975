package rest

// The REST codec of Triton's shared-memory extensions:
//
//	GET  /v2/systemsharedmemory[/region/{name}]/status  -> [{"name", "key", "offset", "byte_size"}, ...]
//	POST /v2/systemsharedmemory/region/{name}/register  body {"key": str, "offset": int, "byte_size": int}
//	POST /v2/systemsharedmemory[/region/{name}]/unregister
//	GET  /v2/cudasharedmemory[/region/{name}]/status    -> [{"name", "device_id", "byte_size"}, ...]
//	POST /v2/cudasharedmemory/region/{name}/register    body {"raw_handle": {"b64": str}, "device_id": int, "byte_size": int}
//	POST /v2/cudasharedmemory[/region/{name}]/unregister
//
// Each is answered by the server method of the gRPC RPC of the same name
// ({System,Cuda}SharedMemory{Status,Register,Unregister}): one registry, its rules and its
// messages (package shm). Registered system regions are then named by REST infer requests'
// shared_memory_region parameters as by gRPC ones. CUDA answers are a CPU-only server's, as
// over gRPC (no regions; register refused): clients that clean up both kinds (perf_analyzer
// --shared-memory system) get the answers they expect.

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/proto"
)

// uintField reads a JSON integer >= 0 (absent: 0, or a 400 when required).
func uintField(o *jsonObject, key, path string, required bool) (uint64, error) {
	v, ok := o.get(key)
	if !ok {
		if required {
			return 0, status.BadRequest("%s: %q is required", path, key)
		}
		return 0, nil
	}
	n, isNum := v.(jsonNumber)
	x, err := strconv.ParseUint(string(n), 10, 64)
	if !isNum || err != nil {
		return 0, status.BadRequest("%s.%s: expected an integer >= 0, got %s", path, key, describe(v))
	}
	return x, nil
}

// shmKinds maps a REST prefix to the RPC name prefix of its extension.
var shmKinds = []struct{ prefix, kind string }{
	{"/v2/systemsharedmemory", "SystemSharedMemory"},
	{"/v2/cudasharedmemory", "CudaSharedMemory"},
}

// decodeShmRegister translates the register body of region `name` (rpc: the register RPC).
func decodeShmRegister(rpc, name string, body []byte) (proto.Message, error) {
	doc, err := parseJSON(body)
	if err != nil {
		return nil, status.BadRequest("request body: %v", err)
	}
	top, err := asObject(doc, "request body")
	if err != nil {
		return nil, err
	}
	if rpc == "CudaSharedMemoryRegister" {
		req := &inferencepb.CudaSharedMemoryRegisterRequest{Name: name}
		hv, ok := top.get("raw_handle")
		if !ok {
			return nil, status.BadRequest("request: %q is required", "raw_handle")
		}
		handle, err := asObject(hv, "request.raw_handle")
		if err != nil {
			return nil, err
		}
		b64, err := stringField(handle, "b64", "request.raw_handle", true)
		if err != nil {
			return nil, err
		}
		if req.RawHandle, err = base64.StdEncoding.DecodeString(b64); err != nil {
			return nil, status.BadRequest("request.raw_handle.b64: not base64: %v", err)
		}
		device, err := uintField(top, "device_id", "request", true)
		if err != nil {
			return nil, err
		}
		req.DeviceId = int64(min(device, 1<<63-1))
		if req.ByteSize, err = uintField(top, "byte_size", "request", true); err != nil {
			return nil, err
		}
		return req, nil
	}
	req := &inferencepb.SystemSharedMemoryRegisterRequest{Name: name}
	if req.Key, err = stringField(top, "key", "request", true); err != nil {
		return nil, err
	}
	if req.Offset, err = uintField(top, "offset", "request", false); err != nil {
		return nil, err
	}
	if req.ByteSize, err = uintField(top, "byte_size", "request", true); err != nil {
		return nil, err
	}
	return req, nil
}

// shmStatusJSON is Triton's REST status answer: the status message's regions as a list of
// objects, ordered by name.
func shmStatusJSON(resp proto.Message) []byte {
	list := []any{}
	if regions, ok := protoJSON(resp.ProtoReflect()).get("regions"); ok {
		o := regions.(*jsonObject)
		for _, k := range o.keys {
			list = append(list, o.values[k])
		}
	}
	return appendJSONValue(nil, list)
}

// parseShmRoute maps the path after a shmKinds prefix to its RPC (region in route.model).
func parseShmRoute(kind, rest string) (route, error) {
	switch rest {
	case "/status":
		return route{rpc: kind + "Status", method: http.MethodGet}, nil
	case "/unregister":
		return route{rpc: kind + "Unregister", method: http.MethodPost}, nil
	}
	tail, ok := strings.CutPrefix(rest, "/region/")
	if !ok {
		return route{}, errNoRoute
	}
	escaped, action, ok := strings.Cut(tail, "/")
	region, err := url.PathUnescape(escaped)
	if !ok || err != nil || region == "" {
		return route{}, errNoRoute
	}
	switch action {
	case "status":
		return route{rpc: kind + "Status", method: http.MethodGet, model: region}, nil
	case "register":
		return route{rpc: kind + "Register", method: http.MethodPost, model: region}, nil
	case "unregister":
		return route{rpc: kind + "Unregister", method: http.MethodPost, model: region}, nil
	}
	return route{}, errNoRoute
}
