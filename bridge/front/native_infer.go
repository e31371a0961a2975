package main

// The request path of natively served models (native.go): ModelInfer (gRPC and REST, which
// reaches f.unary too) and ModelStreamInfer, answered in the front with no worker involved.
//
//	parse -> signature.prepare (the one validation, infer_request.go)
//	  -> the model's batcher (package batch), or admission (admission.go) + the test gate
//	     (gate.go) + the smallest program holding the rows (padded)
//	  -> engine Program.Execute -> fired checks as their status (engine.CheckFailure)
//	  -> signature.response -> accounting (native_stats.go), once per request.
//
// A request the front leaves to the workers (shared-memory tensors: errToWorkers) is forwarded
// as if the model were not native; so is anything that does not parse (the worker gives
// grpc's answer for it).

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/jaxport/jaxport/bridge/front/batch"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	inferMethodName  = "/inference.GRPCInferenceService/ModelInfer"
	streamMethodName = "/inference.GRPCInferenceService/ModelStreamInfer"
	// Triton's stream parameters (bridge/servicer.py _wants_final_flag, _mark_final).
	enableEmptyFinal = "triton_enable_empty_final_response"
	finalResponse    = "triton_final_response"
)

var (
	modelInferMethod      = methodIndex("ModelInfer")
	modelStatisticsMethod = methodIndex("ModelStatistics")
)

// nativeRequest parses payload when it names a natively served model; nil when the workers
// answer it. The model comes back with its in-flight count taken (release with done()).
func (n *natives) nativeRequest(payload mem.BufferSlice) (*nativeModel, *inferencepb.ModelInferRequest) {
	if n == nil || n.plugin == nil {
		return nil, nil
	}
	name, ok := modelName(payload)
	if !ok || !n.hasName(name) {
		return nil, nil
	}
	req := &inferencepb.ModelInferRequest{}
	if err := proto.Unmarshal(payload.Materialize(), req); err != nil {
		return nil, nil
	}
	return n.acquire(req.GetModelName(), req.GetModelVersion()), req
}

// servesStream: the stream's first request names a natively served model version.
func (n *natives) servesStream(payload mem.BufferSlice) bool {
	model, _ := n.nativeRequest(payload)
	if model == nil {
		return false
	}
	model.inflight.Done()
	return true
}

// hasName: some version of `name` is served natively (a cheap test before parsing).
func (n *natives) hasName(name string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	e := n.byName[name]
	return e != nil && len(e.versions) > 0
}

// acquire returns the native model name/version with one more request in flight, or nil.
func (n *natives) acquire(name, version string) *nativeModel {
	n.mu.RLock()
	defer n.mu.RUnlock()
	m := n.lookup(name, version)
	if m != nil {
		m.inflight.Add(1)
	}
	return m
}

// nativeUnary answers ModelInfer for a native model; handled is false when the workers must.
func (f *front) nativeUnary(ctx context.Context, payload mem.BufferSlice) (out any, handled bool, err error) {
	model, req := f.native.nativeRequest(payload)
	if model == nil {
		return nil, false, nil
	}
	defer model.inflight.Done()
	resp, err := f.native.infer(ctx, model, req)
	if errors.Is(err, errToWorkers) {
		return nil, false, nil
	}
	f.native.countRPC(inferMethodName, status.Code(err))
	if err != nil {
		return nil, true, err
	}
	body, err := proto.Marshal(resp)
	if err != nil {
		return nil, true, status.Error(codes.Internal, err.Error())
	}
	return &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(body)}}, true, nil
}

// infer runs one request of a native model under its span (tracing.go).
func (n *natives) infer(ctx context.Context, model *nativeModel, req *inferencepb.ModelInferRequest) (*inferencepb.ModelInferResponse, error) {
	ctx, span := startSpan(ctx, "native.infer", modelAttrs(model)...)
	resp, err := n.inferOnce(ctx, model, req)
	spanErr := err
	if errors.Is(err, errToWorkers) { // not a failure: the caller forwards it to a worker
		span.SetAttributes(attribute.Bool("jaxport.forwarded_to_worker", true))
		spanErr = nil
	}
	endSpan(span, spanErr)
	return resp, err
}

// inferOnce runs one request of a native model and accounts for it once.
func (n *natives) inferOnce(ctx context.Context, model *nativeModel, req *inferencepb.ModelInferRequest) (*inferencepb.ModelInferResponse, error) {
	begun := time.Now()
	p, err := model.sig.prepare(req)
	if errors.Is(err, errToWorkers) {
		return nil, err
	}
	fail := func(err error) (*inferencepb.ModelInferResponse, error) {
		model.stats.record(time.Since(begun), status.Code(err), nil)
		return nil, err
	}
	if err != nil {
		return fail(err)
	}
	var outputs [][]byte
	t := timings{inferences: p.rows, executions: 1}
	if model.batcher != nil {
		if err := gateWait(ctx, model.name); err != nil { // where Model.submit holds a batching model's request
			return fail(err)
		}
		var bt batch.Timing
		bctx, span := startSpan(ctx, "batcher", attribute.Int("jaxport.rows", p.rows))
		submitted := time.Now()
		outputs, bt, err = model.batcher.Submit(bctx, p.rows, p.inputs)
		batchSpans(bctx, submitted, bt, err)
		endSpan(span, err)
		if err != nil {
			return fail(err)
		}
		t.queue, t.infer, t.batchRows = bt.Queue, bt.Execute, bt.BatchRows
		if !bt.First {
			t.executions = 0
		}
	} else {
		queued := time.Now()
		_, span := startSpan(ctx, "admission")
		err := n.admission.acquire(ctx, model.key)
		endSpan(span, err)
		if err != nil {
			return fail(err)
		}
		t.queue = time.Since(queued)
		if err := gateWait(ctx, model.name); err != nil {
			n.admission.release(model.key)
			return fail(err)
		}
		_, span = startSpan(ctx, "execute", attribute.Int("jaxport.rows", p.rows))
		outputs, t.input, t.infer, err = model.run(model.program(p.rows), p.inputs, p.rows)
		endSpan(span, err)
		n.admission.release(model.key)
		if err != nil {
			return fail(err)
		}
	}
	encoded := time.Now()
	resp, err := model.sig.response(req, model.version, p, outputs)
	if err != nil {
		return fail(err)
	}
	t.output = time.Since(encoded)
	model.stats.record(time.Since(begun), codes.OK, &t)
	return resp, nil
}

// internalError: an execution the engine could not finish (logged; the caller gets the
// worker's INTERNAL wording).
func internalError(model *nativeModel, err error) error {
	logNativeError(model, err)
	return status.Error(codes.Internal, "internal error")
}

// nativeStream serves a ModelStreamInfer call whose first request names a native model:
// every message in order, native ones here, others as a worker's ModelInfer, each answered
// as the workers' servicer does (an error is a response with error_message, the stream goes
// on; a message that does not parse ends the call INTERNAL, as grpcio ends it). A call whose
// caller went away ends with its context's status (CANCELLED, DEADLINE_EXCEEDED), not the
// failed send's.
func (f *front) nativeStream(ctx context.Context, ss grpc.ServerStream, first *rawMsg) error {
	code := codes.OK
	defer func() { f.native.countRPC(streamMethodName, code) }()
	in := first
	for {
		if in == nil {
			in = new(rawMsg)
			if err := ss.RecvMsg(in); err != nil {
				if err == io.EOF {
					return nil
				}
				code = status.Code(err)
				return err
			}
		}
		resp, err := f.streamItem(ctx, in.in)
		in.free()
		in = nil
		if err == nil {
			var body []byte
			if body, err = proto.Marshal(resp); err == nil {
				err = ss.SendMsg(&rawMsg{out: mem.BufferSlice{mem.SliceBuffer(body)}})
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				err = status.FromContextError(ctx.Err()).Err()
			}
			code = status.Code(err)
			return err
		}
		if ctx.Err() != nil {
			err := status.FromContextError(ctx.Err()).Err()
			code = status.Code(err)
			return err
		}
	}
}

// streamItem answers one stream message (bridge/servicer.py ModelStreamInfer's loop body);
// an error ends the stream (a message that does not parse).
func (f *front) streamItem(ctx context.Context, payload mem.BufferSlice) (*inferencepb.ModelStreamInferResponse, error) {
	req := &inferencepb.ModelInferRequest{}
	if err := proto.Unmarshal(payload.Materialize(), req); err != nil {
		return nil, status.Error(codes.Internal, "Exception deserializing request!")
	}
	if p, ok := req.GetParameters()[enableEmptyFinal]; ok {
		if _, isBool := p.GetParameterChoice().(*inferencepb.InferParameter_BoolParam); !isBool {
			return streamFailure(req, status.Error(codes.InvalidArgument,
				"invalid value type for '"+enableEmptyFinal+"' parameter, expected bool_param")), nil
		}
	}
	var resp *inferencepb.ModelInferResponse
	var err error
	if model := f.native.acquire(req.GetModelName(), req.GetModelVersion()); model != nil {
		resp, err = f.native.infer(ctx, model, req)
		model.inflight.Done()
	} else {
		err = errToWorkers
	}
	if errors.Is(err, errToWorkers) {
		resp, err = f.workerInfer(ctx, payload)
	}
	if err != nil {
		return streamFailure(req, err), nil
	}
	markFinal(resp, req)
	return &inferencepb.ModelStreamInferResponse{InferResponse: resp}, nil
}

// workerInfer sends one ModelInfer to the worker route() picks and parses its answer.
func (f *front) workerInfer(ctx context.Context, payload mem.BufferSlice) (*inferencepb.ModelInferResponse, error) {
	k := f.route(ctx, payload)
	if k == nil {
		return nil, noWorker()
	}
	r, err := k.call(ctx, modelInferMethod, payload)
	if err != nil {
		return nil, err
	}
	defer r.free()
	if err := r.err(); err != nil {
		return nil, err
	}
	resp := &inferencepb.ModelInferResponse{}
	if err := proto.Unmarshal(r.bodySlice().Materialize(), resp); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return resp, nil
}

func streamFailure(req *inferencepb.ModelInferRequest, err error) *inferencepb.ModelStreamInferResponse {
	st := status.Convert(err)
	failed := &inferencepb.ModelStreamInferResponse{
		ErrorMessage: codeName(st.Code()) + ": " + st.Message(),
		InferResponse: &inferencepb.ModelInferResponse{ModelName: req.GetModelName(),
			ModelVersion: req.GetModelVersion(), Id: req.GetId()},
	}
	markFinal(failed.InferResponse, req)
	return failed
}

// markFinal: `triton_final_response: true` when the caller asked for final flags.
func markFinal(resp *inferencepb.ModelInferResponse, req *inferencepb.ModelInferRequest) {
	p, ok := req.GetParameters()[enableEmptyFinal]
	if !ok || !p.GetBoolParam() {
		return
	}
	if resp.Parameters == nil {
		resp.Parameters = map[string]*inferencepb.InferParameter{}
	}
	resp.Parameters[finalResponse] = &inferencepb.InferParameter{
		ParameterChoice: &inferencepb.InferParameter_BoolParam{BoolParam: true}}
}
