package main

// The repository (package repository) as the server asks of it (server.Repository), with
// the dispatcher's Load as its loader.

import (
	"context"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/repository"
	"github.com/jaxport/jaxport/bridge/front/server"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
)

// loader opens each version the repository serves on the dispatcher.
func loader(d *dispatch.Dispatcher) repository.Loader[*dispatch.Model] {
	return repository.LoaderFunc[*dispatch.Model](func(ctx context.Context, v *repository.Version) (*dispatch.Model, error) {
		labels, err := v.Artifact.Labels(ctx)
		if err != nil {
			return nil, err
		}
		return d.Load(ctx, dispatch.Artifact{Model: v.Model, Version: v.String(), Artifact: v.Artifact,
			Manifest: v.Artifact.Manifest, Location: v.Location, Labels: labels})
	})
}

type served struct {
	*repository.Repository[*dispatch.Model]
}

func (r served) Index(readyOnly bool) []server.Entry {
	var out []server.Entry
	for _, s := range r.Repository.Index(context.Background(), readyOnly) {
		out = append(out, server.Entry{Name: s.Name, Version: s.VersionString(), State: s.State, Reason: s.Reason})
	}
	return out
}

// Metrics: every version of the table, the serving ones with their counters.
func (r served) Metrics() []telemetry.Model {
	byKey := map[[2]string]*dispatch.Model{}
	if models, err := r.Repository.Serving(""); err == nil {
		for _, m := range models {
			byKey[[2]string{m.Name, m.Version}] = m
		}
	}
	var out []telemetry.Model
	for _, s := range r.Repository.Index(context.Background(), false) {
		if s.Version == 0 {
			continue
		}
		t := telemetry.Model{Name: s.Name, Version: s.VersionString(), Ready: s.State == repository.Ready}
		if m := byKey[[2]string{s.Name, t.Version}]; m != nil {
			t.Stats, t.LoadSeconds, t.Batch = m.Stats, m.LoadSeconds(), m.BatchCounters()
		}
		out = append(out, t)
	}
	return out
}
