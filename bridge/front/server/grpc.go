package server

// The gRPC transport: inference.GRPCInferenceService with every method's request passed as
// its serialized bytes (rawCodec) to a handler that parses it once (ModelInfer:
// request.Parse, views into the received buffer; the rest: their generated messages) and
// answers with pieces the transport sends as they are (output bytes not copied into a
// message); grpc.health.v1 with per-model answers; reflection.

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rawMsg carries a message's serialized bytes through gRPC untouched.
type rawMsg struct {
	in  mem.BufferSlice // a request, referenced from gRPC's buffers (Free after use)
	out [][]byte        // a response's pieces
}

// Free gives the request's buffers back (security.Freer: a refused call's too).
func (m *rawMsg) Free() {
	if m.in != nil {
		m.in.Free()
		m.in = nil
	}
}

// bytes: the request as one slice: a view of gRPC's buffer when it is one, else a copy.
func (m *rawMsg) bytes() []byte {
	if len(m.in) == 1 {
		return m.in[0].ReadOnlyData()
	}
	return m.in.Materialize()
}

// rawCodec passes rawMsg through as bytes and everything else (health, reflection) to the
// standard proto codec.
type rawCodec struct{ proto encoding.CodecV2 }

// Codec is the server's codec (grpc.ForceServerCodecV2).
func Codec() encoding.CodecV2 { return rawCodec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c rawCodec) Name() string { return protocodec.Name }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMsg); ok {
		out := make(mem.BufferSlice, 0, len(m.out))
		for _, p := range m.out {
			if len(p) > 0 {
				out = append(out, mem.SliceBuffer(p))
			}
		}
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rawMsg); ok {
		data.Ref()
		m.in = data
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

type unary func(ctx context.Context, payload []byte) ([][]byte, error)

// typed is a unary handler of a generated request and response.
func typed[Req proto.Message](newReq func() Req, h func(ctx context.Context, req Req) (proto.Message, error)) unary {
	return func(ctx context.Context, payload []byte) ([][]byte, error) {
		req := newReq()
		if err := proto.Unmarshal(payload, req); err != nil {
			return nil, request.ErrDeserialize
		}
		resp, err := h(ctx, req)
		if err != nil {
			return nil, err
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(resp)
		if err != nil {
			return nil, status.New(codes.Internal, err.Error())
		}
		return [][]byte{b}, nil
	}
}

// handlers: every unary RPC of the service.
func (s *Service) handlers() map[string]unary {
	return map[string]unary{
		"ServerLive": typed(func() *inferencepb.ServerLiveRequest { return &inferencepb.ServerLiveRequest{} },
			func(context.Context, *inferencepb.ServerLiveRequest) (proto.Message, error) {
				return &inferencepb.ServerLiveResponse{Live: s.ServerLive()}, nil
			}),
		"ServerReady": typed(func() *inferencepb.ServerReadyRequest { return &inferencepb.ServerReadyRequest{} },
			func(context.Context, *inferencepb.ServerReadyRequest) (proto.Message, error) {
				return &inferencepb.ServerReadyResponse{Ready: s.ServerReady()}, nil
			}),
		"ModelReady": typed(func() *inferencepb.ModelReadyRequest { return &inferencepb.ModelReadyRequest{} },
			func(_ context.Context, r *inferencepb.ModelReadyRequest) (proto.Message, error) {
				ready, err := s.ModelReady(r.GetName(), r.GetVersion())
				if err != nil {
					return nil, err
				}
				return &inferencepb.ModelReadyResponse{Ready: ready}, nil
			}),
		"ServerMetadata": typed(func() *inferencepb.ServerMetadataRequest { return &inferencepb.ServerMetadataRequest{} },
			func(context.Context, *inferencepb.ServerMetadataRequest) (proto.Message, error) {
				return s.ServerMetadata(), nil
			}),
		"ModelMetadata": typed(func() *inferencepb.ModelMetadataRequest { return &inferencepb.ModelMetadataRequest{} },
			func(_ context.Context, r *inferencepb.ModelMetadataRequest) (proto.Message, error) {
				return s.ModelMetadata(r.GetName(), r.GetVersion())
			}),
		"ModelConfig": typed(func() *inferencepb.ModelConfigRequest { return &inferencepb.ModelConfigRequest{} },
			func(_ context.Context, r *inferencepb.ModelConfigRequest) (proto.Message, error) {
				return s.ModelConfig(r.GetName(), r.GetVersion())
			}),
		"ModelStatistics": typed(func() *inferencepb.ModelStatisticsRequest { return &inferencepb.ModelStatisticsRequest{} },
			func(_ context.Context, r *inferencepb.ModelStatisticsRequest) (proto.Message, error) {
				return s.ModelStatistics(r.GetName(), r.GetVersion())
			}),
		"RepositoryIndex": typed(func() *inferencepb.RepositoryIndexRequest { return &inferencepb.RepositoryIndexRequest{} },
			func(_ context.Context, r *inferencepb.RepositoryIndexRequest) (proto.Message, error) {
				return s.RepositoryIndex(r)
			}),
		"RepositoryModelLoad": typed(func() *inferencepb.RepositoryModelLoadRequest { return &inferencepb.RepositoryModelLoadRequest{} },
			func(ctx context.Context, r *inferencepb.RepositoryModelLoadRequest) (proto.Message, error) {
				return &inferencepb.RepositoryModelLoadResponse{}, s.RepositoryModelLoad(ctx, r)
			}),
		"RepositoryModelUnload": typed(func() *inferencepb.RepositoryModelUnloadRequest { return &inferencepb.RepositoryModelUnloadRequest{} },
			func(ctx context.Context, r *inferencepb.RepositoryModelUnloadRequest) (proto.Message, error) {
				return &inferencepb.RepositoryModelUnloadResponse{}, s.RepositoryModelUnload(ctx, r)
			}),
		"SystemSharedMemoryStatus": typed(func() *inferencepb.SystemSharedMemoryStatusRequest {
			return &inferencepb.SystemSharedMemoryStatusRequest{}
		}, func(_ context.Context, r *inferencepb.SystemSharedMemoryStatusRequest) (proto.Message, error) {
			return s.SystemSharedMemoryStatus(r.GetName())
		}),
		"SystemSharedMemoryRegister": typed(func() *inferencepb.SystemSharedMemoryRegisterRequest {
			return &inferencepb.SystemSharedMemoryRegisterRequest{}
		}, func(_ context.Context, r *inferencepb.SystemSharedMemoryRegisterRequest) (proto.Message, error) {
			return &inferencepb.SystemSharedMemoryRegisterResponse{}, s.SystemSharedMemoryRegister(r)
		}),
		"SystemSharedMemoryUnregister": typed(func() *inferencepb.SystemSharedMemoryUnregisterRequest {
			return &inferencepb.SystemSharedMemoryUnregisterRequest{}
		}, func(_ context.Context, r *inferencepb.SystemSharedMemoryUnregisterRequest) (proto.Message, error) {
			return &inferencepb.SystemSharedMemoryUnregisterResponse{}, s.SystemSharedMemoryUnregister(r.GetName())
		}),
		"CudaSharedMemoryStatus": typed(func() *inferencepb.CudaSharedMemoryStatusRequest {
			return &inferencepb.CudaSharedMemoryStatusRequest{}
		}, func(_ context.Context, r *inferencepb.CudaSharedMemoryStatusRequest) (proto.Message, error) {
			return s.CudaSharedMemoryStatus(r.GetName())
		}),
		"CudaSharedMemoryRegister": typed(func() *inferencepb.CudaSharedMemoryRegisterRequest {
			return &inferencepb.CudaSharedMemoryRegisterRequest{}
		}, func(_ context.Context, r *inferencepb.CudaSharedMemoryRegisterRequest) (proto.Message, error) {
			return nil, s.CudaSharedMemoryRegister(r.GetName())
		}),
		"CudaSharedMemoryUnregister": typed(func() *inferencepb.CudaSharedMemoryUnregisterRequest {
			return &inferencepb.CudaSharedMemoryUnregisterRequest{}
		}, func(context.Context, *inferencepb.CudaSharedMemoryUnregisterRequest) (proto.Message, error) {
			return &inferencepb.CudaSharedMemoryUnregisterResponse{}, nil
		}),
		"TraceSetting": typed(func() *inferencepb.TraceSettingRequest { return &inferencepb.TraceSettingRequest{} },
			func(_ context.Context, r *inferencepb.TraceSettingRequest) (proto.Message, error) {
				return s.TraceSetting(r)
			}),
		"ModelInfer": func(ctx context.Context, payload []byte) ([][]byte, error) {
			req, err := request.Parse(payload)
			if err != nil {
				return nil, err
			}
			resp, err := s.Infer(ctx, req)
			if err != nil {
				return nil, err
			}
			return resp.Marshal(), nil
		},
	}
}

// deadlineMargin: how long before a call's deadline the front answers DEADLINE_EXCEEDED
// itself (at most a tenth of the time left): at the deadline grpc-go resets the stream
// (RST_STREAM CANCEL, no status: the caller would see CANCELLED whenever that beats its own
// timer), so a call still running (a worker that hangs) gets the status grpc's own servers
// give.
const deadlineMargin = 20 * time.Millisecond

func answerBeforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl.Add(-min(deadlineMargin, time.Until(dl)/10)))
}

// withDeadlineAnswer runs h, answering DEADLINE_EXCEEDED at the shortened deadline even when
// h is still running.
func withDeadlineAnswer(ctx context.Context, h func(context.Context) ([][]byte, error)) ([][]byte, error) {
	ctx, cancel := answerBeforeDeadline(ctx)
	defer cancel()
	return h(ctx)
}

// ServiceDesc builds inference.GRPCInferenceService from the generated descriptor.
func (s *Service) ServiceDesc() *grpc.ServiceDesc {
	sd := inferencepb.File_inference_grpc_service_proto.Services().ByName(protoreflect.Name("GRPCInferenceService"))
	desc := &grpc.ServiceDesc{ServiceName: string(sd.FullName()), HandlerType: (*any)(nil),
		Metadata: inferencepb.File_inference_grpc_service_proto.Path()}
	handlers := s.handlers()
	methods := sd.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		name := string(m.Name())
		full := fmt.Sprintf("/%s/%s", sd.FullName(), name)
		if m.IsStreamingClient() || m.IsStreamingServer() {
			desc.Streams = append(desc.Streams, grpc.StreamDesc{StreamName: name,
				ServerStreams: m.IsStreamingServer(), ClientStreams: m.IsStreamingClient(),
				Handler: func(_ any, stream grpc.ServerStream) error {
					err := s.stream(stream)
					s.o.Metrics.CountRPC(full, status.Code(err))
					return err
				}})
			continue
		}
		h := handlers[name]
		if h == nil {
			h = func(context.Context, []byte) ([][]byte, error) {
				return nil, status.Errorf(codes.Unimplemented, "%s is not implemented", name)
			}
		}
		desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(rawMsg)
				if err := dec(in); err != nil {
					return nil, err
				}
				handler := func(ctx context.Context, req any) (any, error) {
					msg := req.(*rawMsg)
					defer msg.Free()
					out, err := withDeadlineAnswer(ctx, func(ctx context.Context) ([][]byte, error) { return h(ctx, msg.bytes()) })
					if err == nil && ctx.Err() != nil {
						err = status.FromContext(ctx.Err())
					}
					s.o.Metrics.CountRPC(full, status.Code(err))
					if err != nil {
						return nil, err
					}
					return &rawMsg{out: out}, nil
				}
				if interceptor == nil {
					return handler(ctx, in)
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, handler)
			}})
	}
	return desc
}

// stream serves ModelStreamInfer: every message in order, each answered as StreamItem does;
// a message that does not parse ends the call INTERNAL (as grpcio ends it); a call whose
// caller went away ends with its context's status.
func (s *Service) stream(ss grpc.ServerStream) error {
	ctx, cancel := answerBeforeDeadline(ss.Context())
	defer cancel()
	for {
		in := new(rawMsg)
		if err := ss.RecvMsg(in); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		req, err := request.Parse(in.bytes())
		var pieces [][]byte
		if err == nil {
			msg, resp := s.StreamItem(ctx, req)
			pieces = request.MarshalStream(msg, resp)
		}
		in.Free()
		if err == nil {
			err = ss.SendMsg(&rawMsg{out: pieces})
		}
		if ctx.Err() != nil {
			return status.FromContext(ctx.Err())
		}
		if err != nil {
			return err
		}
	}
}

// Register adds the inference service, grpc.health.v1 (per-model: a model's name as the
// service) and reflection to srv; the returned health server is SERVING once SetServing.
func (s *Service) Register(srv *grpc.Server) *health.Server {
	srv.RegisterService(s.ServiceDesc(), struct{}{})
	h := health.NewServer()
	for _, svc := range []string{"", ServiceName} {
		h.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthpb.RegisterHealthServer(srv, &modelHealth{Server: h, s: s})
	// v1 and v1alpha; the inference stubs live in a registry of their own (inferencepb.Resolver,
	// docs/clients.md: they coexist with other generated copies of inference.*).
	opts := reflection.ServerOptions{Services: srv, DescriptorResolver: inferencepb.Resolver}
	v1reflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServerV1(opts))
	v1alphareflectiongrpc.RegisterServerReflectionServer(srv, reflection.NewServer(opts))
	return h
}

// modelHealth answers a model's name as a service (grpc-health-probe -service=MODEL,
// Kubernetes' gRPC probes): SERVING when the server serves and the model is ready,
// NOT_SERVING when either is not, NOT_FOUND for no model of that name. Watch keeps the
// health.Server's behaviour (model names are not pushed).
type modelHealth struct {
	*health.Server
	s *Service
}

func (h *modelHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "" || req.GetService() == ServiceName {
		return h.Server.Check(ctx, req)
	}
	server, err := h.Server.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return nil, err
	}
	if server.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return server, nil
	}
	ready, err := h.s.ModelReady(req.GetService(), "")
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, status.Errorf(codes.NotFound, "unknown service: no model '%s' (per-model health: "+
			"the service is a model name)", req.GetService())
	case err != nil:
		return nil, err
	case ready:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}
