package main

// The native engine in the front (issue 26, docs/native-engine.md): models the front executes
// itself through the PJRT C API (package engine), with no Python worker on their request path.
//
// Which models: the workers keep loading every model of the repository (they answer metadata,
// config, readiness and repository control, and execute whatever the front does not). After
// a worker becomes ready, and after every repository load/unload, the front syncs: it asks one
// worker for the READY model versions (RepositoryIndex) and each one's ModelConfig, whose
// `artifact` parameter names the local artifact directory the worker loaded (bridge/servicer.py;
// absent for a repository read over HTTP). A version the workers run with the default engine
// (`exported`) is opened with engine.Open; what the engine refuses (engine.Eligible, the
// plugin's StableHLO window, a tampered weight, ...) or what the front cannot serve yet
// (nativeSupport) stays on the workers. One log line per model version says which engine
// serves it and why. The front reports ready (health, ServerReady) only after its first sync,
// so a ready server executes its native models natively from the first request.
//
// Files: native.go (the table and its sync), native_infer.go (the request path),
// native_stats.go (statistics and metrics of natively executed requests).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jaxport/jaxport/bridge/front/engine"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// nativeEngineName is the engine ModelConfig and the load log report for native models.
const nativeEngineName = "native"

// natives is the front's table of natively served model versions.
type natives struct {
	f      *front
	plugin *engine.Plugin // nil: no native engine (none chosen, no plugin, CGO_ENABLED=0 build)

	syncMu sync.Mutex // one sync at a time
	synced atomic.Bool

	mu     sync.RWMutex
	byName map[string]*nativeName
	// refused remembers versions left to the workers (by artifactIdentity), so a sync does not
	// try to open them again: model/version -> identity.
	refused map[string]string

	admission *admission // execution slots of unbatched native models (admission.go)
	rpcMu     sync.Mutex
	rpcs      map[[2]string]uint64 // (method, code name) -> native RPCs finished
}

// nativeName is what the front knows of one model name.
type nativeName struct {
	latest   string                  // the highest READY version (what "" means), native or not
	versions map[string]*nativeModel // the natively served versions
}

// newNatives loads the plugin `choice` ("" = none). A failure is one log line, and every model
// is served by the workers.
func newNatives(f *front, choice string) *natives {
	n := &natives{f: f, byName: map[string]*nativeName{}, refused: map[string]string{},
		admission: newAdmission(f.maxInflight, f.maxQueue), rpcs: map[[2]string]uint64{}}
	switch {
	case choice == "":
		slog.Info("native engine off (--pjrt-plugin none): every model is served by the workers")
	case !engine.Available:
		slog.Warn("native engine unavailable in this build (CGO_ENABLED=0): every model is served by the workers")
	default:
		p, err := engine.LoadPlugin(choice)
		if err != nil {
			slog.Warn("native engine off: every model is served by the workers", "reason", err.Error())
		} else {
			n.plugin = p
			slog.Info("native engine on", "plugin", p.String())
		}
	}
	if n.plugin == nil {
		n.synced.Store(true)
	}
	return n
}

// ready: the first sync has finished (always true without a plugin).
func (n *natives) ready() bool { return n.synced.Load() }

// lookup returns the natively served model a request names (version "" = the highest ready
// one), or nil when the workers serve it; n.mu held.
func (n *natives) lookup(name, version string) *nativeModel {
	e := n.byName[name]
	if e == nil {
		return nil
	}
	if version == "" {
		version = e.latest
	}
	return e.versions[version]
}

// isNative says whether model name/version (version as given in a request) runs natively.
func (n *natives) isNative(name, version string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.lookup(name, version) != nil
}

// sync brings the table in line with what the workers serve now (see the file comment).
// Errors asking the workers leave the table as it was (the next sync retries).
func (n *natives) sync(ctx context.Context) {
	if n.plugin == nil {
		return
	}
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	index, err := n.index(ctx)
	if err != nil {
		slog.Warn("native engine: cannot list the workers' models; unchanged", "error", err.Error())
		return
	}
	next := map[string]*nativeName{}
	keep := map[*nativeModel]bool{}
	for _, m := range index.GetModels() {
		name, version := m.GetName(), m.GetVersion()
		e := next[name]
		if e == nil {
			e = &nativeName{versions: map[string]*nativeModel{}}
			next[name] = e
		}
		if versionAbove(version, e.latest) {
			e.latest = version
		}
		if model := n.open(ctx, name, version); model != nil {
			e.versions[version] = model
			keep[model] = true
		}
	}
	n.mu.Lock()
	old := n.byName
	n.byName = next
	n.mu.Unlock()
	for _, e := range old {
		for _, model := range e.versions {
			if !keep[model] {
				slog.Info("model version no longer served natively", "model", model.name, "version", model.version)
				go model.close() // after its requests in flight
			}
		}
	}
	n.synced.Store(true)
}

// versionAbove: numeric version a > b ("" is below everything).
func versionAbove(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil {
		return false
	}
	return errB != nil || x > y
}

// index asks one worker for the READY model versions.
func (n *natives) index(ctx context.Context) (*inferencepb.RepositoryIndexResponse, error) {
	out := &inferencepb.RepositoryIndexResponse{}
	return out, n.f.askWorker(ctx, repositoryIndexMethod, &inferencepb.RepositoryIndexRequest{Ready: true}, out)
}

var repositoryIndexMethod = methodIndex("RepositoryIndex")

// open returns the native model for name/version: the one already open when its artifact is
// the same (artifactIdentity), else a newly opened one; nil when the workers keep it (logged
// once per artifact).
func (n *natives) open(ctx context.Context, name, version string) *nativeModel {
	key := name + "/" + version
	cfg := &inferencepb.ModelConfigResponse{}
	if err := n.f.askWorker(ctx, modelConfigMethod, &inferencepb.ModelConfigRequest{Name: name, Version: version}, cfg); err != nil {
		slog.Warn("native engine: no ModelConfig; served by the workers", "model", name, "version", version, "error", err.Error())
		return nil
	}
	params := cfg.GetConfig().GetParameters()
	dir := params["artifact"].GetStringValue()
	identity := artifactIdentity(dir)
	workerEngine := params["engine"].GetStringValue()
	n.mu.RLock()
	if e := n.byName[name]; e != nil {
		if m := e.versions[version]; m != nil && m.identity == identity {
			n.mu.RUnlock()
			return m
		}
	}
	refusedAs, refused := n.refused[key]
	n.mu.RUnlock()
	if refused && refusedAs == identity {
		return nil
	}
	why := ""
	var model *nativeModel
	switch {
	case dir == "":
		why = "its repository is not a local directory (the front opens local artifacts only)"
	case workerEngine != "exported":
		why = fmt.Sprintf("jaxport serve --engine %s was asked for", workerEngine)
	default:
		var err error
		model, err = openNative(n.plugin, dir, name, version, cfg.GetConfig(), n.f)
		if err != nil {
			why = err.Error()
		}
	}
	if model != nil {
		model.identity = identity
	}
	if model == nil {
		n.mu.Lock()
		n.refused[key] = identity
		n.mu.Unlock()
		slog.Info("model served", "model", name, "version", version, "engine", "workers ("+workerEngine+")", "reason", why)
		return nil
	}
	slog.Info("model served", "model", name, "version", version, "engine", nativeEngineName,
		"plugin", n.plugin.Path, "programs", len(model.m.Programs), "batching", model.batcher != nil)
	return model
}

// countRPC counts one finished native RPC (jaxport_grpc_requests_total, as a worker would).
func (n *natives) countRPC(method string, c codes.Code) {
	n.rpcMu.Lock()
	n.rpcs[[2]string{method, codeName(c)}]++
	n.rpcMu.Unlock()
}

func logNativeError(model *nativeModel, err error) {
	slog.Error("native execution failed", "model", model.name, "version", model.version, "error", err.Error())
}

// models lists the natively served versions (for statistics and metrics).
func (n *natives) models() []*nativeModel {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []*nativeModel
	for _, e := range n.byName {
		for _, m := range e.versions {
			out = append(out, m)
		}
	}
	return out
}

// statisticsBody is the front's ModelStatisticsResponse for the natively served versions the
// request selects (name "" = all; version "" = every version of name), merged with the
// workers' answers (stats.go).
func (n *natives) statisticsBody(request []byte) []byte {
	req := &inferencepb.ModelStatisticsRequest{}
	if proto.Unmarshal(request, req) != nil {
		return nil
	}
	out := &inferencepb.ModelStatisticsResponse{}
	for _, m := range n.models() {
		if (req.GetName() == "" || req.GetName() == m.name) && (req.GetVersion() == "" || req.GetVersion() == m.version) {
			out.ModelStats = append(out.ModelStats, m.stats.statistics(m.name, m.version))
		}
	}
	body, _ := proto.Marshal(out)
	return body
}

// metricsText: the front's samples of the bridge's families for native models.
func (n *natives) metricsText() string {
	if n == nil || n.plugin == nil {
		return ""
	}
	stats := map[[2]string]*nativeStats{}
	for _, m := range n.models() {
		stats[[2]string{m.name, m.version}] = m.stats
	}
	n.rpcMu.Lock()
	rpcs := maps.Clone(n.rpcs)
	n.rpcMu.Unlock()
	admitted := map[[2]string]uint64{}
	for k, v := range n.admission.totals() {
		admitted[[2]string{k.model, k.outcome}] = v
	}
	return metricsText(stats, admitted, rpcs)
}

// rewriteConfig edits a worker's ModelConfig answer: the artifact directory is the front's
// business (removed), and a native model reports engine "native" (backend jaxport-native).
func (n *natives) rewriteConfig(request, body []byte) []byte {
	cfg := &inferencepb.ModelConfigResponse{}
	if proto.Unmarshal(body, cfg) != nil || cfg.GetConfig() == nil {
		return body
	}
	params := cfg.GetConfig().GetParameters()
	if _, ok := params["artifact"]; !ok {
		return body
	}
	delete(params, "artifact")
	req := &inferencepb.ModelConfigRequest{}
	if proto.Unmarshal(request, req) == nil && n.isNative(req.GetName(), req.GetVersion()) {
		params["engine"] = &inferencepb.ModelParameter{StringValue: nativeEngineName}
		cfg.Config.Backend = "jaxport-" + nativeEngineName
	}
	out, err := proto.Marshal(cfg)
	if err != nil {
		return body
	}
	return out
}

// artifactIdentity is what makes an opened artifact the one the workers serve now: its
// directory and its manifest's sha256 (the manifest pins every file's sha256, so an artifact
// replaced in place and reloaded is opened again).
func artifactIdentity(dir string) string {
	if dir == "" {
		return ""
	}
	raw, err := os.ReadFile(filepath.Join(dir, engine.ManifestFile))
	if err != nil {
		return dir
	}
	sum := sha256.Sum256(raw)
	return dir + "\x00" + hex.EncodeToString(sum[:])
}
