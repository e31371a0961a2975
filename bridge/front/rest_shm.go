package main

// The REST codec and handler of Triton's system shared-memory extension (issue 27):
//
//	GET  /v2/systemsharedmemory[/region/{name}]/status  -> [{"name", "key", "offset", "byte_size"}, ...]
//	POST /v2/systemsharedmemory/region/{name}/register  body {"key": str, "offset": int, "byte_size": int}
//	POST /v2/systemsharedmemory[/region/{name}]/unregister
//
// Each is the gRPC RPC of the same name (SystemSharedMemoryStatus/Register/Unregister) sent
// through the same forwarding path, so the registry, its rules and its messages are the
// workers' (register and unregister reach every worker, as over gRPC). Registered regions
// are then named by REST infer requests' shared_memory_region parameters as by gRPC ones.

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/proto"
)

// uintField reads a JSON integer >= 0 (absent: 0, or a 400 when required).
func uintField(o *jsonObject, key, path string, required bool) (uint64, error) {
	v, ok := o.get(key)
	if !ok {
		if required {
			return 0, badRequest("%s: %q is required", path, key)
		}
		return 0, nil
	}
	n, isNum := v.(jsonNumber)
	x, err := strconv.ParseUint(string(n), 10, 64)
	if !isNum || err != nil {
		return 0, badRequest("%s.%s: expected an integer >= 0, got %s", path, key, describe(v))
	}
	return x, nil
}

// decodeShmRegister translates the register body of region `name`.
func decodeShmRegister(name string, body []byte) (*inferencepb.SystemSharedMemoryRegisterRequest, error) {
	doc, err := parseJSON(body)
	if err != nil {
		return nil, badRequest("request body: %v", err)
	}
	top, err := asObject(doc, "request body")
	if err != nil {
		return nil, err
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

// shmStatusJSON is Triton's REST status answer: one object per region, ordered by name.
func shmStatusJSON(resp *inferencepb.SystemSharedMemoryStatusResponse) []byte {
	names := make([]string, 0, len(resp.GetRegions()))
	for n := range resp.GetRegions() {
		names = append(names, n)
	}
	sort.Strings(names)
	list := make([]any, 0, len(names))
	for _, n := range names {
		list = append(list, protoJSON(resp.GetRegions()[n].ProtoReflect()))
	}
	return appendJSONValue(nil, list)
}

// parseShmRoute maps the path after /v2/systemsharedmemory to its RPC (region in route.model).
func parseShmRoute(rest string) (route, error) {
	switch rest {
	case "/status":
		return route{rpc: "SystemSharedMemoryStatus", method: http.MethodGet}, nil
	case "/unregister":
		return route{rpc: "SystemSharedMemoryUnregister", method: http.MethodPost}, nil
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
		return route{rpc: "SystemSharedMemoryStatus", method: http.MethodGet, model: region}, nil
	case "register":
		return route{rpc: "SystemSharedMemoryRegister", method: http.MethodPost, model: region}, nil
	case "unregister":
		return route{rpc: "SystemSharedMemoryUnregister", method: http.MethodPost, model: region}, nil
	}
	return route{}, errNoRoute
}

// sharedMemory serves the endpoints above; register and unregister answer 200 with an empty
// body (Triton's).
func (r *restServer) sharedMemory(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) {
	var in, out proto.Message
	switch rt.rpc {
	case "SystemSharedMemoryStatus":
		in, out = &inferencepb.SystemSharedMemoryStatusRequest{Name: rt.model}, &inferencepb.SystemSharedMemoryStatusResponse{}
	case "SystemSharedMemoryUnregister":
		in, out = &inferencepb.SystemSharedMemoryUnregisterRequest{Name: rt.model}, &inferencepb.SystemSharedMemoryUnregisterResponse{}
	default:
		body, err := readBody(req, r.f.maxMessageBytes)
		if err != nil {
			writeFailure(w, err)
			return
		}
		if in, err = decodeShmRegister(rt.model, body); err != nil {
			writeFailure(w, err)
			return
		}
		out = &inferencepb.SystemSharedMemoryRegisterResponse{}
	}
	if err := r.call(ctx, rt.rpc, in, out); err != nil {
		writeFailure(w, err)
		return
	}
	if st, ok := out.(*inferencepb.SystemSharedMemoryStatusResponse); ok {
		writeJSON(w, http.StatusOK, shmStatusJSON(st))
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}
