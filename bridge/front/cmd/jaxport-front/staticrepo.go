package main

// TEMPORARY (until ONE-REPO's package repository lands): a local repository loaded once at
// start, every model at its latest version, no load/unload. It exists only so the new front
// can be brought up and tested end to end; it is deleted when cmd wires package repository.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"github.com/jaxport/jaxport/bridge/front/dispatch"
	"github.com/jaxport/jaxport/bridge/front/engine"
	"github.com/jaxport/jaxport/bridge/front/server"
	"github.com/jaxport/jaxport/bridge/front/status"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	"google.golang.org/grpc/codes"
)

type staticVersion struct {
	name, version string
	state, reason string
	model         *dispatch.Model
}

type staticRepo struct {
	root   string
	single string
	d      *dispatch.Dispatcher
	mu     sync.Mutex
	table  map[string][]*staticVersion // ascending
}

func newStaticRepo(root, single string, d *dispatch.Dispatcher) *staticRepo {
	return &staticRepo{root: root, single: single, d: d, table: map[string][]*staticVersion{}}
}

func versionsOf(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 && e.IsDir() && strconv.Itoa(n) == e.Name() {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

func (r *staticRepo) loadAll(ctx context.Context) {
	models := map[string]string{} // name -> dir of its latest version
	if r.single != "" {
		if _, err := os.Stat(filepath.Join(r.root, engine.ManifestFile)); err == nil {
			models[r.single] = r.root + "\x001"
		} else if vs := versionsOf(r.root); len(vs) > 0 {
			models[r.single] = filepath.Join(r.root, strconv.Itoa(vs[len(vs)-1])) + "\x00" + strconv.Itoa(vs[len(vs)-1])
		}
	} else {
		entries, _ := os.ReadDir(r.root)
		for _, e := range entries {
			if !e.IsDir() || e.Name()[0] == '.' {
				continue
			}
			if vs := versionsOf(filepath.Join(r.root, e.Name())); len(vs) > 0 {
				v := strconv.Itoa(vs[len(vs)-1])
				models[e.Name()] = filepath.Join(r.root, e.Name(), v) + "\x00" + v
			}
		}
	}
	for name, dv := range models {
		dir, version := dv[:len(dv)-len(filepath.Base(dv))], ""
		for i := len(dv) - 1; i >= 0; i-- {
			if dv[i] == 0 {
				dir, version = dv[:i], dv[i+1:]
				break
			}
		}
		v := &staticVersion{name: name, version: version, state: "LOADING"}
		r.mu.Lock()
		r.table[name] = []*staticVersion{v}
		r.mu.Unlock()
		m, err := r.open(ctx, name, version, dir)
		r.mu.Lock()
		if err != nil {
			v.state, v.reason = "UNAVAILABLE", status.Convert(err).Message()
		} else {
			v.state, v.model = "READY", m
		}
		r.mu.Unlock()
	}
}

func (r *staticRepo) open(ctx context.Context, name, version, dir string) (*dispatch.Model, error) {
	m, err := engine.ReadManifest(dir)
	if err != nil {
		return nil, dispatch.LoadError("%v", err)
	}
	labels, err := engine.Labels(dir, m)
	if err != nil {
		return nil, dispatch.LoadError("%v", err)
	}
	return r.d.Load(ctx, dispatch.Artifact{Model: name, Version: version, Manifest: m, Dir: dir, Location: dir, Labels: labels})
}

func (r *staticRepo) find(name, version string) (*staticVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := r.table[name]
	if len(vs) == 0 {
		return nil, status.Errorf(codes.NotFound, "unknown model '%s'", status.Clip(name, false))
	}
	if version == "" {
		for i := len(vs) - 1; i >= 0; i-- {
			if vs[i].state == "READY" {
				return vs[i], nil
			}
		}
		latest := vs[len(vs)-1]
		reason := ""
		if latest.reason != "" {
			reason = ": " + latest.reason
		}
		return nil, status.Errorf(codes.Unavailable, "model '%s' has no ready version (version %s is %s%s)", name, latest.version, latest.state, reason)
	}
	for _, v := range vs {
		if v.version == version {
			if v.state != "READY" {
				return nil, status.Errorf(codes.Unavailable, "model '%s' version %s is %s: %s", name, version, v.state, v.reason)
			}
			return v, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "model '%s' has no version '%s'", name, status.Clip(version, false))
}

func (r *staticRepo) Get(name, version string) (*dispatch.Model, error) {
	v, err := r.find(name, version)
	if err != nil {
		return nil, err
	}
	if !v.model.Acquire() {
		return nil, status.Errorf(codes.Unavailable, "model '%s' version %s is unloading", name, v.version)
	}
	return v.model, nil
}

func (r *staticRepo) Ready(name, version string) (bool, error) {
	_, err := r.find(name, version)
	if status.Code(err) == codes.Unavailable {
		return false, nil
	}
	return err == nil, err
}

func (r *staticRepo) Serving(name string) ([]*dispatch.Model, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*dispatch.Model
	names := make([]string, 0, len(r.table))
	for n := range r.table {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if name != "" && n != name {
			continue
		}
		for _, v := range r.table[n] {
			if v.state == "READY" {
				out = append(out, v.model)
			}
		}
	}
	return out, nil
}

func (r *staticRepo) Index(readyOnly bool) []server.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []server.Entry
	for n, vs := range r.table {
		for _, v := range vs {
			if !readyOnly || v.state == "READY" {
				out = append(out, server.Entry{Name: n, Version: v.version, State: v.state, Reason: v.reason})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r *staticRepo) Load(context.Context, string) error {
	return status.Errorf(codes.Unavailable, "explicit model load / unload is not allowed if polling is enabled")
}

func (r *staticRepo) Unload(context.Context, string) error {
	return fmt.Errorf("unload is not supported yet")
}

func (r *staticRepo) Metrics() []telemetry.Model {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []telemetry.Model
	for _, vs := range r.table {
		for _, v := range vs {
			tm := telemetry.Model{Name: v.name, Version: v.version, Ready: v.state == "READY"}
			if v.model != nil {
				tm.Stats, tm.LoadSeconds = v.model.Stats, v.model.LoadSeconds()
			}
			out = append(out, tm)
		}
	}
	return out
}
