package main

// Routing of inference calls to workers (issue 12: "batching models are routed so their
// batches actually fill").
//
// Each worker runs its own dynamic batcher per model, so spreading a batching model's
// requests over N workers splits every batch N ways. Requests for a model that batches
// therefore go to ONE worker, its owner: the first ready worker in the order fixed by a hash
// of the model name (different batching models spread over the workers; while the owner
// restarts, the next worker in that order takes over). Everything else goes to the worker
// with the fewest calls in flight.
//
// Which models batch is what the workers say: a worker's servicer advertises dynamic batching
// in the model's ModelConfig (`dynamic_batching`, with the preferred sizes and queue delay, as
// Triton reports it) exactly when it batches the model, by the settings `jaxport serve`
// validated. The front asks a worker once per model and remembers the answer until the next
// repository load/unload; it reads no batching flag itself.
// The model name is read from the request's field 1 (model_name) without parsing the rest:
// every protobuf library writes fields in number order, so it leads the message.

import (
	"context"
	"hash/fnv"
	"sync"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// router knows which models batch (learned from their ModelConfig).
type router struct {
	mu      sync.RWMutex
	learned map[string]bool // model -> its ModelConfig has dynamic_batching
}

func newRouter() *router { return &router{learned: map[string]bool{}} }

// forget drops what was learned (a repository load/unload may change which models batch).
func (r *router) forget() {
	r.mu.Lock()
	clear(r.learned)
	r.mu.Unlock()
}

// batches tells whether `model` batches; `ask` fetches its ModelConfig the first time (false,
// not remembered, when that fails: the call itself will say why).
func (r *router) batches(model string, ask func() (*inferencepb.ModelConfigResponse, error)) bool {
	r.mu.RLock()
	b, ok := r.learned[model]
	r.mu.RUnlock()
	if ok {
		return b
	}
	cfg, err := ask()
	if err != nil {
		return false
	}
	b = cfg.GetConfig().GetDynamicBatching() != nil
	r.mu.Lock()
	r.learned[model] = b
	r.mu.Unlock()
	return b
}

// modelNamePrefix is how far into a request the model name is looked for.
const modelNamePrefix = 1024

// modelName reads field 1 (model_name of ModelInferRequest) from the first bytes of a
// serialized request; false if it is not among the leading fields (inferTarget).
func modelName(payload mem.BufferSlice) (string, bool) {
	name, _, ok := inferTarget(payload)
	return name, ok
}

// methodIndex is the wire id of an RPC of the inference service (its declaration order).
func methodIndex(name string) uint8 {
	sd := inferencepb.File_inference_grpc_service_proto.Services().ByName(protoreflect.Name("GRPCInferenceService"))
	return uint8(sd.Methods().ByName(protoreflect.Name(name)).Index())
}

var modelConfigMethod = methodIndex("ModelConfig")

// owner is the worker that executes every request of a batching model: the first ready worker
// in the order given by the model name's hash (else the first connected one in that order).
func (f *front) owner(model string) *conn {
	h := fnv.New32a()
	h.Write([]byte(model))
	start := int(h.Sum32() % uint32(len(f.workers)))
	var fallback *conn
	for i := range f.workers {
		k, ready := live(f.workers[(start+i)%len(f.workers)])
		if k != nil && ready {
			return k
		}
		if k != nil && fallback == nil {
			fallback = k
		}
	}
	return fallback
}

// route picks the worker for an inference request (`payload`: a serialized
// ModelInferRequest, or nil when there is none, as for a stream closed at once).
func (f *front) route(ctx context.Context, payload mem.BufferSlice) *conn {
	if len(f.workers) > 1 && payload != nil {
		if name, ok := modelName(payload); ok && f.routes.batches(name, func() (*inferencepb.ModelConfigResponse, error) {
			return f.modelConfig(ctx, name)
		}) {
			if k := f.owner(name); k != nil {
				return k
			}
		}
	}
	return f.pick()
}

// modelConfig asks one worker for a model's configuration.
func (f *front) modelConfig(ctx context.Context, name string) (*inferencepb.ModelConfigResponse, error) {
	cfg := &inferencepb.ModelConfigResponse{}
	if err := f.askWorker(ctx, modelConfigMethod, &inferencepb.ModelConfigRequest{Name: name}, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// askWorker sends one unary RPC to a ready worker and parses its answer into `out`.
func (f *front) askWorker(ctx context.Context, method uint8, req, out proto.Message) error {
	k := f.pick()
	if k == nil {
		return noWorker()
	}
	body, _ := proto.Marshal(req)
	r, err := k.call(ctx, method, mem.BufferSlice{mem.SliceBuffer(body)})
	if err != nil {
		return err
	}
	defer r.free()
	if err := r.err(); err != nil {
		return err
	}
	return proto.Unmarshal(r.bodySlice().Materialize(), out)
}
