package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const serviceName = "inference.GRPCInferenceService"

// broadcast lists the RPCs that change a worker's state: each worker must see them, so they
// go to every connected worker (the first failure, else the first worker's answer, is
// returned). Everything else goes to one worker.
var broadcast = map[string]bool{
	"RepositoryModelLoad":          true,
	"RepositoryModelUnload":        true,
	"SystemSharedMemoryRegister":   true,
	"SystemSharedMemoryUnregister": true,
}

// rawMsg carries a message's serialized bytes through gRPC untouched.
type rawMsg struct {
	in  mem.BufferSlice // a request, referenced from gRPC's buffers (free after use)
	out mem.BufferSlice // a response from a worker (gRPC frees it once sent)
}

func (m *rawMsg) free() {
	if m.in != nil {
		m.in.Free()
		m.in = nil
	}
}

// rawCodec passes rawMsg through as bytes and everything else (health, reflection) to the
// standard proto codec.
type rawCodec struct{ proto encoding.CodecV2 }

func newRawCodec() rawCodec { return rawCodec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c rawCodec) Name() string { return protocodec.Name }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMsg); ok {
		if m.out == nil {
			return mem.BufferSlice{}, nil
		}
		return m.out, nil
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

// serviceDesc builds inference.GRPCInferenceService from the generated descriptor: one
// forwarding handler per RPC, the method index (the wire id) being its declaration order.
func (f *front) serviceDesc() *grpc.ServiceDesc {
	sd := inferencepb.File_inference_grpc_service_proto.Services().ByName(protoreflect.Name("GRPCInferenceService"))
	desc := &grpc.ServiceDesc{
		ServiceName: string(sd.FullName()),
		HandlerType: (*any)(nil),
		Metadata:    inferencepb.File_inference_grpc_service_proto.Path(),
	}
	methods := sd.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		index := uint8(i)
		name := string(m.Name())
		full := fmt.Sprintf("/%s/%s", sd.FullName(), name)
		if m.IsStreamingClient() || m.IsStreamingServer() {
			desc.Streams = append(desc.Streams, grpc.StreamDesc{
				StreamName:    name,
				ServerStreams: m.IsStreamingServer(),
				ClientStreams: m.IsStreamingClient(),
				Handler: func(_ any, stream grpc.ServerStream) error {
					return f.stream(stream, index)
				},
			})
			continue
		}
		all := broadcast[name]
		readiness := name == "ServerReady"
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(rawMsg)
				if err := dec(in); err != nil {
					return nil, err
				}
				handler := func(ctx context.Context, req any) (any, error) {
					defer req.(*rawMsg).free()
					return f.unary(ctx, index, req.(*rawMsg).in, all, readiness)
				}
				if interceptor == nil {
					return handler(ctx, in)
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: full}, handler)
			},
		})
	}
	return desc
}

var rr atomic.Uint64

// pick returns the connected worker with the fewest calls in flight (round-robin among equals).
func (f *front) pick() *conn {
	start := int(rr.Add(1))
	var best *conn
	for i := range f.workers {
		k, _ := f.workers[(start+i)%len(f.workers)].current()
		if k == nil {
			continue
		}
		if best == nil || k.inflight.Load() < best.inflight.Load() {
			best = k
		}
	}
	return best
}

func noWorker() error {
	return status.Error(codes.Unavailable, "no execution worker is running (starting or restarting)")
}

// pickNotReady returns a connected worker still loading its repository, if any.
func (f *front) pickNotReady() *conn {
	for _, w := range f.workers {
		if k, ready := w.current(); k != nil && !ready {
			return k
		}
	}
	return nil
}

// unary forwards one call: to every worker (`all`), or to one; ServerReady (`readiness`) goes
// to a worker still loading when there is one, so the server is ready only when all are.
func (f *front) unary(ctx context.Context, method uint8, payload mem.BufferSlice, all, readiness bool) (any, error) {
	if !all {
		var k *conn
		if readiness {
			k = f.pickNotReady()
		}
		if k == nil {
			k = f.pick()
		}
		if k == nil {
			return nil, noWorker()
		}
		r, err := k.call(ctx, method, payload)
		if err != nil {
			return nil, err
		}
		if err := r.err(); err != nil {
			r.free()
			return nil, err
		}
		return &rawMsg{out: r.bodySlice()}, nil
	}
	var first *reply
	for _, w := range f.workers {
		k, _ := w.current()
		if k == nil {
			continue
		}
		r, err := k.call(ctx, method, payload)
		if err != nil {
			return nil, err
		}
		if r.code != 0 {
			r.free()
			if first != nil {
				first.free()
			}
			return nil, r.err()
		}
		if first == nil {
			first = r
		} else {
			r.free()
		}
	}
	if first == nil {
		return nil, noWorker()
	}
	return &rawMsg{out: first.bodySlice()}, nil
}

// stream forwards one ModelStreamInfer call to one worker: client messages as STREAM_MSG,
// the client's half-close as STREAM_HALF_CLOSE, the worker's responses back in order.
func (f *front) stream(ss grpc.ServerStream, method uint8) error {
	ctx := ss.Context()
	k := f.pick()
	if k == nil {
		return noWorker()
	}
	id, s, err := k.openStream(ctx, method)
	if err != nil {
		return err
	}
	defer k.forgetStream(id)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			in := new(rawMsg)
			err := ss.RecvMsg(in)
			if err == io.EOF {
				_ = k.writeBytes(header{ftype: frameStreamHalfClose, method: method, id: id}, nil)
				return
			}
			if err != nil {
				_ = k.writeBytes(header{ftype: frameCancel, method: method, id: id}, nil)
				return
			}
			werr := k.write(header{ftype: frameStreamMsg, method: method, id: id}, in.in)
			in.free()
			if werr != nil {
				return
			}
		}
	}()
	for {
		body, end, ok := s.next()
		if ok && end == nil {
			out := mem.BufferSlice{}
			if body != nil {
				out = mem.BufferSlice{body}
			}
			if err := ss.SendMsg(&rawMsg{out: out}); err != nil {
				_ = k.writeBytes(header{ftype: frameCancel, method: method, id: id}, nil)
				return err
			}
			continue
		}
		if ok {
			return end.err()
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			_ = k.writeBytes(header{ftype: frameCancel, method: method, id: id}, nil)
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}
