// Package rest is the Open Inference Protocol's REST/JSON API (KServe v2 REST, with Triton's
// binary tensor data extension) on --http-port: each endpoint decodes its request straight
// into the types the gRPC handlers take (an inference request into request.Request, no
// protobuf round trip), calls the same server.Service method, and writes that method's result
// as JSON (and binary data); a status becomes the HTTP status of the one table
// (status.HTTPStatus) and a body {"error": "<the status message>"}.
//
// Security as for gRPC: the same TLS/mTLS files, the same bearer token check and open methods
// (health is open: ServerLive/ServerReady), the same --max-message-bytes (request body).
package rest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jaxport/jaxport/bridge/front/compression"
	"github.com/jaxport/jaxport/bridge/front/security"
	"github.com/jaxport/jaxport/bridge/front/server"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// TimeoutHeader carries a call's deadline in seconds (a decimal number > 0); without it a REST
// call has no deadline, like a gRPC call without grpc-timeout.
const TimeoutHeader = "Timeout"

// Server is the HTTP side of one front.
type Server struct {
	svc      *server.Service
	token    []byte // nil: no token required
	maxBytes int
	srv      *http.Server
	lis      net.Listener
}

// Listen listens on address (TLS when tlsConfig is set); the bound port is returned. It
// serves once Serve is called (a port in use fails before anything starts).
func Listen(svc *server.Service, address string, tlsConfig *tls.Config, token []byte, maxBytes int) (*Server, int, error) {
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot listen on %s: %v", address, err)
	}
	r := &Server{svc: svc, token: token, maxBytes: maxBytes, lis: lis}
	r.srv = &http.Server{
		Handler:           svc.Tracing().HTTPHandler(r, rpcOf), // a server span per request
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
	if tlsConfig != nil {
		r.srv.TLSConfig = tlsConfig
		r.lis = tls.NewListener(lis, tlsConfig)
	}
	return r, lis.Addr().(*net.TCPAddr).Port, nil
}

// Serve answers REST requests in the background.
func (r *Server) Serve() {
	go func() {
		if err := r.srv.Serve(r.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "error", err.Error())
		}
	}()
}

// Shutdown: no new connections, in-flight requests finish (until ctx ends); Close: cut them.
func (r *Server) Shutdown(ctx context.Context) error { return r.srv.Shutdown(ctx) }
func (r *Server) Close()                             { _ = r.srv.Close() }

// route is what a path asks for: the RPC and its model/version.
type route struct {
	rpc     string // an RPC of inference.GRPCInferenceService
	method  string // HTTP method
	model   string // or the shared-memory region
	version string
}

var errNoRoute = errors.New("no route")

// rpcOf names a request's RPC for its span ("unknown" for a path with no endpoint).
func rpcOf(req *http.Request) string {
	if rt, err := parseRoute(req.Method, req.URL.EscapedPath()); err == nil {
		return rt.rpc
	}
	return "unknown"
}

// parseRoute maps a REST path to its RPC. Path segments are unescaped one by one, so a model
// name may hold any character as %XX.
func parseRoute(method, escapedPath string) (route, error) {
	p := strings.TrimSuffix(escapedPath, "/")
	if p == "/v2" {
		return route{rpc: "ServerMetadata", method: http.MethodGet}, nil
	}
	if rt, ok := traceSettingRoute(method, p); ok { // Triton's trace extension
		return rt, nil
	}
	switch p {
	case "/v2/health/live":
		return route{rpc: "ServerLive", method: http.MethodGet}, nil
	case "/v2/health/ready":
		return route{rpc: "ServerReady", method: http.MethodGet}, nil
	case "/v2/models/stats":
		return route{rpc: "ModelStatistics", method: http.MethodGet}, nil
	}
	for _, k := range shmKinds {
		if rest, ok := strings.CutPrefix(p, k.prefix); ok {
			return parseShmRoute(k.kind, rest)
		}
	}
	switch p {
	case "/v2/repository/index":
		return route{rpc: "RepositoryIndex", method: http.MethodPost}, nil
	}
	if rest, ok := strings.CutPrefix(p, "/v2/repository/models/"); ok {
		name, action, ok := strings.Cut(rest, "/")
		model, err := url.PathUnescape(name)
		if !ok || err != nil || model == "" {
			return route{}, errNoRoute
		}
		switch action {
		case "load":
			return route{rpc: "RepositoryModelLoad", method: http.MethodPost, model: model}, nil
		case "unload":
			return route{rpc: "RepositoryModelUnload", method: http.MethodPost, model: model}, nil
		}
		return route{}, errNoRoute
	}
	rest, ok := strings.CutPrefix(p, "/v2/models/")
	if !ok || rest == "" {
		return route{}, errNoRoute
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			return route{}, errNoRoute
		}
		segs[i] = u
	}
	r := route{model: segs[0]}
	segs = segs[1:]
	if len(segs) >= 2 && segs[0] == "versions" {
		r.version = segs[1]
		segs = segs[2:]
	}
	switch {
	case len(segs) == 0:
		r.rpc, r.method = "ModelMetadata", http.MethodGet
	case len(segs) == 1 && segs[0] == "ready":
		r.rpc, r.method = "ModelReady", http.MethodGet
	case len(segs) == 1 && segs[0] == "infer":
		r.rpc, r.method = "ModelInfer", http.MethodPost
	case len(segs) == 1 && segs[0] == "config":
		r.rpc, r.method = "ModelConfig", http.MethodGet
	case len(segs) == 1 && segs[0] == "stats":
		r.rpc, r.method = "ModelStatistics", http.MethodGet
	default:
		return route{}, errNoRoute
	}
	return r, nil
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	writeJSON(w, code, appendJSONValue(nil, newObject().set("error", msg)))
}

// writeFailure answers an error: a codec refusal with its own HTTP status, a gRPC status
// through the one table.
func writeFailure(w http.ResponseWriter, err error) {
	code, msg := status.HTTP(err)
	writeError(w, code, msg)
}

// fullMethod is the gRPC name of rpc (token checks, jaxport_grpc_requests_total).
func fullMethod(rpc string) string { return "/" + server.ServiceName + "/" + rpc }

func (r *Server) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	cw := compression.NewWriter(rw, req) // Accept-Encoding
	defer cw.Close()
	var w http.ResponseWriter = cw
	rt, err := parseRoute(req.Method, req.URL.EscapedPath())
	if err != nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no REST endpoint %s %s (see docs/rest.md: /v2, /v2/health/live|ready, "+
			"/v2/models/{model}[/versions/{version}][/ready|/infer|/config|/stats], /v2/repository/index, "+
			"/v2/repository/models/{model}/load|unload, /v2/{system,cuda}sharedmemory[/region/{name}]/status|register|unregister, /v2[/models/{model}]/trace/setting)", req.Method, req.URL.Path))
		return
	}
	allowed := rt.method
	if allowed == http.MethodGet && req.Method == http.MethodHead {
		allowed = http.MethodHead
	}
	if req.Method != allowed {
		w.Header().Set("Allow", rt.method)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed; use %s", req.Method, req.URL.Path, rt.method))
		return
	}
	ctx := req.Context()
	if r.token != nil {
		md := metadata.MD{}
		if v := req.Header.Values("Authorization"); len(v) > 0 {
			md.Set("authorization", v...)
		}
		if err := security.Authorized(metadata.NewIncomingContext(ctx, md), fullMethod(rt.rpc), r.token); err != nil {
			writeFailure(w, err)
			return
		}
	}
	if v := req.Header.Get(TimeoutHeader); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || !(secs > 0) || secs > 1e9 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("header %s: expected seconds > 0 (e.g. 2.5), got %q", TimeoutHeader, v))
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(secs*float64(time.Second)))
		defer cancel()
	}
	code := r.answer(ctx, w, req, rt)
	if rt.rpc != "TraceSetting" {
		r.svc.Metrics().CountRPC(fullMethod(rt.rpc), code)
	}
}

// answer serves one endpoint; its status code is counted as the RPC's.
func (r *Server) answer(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) codes.Code {
	fail := func(err error) codes.Code {
		writeFailure(w, err)
		if st, ok := status.FromError(err); ok {
			return st.Code()
		}
		return codes.InvalidArgument // refused by the codec before the call
	}
	var out proto.Message
	switch rt.rpc {
	case "ModelInfer":
		return r.infer(ctx, w, req, rt)
	case "TraceSetting":
		r.traceSetting(w, req)
		return codes.OK
	case "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload":
		return r.repository(ctx, w, req, rt)
	// Health false is a 4xx (the OIP REST text: "a 4xx status code indicates false"; Triton
	// answers 400), with {"error"}: a probe reads the status alone.
	case "ServerLive":
		if !r.svc.ServerLive() {
			writeJSON(w, http.StatusBadRequest, appendJSONValue(nil, newObject().set("error", "server is not live")))
		} else {
			writeJSON(w, http.StatusOK, []byte(`{"live":true}`))
		}
		return codes.OK
	case "ServerReady":
		if !r.svc.ServerReady() {
			writeJSON(w, http.StatusBadRequest, appendJSONValue(nil, newObject().set("error", "server is not ready")))
		} else {
			writeJSON(w, http.StatusOK, []byte(`{"ready":true}`))
		}
		return codes.OK
	case "ModelReady":
		ready, err := r.svc.ModelReady(rt.model, rt.version)
		if err != nil {
			return fail(err)
		}
		if !ready {
			msg := fmt.Sprintf("model '%s' is not ready", rt.model)
			if rt.version != "" {
				msg = fmt.Sprintf("model '%s' version '%s' is not ready", rt.model, rt.version)
			}
			writeJSON(w, http.StatusBadRequest, appendJSONValue(nil, newObject().set("error", msg)))
			return codes.OK
		}
		writeJSON(w, http.StatusOK, appendJSONValue(nil, newObject().set("name", rt.model).set("ready", true)))
		return codes.OK
	case "ServerMetadata":
		out = r.svc.ServerMetadata()
	case "ModelMetadata":
		m, err := r.svc.ModelMetadata(rt.model, rt.version)
		if err != nil {
			return fail(err)
		}
		out = m
	case "ModelConfig":
		m, err := r.svc.ModelConfig(rt.model, rt.version)
		if err != nil {
			return fail(err)
		}
		writeJSON(w, http.StatusOK, appendJSONValue(nil, protoJSON(m.GetConfig().ProtoReflect())))
		return codes.OK
	case "ModelStatistics":
		m, err := r.svc.ModelStatistics(rt.model, rt.version)
		if err != nil {
			return fail(err)
		}
		out = m
	default:
		return r.sharedMemory(w, req, rt)
	}
	writeJSON(w, http.StatusOK, appendJSONValue(nil, protoJSON(out.ProtoReflect())))
	return codes.OK
}

func (r *Server) infer(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) codes.Code {
	fail := func(err error) codes.Code {
		writeFailure(w, err)
		if st, ok := status.FromError(err); ok {
			return st.Code()
		}
		return codes.InvalidArgument
	}
	body, err := compression.ReadBody(req, r.maxBytes)
	if err != nil {
		return fail(err)
	}
	jsonLength := int64(-1)
	if v := req.Header.Get("Inference-Header-Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fail(status.BadRequest("header Inference-Header-Content-Length: expected a byte count >= 0, got %q", v))
		}
		jsonLength = n
	}
	request, plan, err := decodeInferRequest(body, jsonLength, rt.model, rt.version)
	if err != nil {
		return fail(err)
	}
	response, err := r.svc.Infer(ctx, request)
	if err != nil {
		return fail(err)
	}
	header, blobs, err := encodeInferResponse(response, plan)
	if err != nil {
		return fail(err)
	}
	total := len(header)
	for _, b := range blobs {
		total += len(b)
	}
	h := w.Header()
	if len(blobs) > 0 {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("Content-Length", strconv.Itoa(total))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(header); err != nil {
		return codes.OK
	}
	for _, b := range blobs {
		if _, err := w.Write(b); err != nil {
			return codes.OK
		}
	}
	return codes.OK
}

// repository serves Triton's model repository extension: POST /v2/repository/index (body
// {"ready": bool}, optional) answers the index as a JSON array; POST
// /v2/repository/models/{m}/load|unload (body {"parameters": {...}}, optional) answers 200
// with an empty body.
func (r *Server) repository(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) codes.Code {
	fail := func(err error) codes.Code {
		writeFailure(w, err)
		if st, ok := status.FromError(err); ok {
			return st.Code()
		}
		return codes.InvalidArgument
	}
	body, err := compression.ReadBody(req, r.maxBytes)
	if err != nil {
		return fail(err)
	}
	in, err := decodeRepositoryRequest(rt.rpc, rt.model, body)
	if err != nil {
		return fail(err)
	}
	switch m := in.(type) {
	case *inferencepb.RepositoryIndexRequest:
		index, err := r.svc.RepositoryIndex(m)
		if err != nil {
			return fail(err)
		}
		list := []any{}
		for _, e := range index.GetModels() {
			list = append(list, protoJSON(e.ProtoReflect()))
		}
		writeJSON(w, http.StatusOK, appendJSONValue(nil, list))
		return codes.OK
	case *inferencepb.RepositoryModelLoadRequest:
		err = r.svc.RepositoryModelLoad(ctx, m)
	case *inferencepb.RepositoryModelUnloadRequest:
		err = r.svc.RepositoryModelUnload(ctx, m)
	}
	if err != nil {
		return fail(err)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
	return codes.OK
}

// sharedMemory serves the shared-memory endpoints (shm.go); register and unregister answer
// 200 with an empty body (Triton's).
func (r *Server) sharedMemory(w http.ResponseWriter, req *http.Request, rt route) codes.Code {
	fail := func(err error) codes.Code {
		writeFailure(w, err)
		if st, ok := status.FromError(err); ok {
			return st.Code()
		}
		return codes.InvalidArgument
	}
	var err error
	switch rt.rpc {
	case "SystemSharedMemoryStatus":
		out, err := r.svc.SystemSharedMemoryStatus(rt.model)
		if err != nil {
			return fail(err)
		}
		writeJSON(w, http.StatusOK, shmStatusJSON(out))
		return codes.OK
	case "CudaSharedMemoryStatus":
		out, err := r.svc.CudaSharedMemoryStatus(rt.model)
		if err != nil {
			return fail(err)
		}
		writeJSON(w, http.StatusOK, shmStatusJSON(out))
		return codes.OK
	case "SystemSharedMemoryUnregister":
		err = r.svc.SystemSharedMemoryUnregister(rt.model)
	case "CudaSharedMemoryUnregister":
	default: // a register RPC
		body, rerr := compression.ReadBody(req, r.maxBytes)
		if rerr != nil {
			return fail(rerr)
		}
		in, derr := decodeShmRegister(rt.rpc, rt.model, body)
		if derr != nil {
			return fail(derr)
		}
		switch m := in.(type) {
		case *inferencepb.SystemSharedMemoryRegisterRequest:
			err = r.svc.SystemSharedMemoryRegister(m)
		case *inferencepb.CudaSharedMemoryRegisterRequest:
			err = r.svc.CudaSharedMemoryRegister(m.GetName())
		}
	}
	if err != nil {
		return fail(err)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
	return codes.OK
}
