package main

// The Open Inference Protocol REST/JSON API on --http-port (KServe v2 REST, with Triton's
// binary tensor data extension). Each endpoint is a codec in front of one RPC of
// inference.GRPCInferenceService: the JSON (and binary) request is translated into the RPC's
// protobuf request, sent through the same forwarding path as a gRPC call (f.unary: a worker
// runs today's servicer), and the protobuf answer or status is translated back. Validation,
// error texts and numerics are therefore the Python bridge's; a gRPC status becomes the HTTP
// status of httpStatusOf and a body {"error": "<the status message>"}.
//
// Security as for gRPC: the same TLS/mTLS files, the same bearer token check and open methods
// (health is open: ServerLive/ServerReady), the same --max-message-bytes (request body).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// timeoutHeader carries a call's deadline in seconds (a decimal number > 0); without it a REST
// call has no deadline, like a gRPC call without grpc-timeout.
const timeoutHeader = "Timeout"

// restServer is the HTTP side of one front.
type restServer struct {
	f     *front
	token []byte // nil: no token required
	srv   *http.Server
	lis   net.Listener
}

// listenREST listens on --http-port (TLS when configured); the bound port is returned. It
// serves once serve is called: main listens before it starts any worker (a port in use exits
// 1 with no worker started) and serves once the workers exist.
func (f *front) listenREST(token []byte) (*restServer, int, error) {
	address := net.JoinHostPort(f.host, strconv.Itoa(f.httpPort))
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot listen on %s: %v", address, err)
	}
	r := &restServer{f: f, token: token, lis: lis}
	r.srv = &http.Server{
		Handler:           f.trace.httpHandler(r), // a server span per request (tracing.go)
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}
	if f.tlsCert != "" {
		cfg, err := serverTLSConfig(f.tlsCert, f.tlsKey, f.tlsClientCA)
		if err != nil {
			lis.Close()
			return nil, 0, err
		}
		r.srv.TLSConfig = cfg
		r.lis = tls.NewListener(lis, cfg)
	}
	return r, lis.Addr().(*net.TCPAddr).Port, nil
}

// serve answers REST requests in the background.
func (r *restServer) serve() {
	go func() {
		if err := r.srv.Serve(r.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "error", err.Error())
		}
	}()
}

// shutdown: no new connections, in-flight requests finish (until ctx ends); close: cut them.
func (r *restServer) shutdown(ctx context.Context) error { return r.srv.Shutdown(ctx) }
func (r *restServer) close()                             { _ = r.srv.Close() }

// route is what a path asks for: the RPC and its model/version.
type route struct {
	rpc     string // an RPC of inference.GRPCInferenceService
	method  string // HTTP method
	model   string // or the shared-memory region
	version string
}

var errNoRoute = errors.New("no route")

// parseRoute maps a REST path to its RPC. Path segments are unescaped one by one, so a model
// name may hold any character as %XX.
func parseRoute(method, escapedPath string) (route, error) {
	p := strings.TrimSuffix(escapedPath, "/")
	if p == "/v2" {
		return route{rpc: "ServerMetadata", method: http.MethodGet}, nil
	}
	if rt, ok := traceSettingRoute(method, p); ok { // Triton's trace extension (tracing.go)
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

// writeFailure answers an error: a codec refusal with its own status, a gRPC status through
// httpStatusOf.
func writeFailure(w http.ResponseWriter, err error) {
	var re *restError
	if errors.As(err, &re) {
		writeError(w, re.status, re.msg)
		return
	}
	st := status.Convert(err)
	writeError(w, httpStatus(st.Code()), st.Message())
}

func (r *restServer) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	cw := newCompressingWriter(rw, req) // Accept-Encoding (compression.go)
	defer cw.close()
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
		if err := authorized(metadata.NewIncomingContext(ctx, md), "/"+serviceName+"/"+rt.rpc, r.token); err != nil {
			writeFailure(w, err)
			return
		}
	}
	if v := req.Header.Get(timeoutHeader); v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || !(secs > 0) || secs > 1e9 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("header %s: expected seconds > 0 (e.g. 2.5), got %q", timeoutHeader, v))
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(secs*float64(time.Second)))
		defer cancel()
	}
	if rt.rpc == "ModelInfer" {
		r.infer(ctx, w, req, rt)
		return
	}
	if rt.rpc == "TraceSetting" {
		r.traceSettingREST(w, req)
		return
	}
	if strings.HasPrefix(rt.rpc, "Repository") {
		r.repository(ctx, w, req, rt)
		return
	}
	if strings.Contains(rt.rpc, "SharedMemory") {
		r.sharedMemory(ctx, w, req, rt)
		return
	}
	var in, out proto.Message
	switch rt.rpc {
	case "ServerLive":
		in, out = &inferencepb.ServerLiveRequest{}, &inferencepb.ServerLiveResponse{}
	case "ServerReady":
		in, out = &inferencepb.ServerReadyRequest{}, &inferencepb.ServerReadyResponse{}
	case "ServerMetadata":
		in, out = &inferencepb.ServerMetadataRequest{}, &inferencepb.ServerMetadataResponse{}
	case "ModelMetadata":
		in, out = &inferencepb.ModelMetadataRequest{Name: rt.model, Version: rt.version}, &inferencepb.ModelMetadataResponse{}
	case "ModelReady":
		in, out = &inferencepb.ModelReadyRequest{Name: rt.model, Version: rt.version}, &inferencepb.ModelReadyResponse{}
	case "ModelConfig":
		in, out = &inferencepb.ModelConfigRequest{Name: rt.model, Version: rt.version}, &inferencepb.ModelConfigResponse{}
	case "ModelStatistics":
		in, out = &inferencepb.ModelStatisticsRequest{Name: rt.model, Version: rt.version}, &inferencepb.ModelStatisticsResponse{}
	}
	if err := r.f.call(ctx, rt.rpc, in, out); err != nil {
		writeFailure(w, err)
		return
	}
	code, body := answerJSON(rt, out)
	writeJSON(w, code, body)
}

// answerJSON is the REST body (and status) of a successful non-infer RPC: KServe's shapes for
// health ({"live": true}, {"ready": true}, {"name": m, "ready": true}; 503 and {"error"} when
// false, so a probe reads the status alone) and the message's fields otherwise.
func answerJSON(rt route, out proto.Message) (int, []byte) {
	switch m := out.(type) {
	case *inferencepb.ServerLiveResponse:
		if !m.GetLive() {
			return http.StatusServiceUnavailable, appendJSONValue(nil, newObject().set("error", "server is not live"))
		}
		return http.StatusOK, []byte(`{"live":true}`)
	case *inferencepb.ServerReadyResponse:
		if !m.GetReady() {
			return http.StatusServiceUnavailable, appendJSONValue(nil, newObject().set("error", "server is not ready"))
		}
		return http.StatusOK, []byte(`{"ready":true}`)
	case *inferencepb.ModelReadyResponse:
		if !m.GetReady() {
			msg := fmt.Sprintf("model '%s' is not ready", rt.model)
			if rt.version != "" {
				msg = fmt.Sprintf("model '%s' version '%s' is not ready", rt.model, rt.version)
			}
			return http.StatusServiceUnavailable, appendJSONValue(nil, newObject().set("error", msg))
		}
		return http.StatusOK, appendJSONValue(nil, newObject().set("name", rt.model).set("ready", true))
	case *inferencepb.ModelConfigResponse:
		return http.StatusOK, appendJSONValue(nil, protoJSON(m.GetConfig().ProtoReflect()))
	}
	return http.StatusOK, appendJSONValue(nil, protoJSON(out.ProtoReflect()))
}

// call sends one RPC of inference.GRPCInferenceService from inside the front (REST, per-model
// health) through the unary path a gRPC call takes, and parses the answer into out.
func (f *front) call(ctx context.Context, rpc string, in, out proto.Message) error {
	payload, err := proto.Marshal(in)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if len(payload) > f.maxMessageBytes {
		return &restError{http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the request translates to a %d-byte message; --max-message-bytes is %d", len(payload), f.maxMessageBytes)}
	}
	mode, merge := forwarding(rpc)
	res, err := f.unary(ctx, methodIndex(rpc), mem.BufferSlice{mem.SliceBuffer(payload)}, mode, merge)
	if err != nil {
		return err
	}
	body := res.(*rawMsg).out
	defer body.Free()
	var data []byte
	if len(body) == 1 {
		data = body[0].ReadOnlyData()
	} else {
		data = body.Materialize()
	}
	if err := proto.Unmarshal(data, out); err != nil {
		return status.Errorf(codes.Internal, "cannot parse the worker's %s response: %v", rpc, err)
	}
	return nil
}

// readBody reads at most limit bytes; a larger body is refused with 413 naming the limit. A
// body with a Content-Encoding is decoded, the limit bounding its decoded size
// (compression.go).
func readBody(req *http.Request, limit int) ([]byte, error) {
	if ce := strings.TrimSpace(req.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return readEncodedBody(req, limit)
	}
	tooLarge := func(n string) error {
		return &restError{http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"request body of %s bytes exceeds --max-message-bytes %d", n, limit)}
	}
	if req.ContentLength > int64(limit) {
		return nil, tooLarge(strconv.FormatInt(req.ContentLength, 10))
	}
	var body []byte
	var err error
	if req.ContentLength >= 0 { // one allocation of the announced size
		body = make([]byte, req.ContentLength)
		_, err = io.ReadFull(req.Body, body)
	} else { // chunked: read up to one byte past the limit
		body, err = io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
	}
	if err != nil {
		return nil, badRequest("cannot read the request body: %v", err)
	}
	if len(body) > limit {
		return nil, tooLarge("more than " + strconv.Itoa(limit))
	}
	return body, nil
}

func (r *restServer) infer(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) {
	body, err := readBody(req, r.f.maxMessageBytes)
	if err != nil {
		writeFailure(w, err)
		return
	}
	jsonLength := int64(-1)
	if v := req.Header.Get("Inference-Header-Content-Length"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("header Inference-Header-Content-Length: expected a byte count >= 0, got %q", v))
			return
		}
		jsonLength = n
	}
	request, plan, err := decodeInferRequest(body, jsonLength, rt.model, rt.version)
	if err != nil {
		writeFailure(w, err)
		return
	}
	response := &inferencepb.ModelInferResponse{}
	if err := r.f.call(ctx, "ModelInfer", request, response); err != nil {
		writeFailure(w, err)
		return
	}
	header, blobs, err := encodeInferResponse(response, plan)
	if err != nil {
		writeFailure(w, err)
		return
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
		return
	}
	for _, b := range blobs {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

// repository serves Triton's model repository extension: POST /v2/repository/index (body
// {"ready": bool}, optional) answers the index as a JSON array; POST
// /v2/repository/models/{m}/load|unload (body {"parameters": {...}}, optional) answers 200
// with an empty body. Load and unload reach every worker, as over gRPC.
func (r *restServer) repository(ctx context.Context, w http.ResponseWriter, req *http.Request, rt route) {
	body, err := readBody(req, r.f.maxMessageBytes)
	if err != nil {
		writeFailure(w, err)
		return
	}
	in, err := decodeRepositoryRequest(rt.rpc, rt.model, body)
	if err != nil {
		writeFailure(w, err)
		return
	}
	var out proto.Message
	switch rt.rpc {
	case "RepositoryIndex":
		out = &inferencepb.RepositoryIndexResponse{}
	case "RepositoryModelLoad":
		out = &inferencepb.RepositoryModelLoadResponse{}
	default:
		out = &inferencepb.RepositoryModelUnloadResponse{}
	}
	if err := r.f.call(ctx, rt.rpc, in, out); err != nil {
		writeFailure(w, err)
		return
	}
	if index, ok := out.(*inferencepb.RepositoryIndexResponse); ok {
		list := []any{}
		for _, m := range index.GetModels() {
			list = append(list, protoJSON(m.ProtoReflect()))
		}
		writeJSON(w, http.StatusOK, appendJSONValue(nil, list))
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}
