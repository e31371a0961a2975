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
// Which models batch is decided as `jaxport serve` decides it (bridge/server.py _load): a
// model named in --batching-models, or, with --batching, a model exported with batch sizes
// (its ModelConfig max_batch_size > 0, asked of a worker once per model and remembered until
// the next repository load/unload). The flags are the ones the front hands to its workers
// (command line, else JAXPORT_BATCHING / JAXPORT_BATCHING_MODELS as the workers read them).
// The model name is read from the request's field 1 (model_name) without parsing the rest:
// every protobuf library writes fields in number order, so it leads the message.

import (
	"context"
	"hash/fnv"
	"os"
	"strings"
	"sync"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// router knows which models batch.
type router struct {
	batchAll bool            // --batching: every model exported with batch sizes
	listed   map[string]bool // --batching-models: these batch in any case

	mu      sync.Mutex
	learned map[string]bool // with batchAll: model -> has batch sizes (from ModelConfig)
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// newRouter reads --batching / --batching-models from the workers' arguments (as argparse
// does: `--batching` alone or with a true/false value, `--flag=value`), else from the
// environment the workers inherit.
func newRouter(workerArgs []string, lookupEnv func(string) (string, bool)) *router {
	r := &router{listed: map[string]bool{}, learned: map[string]bool{}}
	var batching, models *string
	for i := 0; i < len(workerArgs); i++ {
		name, value, hasValue := strings.Cut(workerArgs[i], "=")
		switch name {
		case "--batching":
			v := "true"
			if hasValue {
				v = value
			} else if i+1 < len(workerArgs) {
				if _, ok := parseBool(workerArgs[i+1]); ok {
					v = workerArgs[i+1]
					i++
				}
			}
			batching = &v
		case "--batching-models":
			if !hasValue && i+1 < len(workerArgs) {
				value = workerArgs[i+1]
				i++
			}
			models = &value
		}
	}
	if batching == nil {
		if v, ok := lookupEnv("JAXPORT_BATCHING"); ok {
			batching = &v
		}
	}
	if models == nil {
		if v, ok := lookupEnv("JAXPORT_BATCHING_MODELS"); ok {
			models = &v
		}
	}
	if batching != nil {
		r.batchAll, _ = parseBool(*batching)
	}
	if models != nil {
		for _, entry := range strings.Split(*models, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(entry), ":"); name != "" {
				r.listed[name] = true
			}
		}
	}
	return r
}

func (r *router) enabled() bool { return r.batchAll || len(r.listed) > 0 }

// forget drops what was learned (a repository load/unload may change a model's batch sizes).
func (r *router) forget() {
	r.mu.Lock()
	clear(r.learned)
	r.mu.Unlock()
}

// batches tells whether `model` batches; with --batching, `ask` fetches its ModelConfig
// the first time (false, not remembered, when that fails: the call itself will say why).
func (r *router) batches(model string, ask func() (*inferencepb.ModelConfigResponse, error)) bool {
	if r.listed[model] {
		return true
	}
	if !r.batchAll {
		return false
	}
	r.mu.Lock()
	b, ok := r.learned[model]
	r.mu.Unlock()
	if ok {
		return b
	}
	cfg, err := ask()
	if err != nil {
		return false
	}
	b = cfg.GetConfig().GetMaxBatchSize() > 0
	r.mu.Lock()
	r.learned[model] = b
	r.mu.Unlock()
	return b
}

// modelNamePrefix is how far into a request the model name is looked for.
const modelNamePrefix = 1024

// modelName reads field 1 (model_name of ModelInferRequest) from the first bytes of a
// serialized request; false if it is not among the leading fields.
func modelName(payload mem.BufferSlice) (string, bool) {
	var head []byte
	for _, b := range payload {
		d := b.ReadOnlyData()
		head = append(head, d[:min(len(d), modelNamePrefix-len(head))]...)
		if len(head) >= modelNamePrefix {
			break
		}
	}
	for len(head) > 0 {
		num, typ, n := protowire.ConsumeTag(head)
		if n < 0 {
			return "", false
		}
		head = head[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(head)
			if m < 0 {
				return "", false
			}
			return string(v), true
		}
		m := protowire.ConsumeFieldValue(num, typ, head)
		if m < 0 {
			return "", false
		}
		head = head[m:]
	}
	return "", false
}

// methodIndex is the wire id of an RPC of the inference service (its declaration order).
func methodIndex(name string) uint8 {
	sd := inferencepb.File_inference_grpc_service_proto.Services().ByName(protoreflect.Name("GRPCInferenceService"))
	return uint8(sd.Methods().ByName(protoreflect.Name(name)).Index())
}

var (
	modelConfigMethod = methodIndex("ModelConfig")
	routerOnce        sync.Once
	theRouter         *router
)

// router is the front's router, built from its worker arguments on first use.
func (f *front) router() *router {
	routerOnce.Do(func() { theRouter = newRouter(f.workerArgs, os.LookupEnv) })
	return theRouter
}

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
		if r := f.router(); r.enabled() {
			if name, ok := modelName(payload); ok && r.batches(name, func() (*inferencepb.ModelConfigResponse, error) {
				return f.modelConfig(ctx, name)
			}) {
				if k := f.owner(name); k != nil {
					return k
				}
			}
		}
	}
	return f.pick()
}

// modelConfig asks one worker for a model's configuration.
func (f *front) modelConfig(ctx context.Context, name string) (*inferencepb.ModelConfigResponse, error) {
	k := f.pick()
	if k == nil {
		return nil, noWorker()
	}
	req, _ := proto.Marshal(&inferencepb.ModelConfigRequest{Name: name})
	r, err := k.call(ctx, modelConfigMethod, mem.BufferSlice{mem.SliceBuffer(req)})
	if err != nil {
		return nil, err
	}
	defer r.free()
	if err := r.err(); err != nil {
		return nil, err
	}
	cfg := &inferencepb.ModelConfigResponse{}
	if err := proto.Unmarshal(r.bodySlice().Materialize(), cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}
