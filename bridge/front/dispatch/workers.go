package dispatch

import (
	"context"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/workers"
)

// WorkerPool adapts package workers' Pool to Workers.
func WorkerPool(p *workers.Pool) Workers { return workerPool{p} }

type workerPool struct{ p *workers.Pool }

func (w workerPool) Open(ctx context.Context, a Artifact, engine string) (Executable, error) {
	h, err := w.p.Load(ctx, workers.Model{Key: a.Model + "/" + a.Version, Location: a.Location, Engine: engine})
	if err != nil {
		return nil, err
	}
	datatypes := make([]string, len(a.Manifest.GetInputs()))
	for i, in := range a.Manifest.GetInputs() {
		datatypes[i] = in.GetDtype().GetDatatype()
	}
	return &workerModel{h: h, datatypes: datatypes}, nil
}

// workerModel is a version open on the workers.
type workerModel struct {
	h         *workers.Handle
	datatypes []string // manifest inputs'
}

func (m *workerModel) Execute(ctx context.Context, program int, inputs []request.Tensor) ([]request.Tensor, error) {
	in := make([]workers.Tensor, len(inputs))
	for i, t := range inputs {
		in[i] = workers.Tensor{Datatype: m.datatypes[i], Shape: t.Shape, Data: t.Data}
	}
	results, err := m.h.Execute(ctx, program, in)
	if err != nil {
		return nil, err
	}
	out := make([]request.Tensor, len(results))
	for i, r := range results {
		out[i] = request.Tensor{Shape: r.Shape, Data: r.Data}
	}
	return out, nil
}

func (m *workerModel) LoadSeconds() map[string]float64 { return m.h.LoadSeconds() }

func (m *workerModel) Close() { m.h.Close() }
