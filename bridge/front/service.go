package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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
		mode, merge := forwarding(name)
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(rawMsg)
				if err := dec(in); err != nil {
					return nil, err
				}
				handler := func(ctx context.Context, req any) (any, error) {
					defer req.(*rawMsg).free()
					return f.unary(ctx, index, req.(*rawMsg).in, mode, merge)
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

// forwarding is how the unary RPC `name` reaches the workers, for gRPC (serviceDesc) and REST
// (http.go) alike: every worker (repository and shared-memory control), every worker merged
// (statistics), a still-loading worker first (ServerReady), a batching model's owner
// (ModelInfer), else the least busy worker.
func forwarding(name string) (forwardMode, func([][]byte) ([]byte, error)) {
	switch {
	case broadcast[name]:
		return forwardAll, nil
	case gathered[name] != nil:
		return forwardGather, gathered[name]
	case name == "ServerReady":
		return forwardReadiness, nil
	case name == "ModelInfer":
		return forwardRouted, nil
	}
	return forwardOne, nil
}

var rr atomic.Uint64

// live is the worker's connection unless there is none or it has failed (the process died and
// is not reaped yet): a call handed to it would fail at once, so none is.
func live(w *worker) (*conn, bool) {
	k, ready := w.current()
	if k == nil {
		return nil, false
	}
	select {
	case <-k.dead:
		return nil, false
	default:
		return k, ready
	}
}

// pick returns the ready worker with the fewest calls in flight (round-robin among equals);
// a worker still loading its repository (just restarted) only when no worker is ready, so a
// restart does not fail the calls it would otherwise be handed.
func (f *front) pick() *conn {
	start := int(rr.Add(1))
	var best, loading *conn
	for i := range f.workers {
		k, ready := live(f.workers[(start+i)%len(f.workers)])
		if k == nil {
			continue
		}
		if !ready {
			if loading == nil {
				loading = k
			}
			continue
		}
		if best == nil || k.inflight.Load() < best.inflight.Load() {
			best = k
		}
	}
	if best == nil {
		return loading
	}
	return best
}

func noWorker() error {
	return status.Error(codes.Unavailable, "no execution worker is running (starting or restarting)")
}

// pickNotReady returns a connected worker still loading its repository, if any.
func (f *front) pickNotReady() *conn {
	for _, w := range f.workers {
		if k, ready := live(w); k != nil && !ready {
			return k
		}
	}
	return nil
}

// deadlineMargin: how long before a call's deadline the front gives up on the worker.
const deadlineMargin = 20 * time.Millisecond

// answerBeforeDeadline (unary calls and streams) shortens the call's deadline by deadlineMargin (at most a tenth of the
// time left). At the deadline itself grpc-go resets the stream (RST_STREAM CANCEL, no status:
// the caller would see CANCELLED whenever that beats its own timer); answering
// DEADLINE_EXCEEDED just before it gives the caller of a worker that hangs the status grpc's
// own servers give.
func answerBeforeDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, dl.Add(-min(deadlineMargin, time.Until(dl)/10)))
}

// How a unary RPC reaches the workers.
type forwardMode int

const (
	forwardOne       forwardMode = iota // the worker with the fewest calls in flight
	forwardRouted                       // ModelInfer: a batching model's owner, else as forwardOne
	forwardReadiness                    // ServerReady: a worker still loading, if any
	forwardAll                          // state changes: every worker, one answer
	forwardGather                       // every worker, answers merged (stats.go)
)

// unary forwards one call as `mode` says; forwardGather merges the answers with `merge`.
func (f *front) unary(ctx context.Context, method uint8, payload mem.BufferSlice, mode forwardMode,
	merge func([][]byte) ([]byte, error)) (any, error) {
	ctx, cancel := answerBeforeDeadline(ctx)
	defer cancel()
	if method == traceSettingMethod { // the front's own settings (tracing.go)
		return f.traceSettingUnary(payload.Materialize())
	}
	switch mode {
	case forwardAll:
		defer f.routes.forget() // a load/unload may change which models batch
		out, err := f.everyWorker(ctx, method, payload, nil)
		f.native.sync(ctx) // ... and which run natively
		return out, err
	case forwardGather:
		if method == modelStatisticsMethod { // natively executed requests are counted here
			return f.everyWorker(ctx, method, payload, merge, f.native.statisticsBody(payload.Materialize()))
		}
		return f.everyWorker(ctx, method, payload, merge)
	}
	var k *conn
	switch mode {
	case forwardReadiness:
		if !f.native.ready() { // not before the native engine has opened its models
			body, _ := proto.Marshal(&inferencepb.ServerReadyResponse{Ready: false})
			return &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(body)}}, nil
		}
		k = f.pickNotReady()
	case forwardRouted:
		defer inferPending.enter(payload)() // nv_inference_pending_request_count (metrics_triton.go)
		if out, handled, err := f.nativeUnary(ctx, payload); handled {
			return out, err
		}
		k = f.route(ctx, payload)
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
	if method == modelConfigMethod { // the artifact directory stays here; native engines show
		defer r.free()
		return &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(
			f.native.rewriteConfig(payload.Materialize(), r.bodySlice().Materialize()))}}, nil
	}
	return &rawMsg{out: r.bodySlice()}, nil
}

// everyWorker sends the call to every connected worker, one after the other. The first
// failure is the answer; else, without `merge`, the first worker's answer, with it, the
// answers merged (with `own`, the front's answers, appended).
func (f *front) everyWorker(ctx context.Context, method uint8, payload mem.BufferSlice,
	merge func([][]byte) ([]byte, error), own ...[]byte) (any, error) {
	var replies []*reply
	defer func() {
		for _, r := range replies {
			r.free()
		}
	}()
	for _, w := range f.workers {
		k, _ := live(w)
		if k == nil {
			continue
		}
		r, err := k.call(ctx, method, payload)
		if err != nil {
			return nil, err
		}
		replies = append(replies, r)
		if r.code != 0 {
			return nil, r.err()
		}
	}
	if len(replies) == 0 {
		return nil, noWorker()
	}
	if merge == nil {
		first := replies[0]
		replies = replies[1:] // the first one's buffer passes to gRPC
		return &rawMsg{out: first.bodySlice()}, nil
	}
	bodies := make([][]byte, len(replies))
	for i, r := range replies {
		bodies[i] = r.bodySlice().Materialize()
	}
	bodies = append(bodies, own...) // the front's own answer (ModelStatistics of native models)
	out, err := merge(bodies)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(out)}}, nil
}

// stream forwards one ModelStreamInfer call to one worker: client messages as STREAM_MSG,
// the client's half-close as STREAM_HALF_CLOSE, the worker's responses back in order.
func (f *front) stream(ss grpc.ServerStream, method uint8) error {
	// As for unary calls: a stream still running at its deadline ends DEADLINE_EXCEEDED from
	// here, not by grpc-go's reset (which a caller may read as CANCELLED).
	ctx, cancel := answerBeforeDeadline(ss.Context())
	defer cancel()
	// The stream's worker is chosen by its first request (a batching model's owner).
	first := new(rawMsg)
	firstErr := ss.RecvMsg(first)
	if firstErr != nil && firstErr != io.EOF {
		return firstErr
	}
	if first.in != nil && f.native.servesStream(first.in) { // no worker on this stream
		return f.nativeStream(ctx, ss, first)
	}
	k := f.route(ctx, first.in)
	if k == nil {
		first.free()
		return noWorker()
	}
	id, s, err := k.openStream(ctx, method)
	if err != nil {
		first.free()
		return err
	}
	defer k.forgetStream(id)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			in, err := first, firstErr
			first = nil
			if in == nil {
				in = new(rawMsg)
				err = ss.RecvMsg(in)
			}
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
