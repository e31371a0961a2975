// Package jaxport is a thin Go client for an Open Inference Protocol (KServe v2) gRPC server
// such as the jaxport bridge: the stubs in gen/inference are generated from the repository's
// proto/ (the one source of truth), and this package adds typed tensors, sane defaults
// (256 MiB message limit instead of gRPC's 4 MiB) and per-call conveniences.
//
//	import "github.com/jaxport/jaxport/clients/go/jaxport"
//
//	client, err := jaxport.NewClient("127.0.0.1:8001")
//
// Errors returned by RPCs are the gRPC errors themselves: status.Code(err) and
// status.Convert(err).Message() give the server's code and message unchanged.
//
// The generated stubs register their descriptors in a registry of their own
// (inferencepb.Files), not protobuf's global one, so a program can link this client beside
// another generated copy of the same protocol (Triton's stubs).
package jaxport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// DefaultMaxMessageSize is the default send and receive limit: large enough for real tensors
// (gRPC's own 4 MiB default rejects a 16 MiB tensor).
const DefaultMaxMessageSize = 256 << 20

type config struct {
	creds       credentials.TransportCredentials
	tlsFiles    *tlsFiles
	token       string
	tokenPlain  bool
	retry       *RetryPolicy
	lb          string
	maxMsg      int
	dialOptions []grpc.DialOption
}

// Option configures NewClient.
type Option func(*config)

// WithTransportCredentials uses TLS (or any transport credentials) instead of plaintext.
func WithTransportCredentials(c credentials.TransportCredentials) Option {
	return func(cfg *config) { cfg.creds = c }
}

type tlsFiles struct{ ca, cert, key string }

// WithTLSFiles uses TLS from PEM files, read when NewClient runs (a bad file is NewClient's
// error, naming it): caPEM is the CA to trust ("" for the system roots); certPEM and keyPEM are
// the client certificate and its private key for mutual TLS (both "" for none). It replaces
// WithTransportCredentials, which stays available for anything else.
func WithTLSFiles(caPEM, certPEM, keyPEM string) Option {
	return func(cfg *config) { cfg.tlsFiles = &tlsFiles{caPEM, certPEM, keyPEM} }
}

// WithBearerToken sends `authorization: Bearer <token>` on every call as
// credentials.PerRPCCredentials that require transport security: NewClient refuses it on a
// plaintext connection (the token would travel in the clear). Use it with WithTLSFiles or
// WithTransportCredentials, or opt in explicitly with WithInsecureBearerToken.
func WithBearerToken(token string) Option {
	return func(cfg *config) { cfg.token, cfg.tokenPlain = token, false }
}

// WithInsecureBearerToken is WithBearerToken that also sends the token over plaintext: only
// for a loopback or otherwise trusted network (a sidecar, a test server).
func WithInsecureBearerToken(token string) Option {
	return func(cfg *config) { cfg.token, cfg.tokenPlain = token, true }
}

// BearerToken is the PerRPCCredentials behind WithBearerToken, for callers that build their
// own grpc.ClientConn (grpc.WithPerRPCCredentials); allowPlaintext=false makes gRPC refuse to
// send it without transport security.
func BearerToken(token string, allowPlaintext bool) credentials.PerRPCCredentials {
	return bearer{token: token, allowPlaintext: allowPlaintext}
}

type bearer struct {
	token          string
	allowPlaintext bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearer) RequireTransportSecurity() bool { return !b.allowPlaintext }

// ErrTokenOverPlaintext is NewClient's error for WithBearerToken without transport security.
var ErrTokenOverPlaintext = errors.New("a bearer token over a plaintext connection would be sent in the clear: " +
	"use TLS (WithTLSFiles / WithTransportCredentials) or opt in with WithInsecureBearerToken")

// RetryPolicy is gRPC's own retry (the service config's retryPolicy, applied by the channel
// under every call): a call failing with UNAVAILABLE (server restarting, connection refused)
// is tried again after an exponential, jittered backoff, up to MaxAttempts in all (gRPC caps it
// at 5). Read-only calls (health, metadata, repository index, statistics, shared-memory status)
// are also retried on DEADLINE_EXCEEDED returned by the server; inference and calls that change
// state are not. The call's own deadline still bounds every attempt together. Streams are never
// retried.
type RetryPolicy struct {
	MaxAttempts       int           // attempts including the first, 2..5
	InitialBackoff    time.Duration // the first retry waits a random time in [0, InitialBackoff)
	MaxBackoff        time.Duration // the ceiling of the growing backoff
	BackoffMultiplier float64       // growth per retry, > 0
}

// DefaultRetryPolicy: 5 attempts, backoff 0.2 s doubling up to 3 s (about 6 s in the worst case).
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 3 * time.Second, BackoffMultiplier: 2}

// WithRetry turns on gRPC's retry policy (off by default: a call to an unreachable server fails
// at once with UNAVAILABLE). Pass DefaultRetryPolicy or your own. It also shortens the
// channel's reconnect backoff (100 ms growing to MaxBackoff) so a restarted server is reached
// while the retries last.
func WithRetry(p RetryPolicy) Option {
	return func(cfg *config) { cfg.retry = &p }
}

// readMethods are the idempotent reads also retried on DEADLINE_EXCEEDED.
var readMethods = []string{"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
	"RepositoryIndex", "ModelStatistics", "SystemSharedMemoryStatus", "CudaSharedMemoryStatus"}

// ServiceConfig is the gRPC service config JSON of a retry policy (what WithRetry installs as
// the channel's default service config, with WithLoadBalancing's policy when given).
func (p RetryPolicy) ServiceConfig() (string, error) {
	methods, err := p.methodConfig()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"methodConfig": methods})
	return string(b), err
}

func (p RetryPolicy) methodConfig() ([]any, error) {
	if p.MaxAttempts < 2 || p.MaxAttempts > 5 {
		return nil, fmt.Errorf("retry policy: MaxAttempts must be 2..5, got %d", p.MaxAttempts)
	}
	if p.InitialBackoff <= 0 || p.MaxBackoff < p.InitialBackoff || p.BackoffMultiplier <= 0 {
		return nil, fmt.Errorf("retry policy: need 0 < InitialBackoff <= MaxBackoff and BackoffMultiplier > 0, got %v, %v, %v",
			p.InitialBackoff, p.MaxBackoff, p.BackoffMultiplier)
	}
	const service = "inference.GRPCInferenceService"
	policy := func(codes ...string) map[string]any {
		return map[string]any{
			"maxAttempts":          p.MaxAttempts,
			"initialBackoff":       fmt.Sprintf("%.3fs", p.InitialBackoff.Seconds()),
			"maxBackoff":           fmt.Sprintf("%.3fs", p.MaxBackoff.Seconds()),
			"backoffMultiplier":    p.BackoffMultiplier,
			"retryableStatusCodes": codes,
		}
	}
	var reads []map[string]string
	for _, m := range readMethods {
		reads = append(reads, map[string]string{"service": service, "method": m})
	}
	return []any{
		map[string]any{"name": []any{map[string]string{"service": service}}, "retryPolicy": policy("UNAVAILABLE")},
		map[string]any{"name": reads, "retryPolicy": policy("UNAVAILABLE", "DEADLINE_EXCEEDED")},
		// A stream is not retried: its requests are not idempotent as a whole.
		map[string]any{"name": []any{map[string]string{"service": service, "method": "ModelStreamInfer"}}},
	}, nil
}

// WithLoadBalancing names gRPC's load-balancing policy for a target that resolves to several
// servers (replicas): "round_robin" spreads calls over every ready address the resolver gives
// (a DNS name with several A records: "dns:///jaxport.internal:8001"); gRPC's default,
// "pick_first", sends every call to one. It goes into the same default service config as
// WithRetry's policy (a second grpc.WithDefaultServiceConfig would replace the first).
func WithLoadBalancing(policy string) Option {
	return func(cfg *config) { cfg.lb = policy }
}

// serviceConfig is the default service config NewClient installs ("" for none).
func (cfg *config) serviceConfig() (string, error) {
	sc := map[string]any{}
	if cfg.lb != "" {
		sc["loadBalancingConfig"] = []any{map[string]any{cfg.lb: map[string]any{}}}
	}
	if cfg.retry != nil {
		methods, err := cfg.retry.methodConfig()
		if err != nil {
			return "", err
		}
		sc["methodConfig"] = methods
	}
	if len(sc) == 0 {
		return "", nil
	}
	b, err := json.Marshal(sc)
	return string(b), err
}

// WithMaxMessageSize sets both the send and the receive limit in bytes.
func WithMaxMessageSize(n int) Option {
	return func(cfg *config) { cfg.maxMsg = n }
}

// WithDialOptions appends raw grpc.DialOptions (interceptors, keepalive, ...).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(cfg *config) { cfg.dialOptions = append(cfg.dialOptions, opts...) }
}

func (f *tlsFiles) credentials() (credentials.TransportCredentials, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s: no PEM certificate in it", f.ca)
		}
		conf.RootCAs = pool
	}
	if (f.cert == "") != (f.key == "") {
		return nil, fmt.Errorf("client certificate and key go together: got certificate %q, key %q", f.cert, f.key)
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s / key %s: %w", f.cert, f.key, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(conf), nil
}

// Client is a connection to one inference server. It is safe for concurrent use.
type Client struct {
	conn  grpc.ClientConnInterface
	stub  pb.GRPCInferenceServiceClient
	owned *grpc.ClientConn // NewClient made it, so Close closes it; nil for NewClientFromConn
}

// NewClient creates a client for target ("host:port" or any gRPC target string, as
// grpc.NewClient takes it) on a connection it owns (Close closes it). Plaintext unless
// WithTransportCredentials or WithTLSFiles is given. Like grpc.NewClient it does no I/O: the
// connection is made by the first call (WaitReady connects and waits, bounded by a context).
func NewClient(target string, opts ...Option) (*Client, error) {
	cfg := config{creds: insecure.NewCredentials(), maxMsg: DefaultMaxMessageSize}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tlsFiles != nil {
		creds, err := cfg.tlsFiles.credentials()
		if err != nil {
			return nil, fmt.Errorf("jaxport: client for %s: %w", target, err)
		}
		cfg.creds = creds
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(cfg.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.maxMsg), grpc.MaxCallSendMsgSize(cfg.maxMsg)),
	}
	if cfg.token != "" {
		if !cfg.tokenPlain && cfg.creds.Info().SecurityProtocol == "insecure" {
			return nil, fmt.Errorf("jaxport: client for %s: %w", target, ErrTokenOverPlaintext)
		}
		dial = append(dial, grpc.WithPerRPCCredentials(BearerToken(cfg.token, cfg.tokenPlain)))
	}
	sc, err := cfg.serviceConfig()
	if err != nil {
		return nil, fmt.Errorf("jaxport: client for %s: %w", target, err)
	}
	if sc != "" {
		dial = append(dial, grpc.WithDefaultServiceConfig(sc))
	}
	if cfg.retry != nil {
		// Reconnect soon after a restart, so the retries find the server again while they last
		// (gRPC's default reconnect backoff starts at 1 s and grows to 120 s).
		dial = append(dial, grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: cfg.retry.MaxBackoff},
			MinConnectTimeout: 20 * time.Second,
		}))
	}
	dial = append(dial, cfg.dialOptions...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("jaxport: client for %s: %w", target, err)
	}
	return &Client{conn: conn, stub: pb.NewGRPCInferenceServiceClient(conn), owned: conn}, nil
}

// NewClientFromConn wraps a connection the caller made and keeps owning: the caller closes
// conn, and Client.Close leaves it open. NewClient's options do not apply; pass their gRPC
// equivalents (grpc.WithPerRPCCredentials(BearerToken(...)), grpc.WithDefaultServiceConfig(...),
// message size limits) when creating conn.
func NewClientFromConn(conn grpc.ClientConnInterface) *Client {
	return &Client{conn: conn, stub: pb.NewGRPCInferenceServiceClient(conn)}
}

// Close closes the connection if NewClient made it; for NewClientFromConn it does nothing.
func (c *Client) Close() error {
	if c.owned == nil {
		return nil
	}
	return c.owned.Close()
}

// connState is what WaitReady needs of a connection (*grpc.ClientConn has it).
type connState interface {
	Connect()
	GetState() connectivity.State
	WaitForStateChange(context.Context, connectivity.State) bool
}

// WaitReady connects and waits until the connection is ready, or fails when ctx ends (a status
// error: DEADLINE_EXCEEDED or CANCELLED): an unreachable server fails here instead of at the
// first call. For a connection of the caller's (NewClientFromConn) that is not a
// *grpc.ClientConn it returns an error saying so.
func (c *Client) WaitReady(ctx context.Context) error {
	conn, ok := c.conn.(connState)
	if !ok {
		return fmt.Errorf("jaxport: WaitReady: %T does not report its connectivity state", c.conn)
	}
	conn.Connect()
	for state := conn.GetState(); state != connectivity.Ready; state = conn.GetState() {
		if !conn.WaitForStateChange(ctx, state) {
			// DEADLINE_EXCEEDED or CANCELLED, as a call bounded by ctx would fail
			return status.Errorf(status.FromContextError(ctx.Err()).Code(), "jaxport: not ready (%v): %v", state, ctx.Err())
		}
	}
	return nil
}

// Conn is the connection the client calls on, for stubs of your own (another generated copy
// of the protocol, such as Triton's) with the client's credentials, limits and retries.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// Raw is the generated stub on the same connection, for protocol-level calls the wrapper does
// not cover (repository, statistics, deliberately malformed requests).
func (c *Client) Raw() pb.GRPCInferenceServiceClient { return c.stub }

// Live reports whether the server process answers.
func (c *Client) Live(ctx context.Context) (bool, error) {
	r, err := c.stub.ServerLive(ctx, &pb.ServerLiveRequest{})
	return r.GetLive(), err
}

// Ready reports whether the server is ready to serve inferences.
func (c *Client) Ready(ctx context.Context) (bool, error) {
	r, err := c.stub.ServerReady(ctx, &pb.ServerReadyRequest{})
	return r.GetReady(), err
}

// ModelReady reports whether a model is ready; version "" lets the server choose.
func (c *Client) ModelReady(ctx context.Context, model, version string) (bool, error) {
	r, err := c.stub.ModelReady(ctx, &pb.ModelReadyRequest{Name: model, Version: version})
	return r.GetReady(), err
}

// ServerMetadata returns the server's name, version and protocol extensions.
func (c *Client) ServerMetadata(ctx context.Context) (*pb.ServerMetadataResponse, error) {
	return c.stub.ServerMetadata(ctx, &pb.ServerMetadataRequest{})
}

// Metadata returns a model's versions, platform and input/output signatures.
func (c *Client) Metadata(ctx context.Context, model string) (*pb.ModelMetadataResponse, error) {
	return c.MetadataVersion(ctx, model, "")
}

// MetadataVersion is Metadata for one version.
func (c *Client) MetadataVersion(ctx context.Context, model, version string) (*pb.ModelMetadataResponse, error) {
	return c.stub.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: model, Version: version})
}

// Request is a full inference request. Zero values mean: latest version, no id, every output,
// raw (binary) tensor encoding.
type Request struct {
	Model   string
	Version string
	ID      string
	Inputs  []Tensor
	// Outputs names the outputs to return; empty returns all of them.
	Outputs []string
	// Typed sends inputs in the typed `contents` fields instead of raw_input_contents
	// (FP16/BF16 have no typed field and cannot be sent this way).
	Typed bool
}

// Outputs is a decoded inference response.
type Outputs struct {
	Model   string
	Version string
	ID      string
	Tensors []Tensor
}

// Get returns the output called name.
func (o Outputs) Get(name string) (Tensor, bool) {
	for _, t := range o.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Infer runs the model on the inputs and returns every output.
func (c *Client) Infer(ctx context.Context, model string, inputs ...Tensor) (Outputs, error) {
	return c.Do(ctx, Request{Model: model, Inputs: inputs})
}

// Do runs one inference request.
func (c *Client) Do(ctx context.Context, req Request) (Outputs, error) {
	msg, err := req.Proto()
	if err != nil {
		return Outputs{}, err
	}
	resp, err := c.stub.ModelInfer(ctx, msg)
	if err != nil {
		return Outputs{}, err
	}
	return DecodeResponse(resp)
}

// Proto builds the wire request.
func (r Request) Proto() (*pb.ModelInferRequest, error) {
	msg := &pb.ModelInferRequest{ModelName: r.Model, ModelVersion: r.Version, Id: r.ID}
	for _, t := range r.Inputs {
		in := t.toInput()
		if r.Typed {
			contents, err := t.TypedContents()
			if err != nil {
				return nil, err
			}
			in.Contents = contents
		} else {
			msg.RawInputContents = append(msg.RawInputContents, t.Raw)
		}
		msg.Inputs = append(msg.Inputs, in)
	}
	for _, name := range r.Outputs {
		msg.Outputs = append(msg.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: name})
	}
	return msg, nil
}

// DecodeResponse turns a wire response into typed tensors, from raw_output_contents when the
// server used them (the jaxport bridge always does) and from typed contents otherwise.
func DecodeResponse(resp *pb.ModelInferResponse) (Outputs, error) {
	out := Outputs{Model: resp.GetModelName(), Version: resp.GetModelVersion(), ID: resp.GetId()}
	raw := resp.GetRawOutputContents()
	if len(raw) != 0 && len(raw) != len(resp.GetOutputs()) {
		return out, fmt.Errorf("jaxport: response has %d outputs but %d raw_output_contents", len(resp.GetOutputs()), len(raw))
	}
	for i, o := range resp.GetOutputs() {
		var t Tensor
		if len(raw) != 0 {
			t = Tensor{Name: o.GetName(), Datatype: Datatype(o.GetDatatype()), Shape: cloneShape(o.GetShape()), Raw: raw[i]}
		} else {
			var err error
			if t, err = fromContents(o.GetName(), Datatype(o.GetDatatype()), o.GetShape(), o.GetContents()); err != nil {
				return out, fmt.Errorf("jaxport: %w", err)
			}
		}
		out.Tensors = append(out.Tensors, t)
	}
	return out, nil
}

// Stream is an open ModelStreamInfer call: Send requests, Recv results in order of arrival.
type Stream struct {
	s pb.GRPCInferenceService_ModelStreamInferClient
}

// StreamError is a failed request inside a stream: the protocol reports it as an
// error_message on the stream (which stays open), not as a gRPC status. Servers that prefix
// the status name ("INVALID_ARGUMENT: ...", as the jaxport bridge and Triton do) keep their
// code in Code, and Message is the rest; any other text is codes.Unknown with the message
// unchanged. It implements GRPCStatus, so status.Code(err) and status.Convert(err) work on it
// as on the error of a unary call.
type StreamError struct {
	Code    codes.Code
	Message string
	ID      string
}

func (e *StreamError) Error() string { return e.Code.String() + ": " + e.Message }

// GRPCStatus makes status.Code / status.FromError see the request's code.
func (e *StreamError) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// codesByName maps the canonical upper-case names ("INVALID_ARGUMENT") to codes.
var codesByName = func() map[string]codes.Code {
	m := map[string]codes.Code{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		var name []byte
		for i, r := range c.String() { // "InvalidArgument" -> "INVALID_ARGUMENT"
			if i > 0 && r >= 'A' && r <= 'Z' {
				name = append(name, '_')
			}
			name = append(name, byte(r))
		}
		m[strings.ToUpper(string(name))] = c
	}
	m["CANCELLED"] = codes.Canceled
	return m
}()

// ParseStreamError reads a stream's error_message into a StreamError (see its doc).
func ParseStreamError(message, id string) *StreamError {
	if name, rest, ok := strings.Cut(message, ": "); ok {
		if c, known := codesByName[name]; known && c != codes.OK {
			return &StreamError{Code: c, Message: rest, ID: id}
		}
	}
	return &StreamError{Code: codes.Unknown, Message: message, ID: id}
}

// OpenStream starts a bidirectional inference stream; ctx bounds its whole life.
func (c *Client) OpenStream(ctx context.Context) (*Stream, error) {
	s, err := c.stub.ModelStreamInfer(ctx)
	if err != nil {
		return nil, err
	}
	return &Stream{s: s}, nil
}

// Send queues one request on the stream.
func (s *Stream) Send(req Request) error {
	msg, err := req.Proto()
	if err != nil {
		return err
	}
	return s.s.Send(msg)
}

// CloseSend tells the server no more requests follow.
func (s *Stream) CloseSend() error { return s.s.CloseSend() }

// Recv returns the next result: Outputs, a *StreamError for a failed request, io.EOF when the
// server has finished, or the gRPC error that ended the stream.
func (s *Stream) Recv() (Outputs, error) {
	r, err := s.s.Recv()
	if err != nil {
		return Outputs{}, err
	}
	if msg := r.GetErrorMessage(); msg != "" {
		return Outputs{}, ParseStreamError(msg, r.GetInferResponse().GetId())
	}
	if r.GetInferResponse() == nil {
		return Outputs{}, errors.New("jaxport: stream response carries neither a result nor an error")
	}
	return DecodeResponse(r.GetInferResponse())
}
