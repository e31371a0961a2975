// Package repository is the front's model table: the versions of a repository
// (ROOT/<model>/<version>/ of exporter artifacts, wherever artifact.Locate finds it), their
// states and reasons, and how they get loaded and unloaded (bridge/repository.py's rules, in
// Go, for every engine).
//
// Versions are positive integers. What gets loaded, and when, is the model control mode
// (Triton's names): "none" (the default) loads every model at start (its latest version, or
// all with the "all" version policy) and refuses load/unload requests; "explicit" loads the
// --load-model models at start ("*" = all) and takes load/unload requests; "poll" loads
// everything at start, then rescans the repository every PollEvery: it loads new versions,
// reloads versions whose manifest changed, unloads removed ones, and refuses load/unload
// requests. A version that fails to load (tampered checksum, missing file, bad manifest...) is
// recorded with its reason (log, RepositoryIndex `reason`, ModelReady false) and every other
// model keeps serving; a reload that fails leaves the version that was serving in place.
//
// Names come from callers, so they are checked (CheckName, VersionNumber: the ONE validation
// of a model reference) before they touch the file system, and nothing (symlinks) may resolve
// outside the repository. Reasons callers see name files relative to the repository
// (mlp/1/weights/params.w1/c/0/0), not the server's file system; the log keeps full paths.
//
// A single-model root (SingleModel, KServe's /mnt/models) is ONE model served under that
// name: a version directory (manifest.json at the root, served as version 1) or a model
// directory (version subdirectories; by URL, listed by its index.json). A repository by URL
// is listed by its index.json, read again whenever the repository is listed.
//
// The repository reads each version's manifest (artifact.Open: schema, structure, paths) and
// hands it to the Loader the front supplies, which opens it on an engine; the Served it
// returns is closed when the version is replaced or unloaded.
package repository

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// States of a version (RepositoryIndex `state`).
const (
	Ready       = "READY"
	Loading     = "LOADING"
	Unavailable = "UNAVAILABLE"
)

// Version policies and model control modes.
var (
	Policies = []string{"latest", "all"}
	Modes    = []string{"none", "explicit", "poll"}
)

// DefaultPollEvery is Triton's --repository-poll-secs default.
const DefaultPollEvery = 15 * time.Second

// MaxKnownNamed is how many known models a NOT_FOUND for an unknown one names.
const MaxKnownNamed = 10

const knownNameChars = 40

// ControlRefused is Triton's answer to a load or unload request when the control mode is not
// explicit (model_repository_manager.cc: UNAVAILABLE, these words, in mode none and poll).
const ControlRefused = "explicit model load / unload is not allowed if polling is enabled"

// Version is one model version as the loader gets it.
type Version struct {
	Model  string
	Number uint64
	// Rel is the version's directory relative to the repository ("mlp/1"; "" for a
	// single-model root that is itself the artifact).
	Rel string
	// Artifact: the version's store (Store.Local() is its directory, "" by URL) and its
	// manifest, read and checked (schema, structure, every path inside the version).
	Artifact *artifact.Artifact
	// Location is the directory or URL the Python workers open (Store.Display("")).
	Location string
}

// String is the version number as the protocol writes it.
func (v *Version) String() string { return strconv.FormatUint(v.Number, 10) }

// Served is a loaded version. Close is called once it is replaced or unloaded, and must not
// wait for the work in flight: the unload (or reload) answers at once, the version takes no
// new request from then on, and it lets go of its resources once its last request is done.
// When S also has `Acquire() bool`, Get calls it under the table's lock, so a version Get
// returns is never let go of before the caller releases it.
type Served interface{ Close() }

type acquirer interface{ Acquire() bool }

// Loader opens a version on an engine; its error is the version's reason (its status message
// when it has one, LoadReason's words for an *artifact.Error).
type Loader[S Served] interface {
	Load(ctx context.Context, v *Version) (S, error)
}

// LoaderFunc is a function as a Loader.
type LoaderFunc[S Served] func(ctx context.Context, v *Version) (S, error)

// Load calls f.
func (f LoaderFunc[S]) Load(ctx context.Context, v *Version) (S, error) { return f(ctx, v) }

// Status is one version as RepositoryIndex reports it (Version 0: a model with no version
// directories, listed so the operator sees why it is not served).
type Status struct {
	Name    string
	Version uint64
	State   string
	Reason  string
}

// VersionString is the version as RepositoryIndex writes it ("" for 0).
func (s Status) VersionString() string {
	if s.Version == 0 {
		return ""
	}
	return strconv.FormatUint(s.Version, 10)
}

// Options configure a Repository.
type Options struct {
	Policy     string   // "latest" (default) or "all"
	Mode       string   // "none" (default), "explicit" or "poll"
	LoadModels []string // explicit: the models loaded at start ("*" = all)
	PollEvery  time.Duration
	// SingleModel serves the root as that one model (--model-name).
	SingleModel string
	Log         *slog.Logger
	// Store configures how the root is read (artifact.Locate's options).
	Store []artifact.Option
	// OnChange is told every state change (metrics; tests waiting for a rescan). It must not
	// block nor call back into the repository.
	OnChange func(Status)
}

type entry[S Served] struct {
	st     Status
	served S
	has    bool   // served is set (READY, or a failed reload still serving)
	digest string // sha256 of the manifest.json that was loaded (or tried)
	stamp  string // locally: the version's files (names, sizes, times) when it was tried
}

// Repository is the thread-safe table of model versions, fed from the repository.
type Repository[S Served] struct {
	o      Options
	root   string
	layout layout
	loader Loader[S]
	log    *slog.Logger
	strip  *rootText

	mu    sync.RWMutex
	table map[string]map[uint64]*entry[S]

	namesMu sync.Mutex
	names   map[string]*sync.Mutex

	pollMu   sync.Mutex // one rescan at a time
	stopPoll context.CancelFunc
	polling  sync.WaitGroup
}

// New is the repository at root (a local directory, a file://, http(s):// or s3:// URL) whose
// versions loader opens. Nothing is loaded until Start.
func New[S Served](root string, loader Loader[S], o Options) (*Repository[S], error) {
	if o.Policy == "" {
		o.Policy = "latest"
	}
	if o.Mode == "" {
		o.Mode = "none"
	}
	if !slices.Contains(Policies, o.Policy) {
		return nil, fmt.Errorf("version policy must be one of %s, got %s", strings.Join(Policies, ", "), status.PyRepr(o.Policy))
	}
	if !slices.Contains(Modes, o.Mode) {
		return nil, fmt.Errorf("model control mode must be one of %s, got %s", strings.Join(Modes, ", "), status.PyRepr(o.Mode))
	}
	if o.SingleModel != "" && !ValidName(o.SingleModel) {
		return nil, fmt.Errorf("model name %s is not valid (%s)", status.PyRepr(o.SingleModel), NameRule)
	}
	if o.PollEvery <= 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	l, err := newLayout(root, o.SingleModel, o.Log, o.Store)
	if err != nil {
		return nil, err
	}
	r := &Repository[S]{o: o, root: root, layout: l, loader: loader, log: o.Log,
		table: map[string]map[uint64]*entry[S]{}, names: map[string]*sync.Mutex{}}
	r.strip = newRootText(rootOf(l))
	return r, nil
}

func rootOf(l layout) artifact.Store {
	switch l := l.(type) {
	case *dirLayout:
		return l.root
	case *indexLayout:
		return l.root
	case *singleLayout:
		return l.root
	}
	return nil
}

// Root is where the repository is (a directory or a URL) as messages name it.
func (r *Repository[S]) Root() string { return rootOf(r.layout).Display("") }

// Start loads what the control mode loads at start and returns once every version is in its
// final state (the server is ready then); in poll mode it then rescans every PollEvery until
// Close. Failures are recorded and logged ("model not loaded"), not returned.
func (r *Repository[S]) Start(ctx context.Context) {
	if r.o.Mode == "explicit" && !slices.Contains(r.o.LoadModels, "*") {
		for _, name := range r.o.LoadModels {
			if err := r.load(ctx, name); err != nil {
				r.log.Warn("model not loaded", "model", name, "reason", message(err))
			}
		}
	} else if r.o.Mode != "explicit" || len(r.o.LoadModels) > 0 {
		r.loadAll(ctx)
	}
	if r.o.Mode == "poll" {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r.stopPoll = cancel
		r.polling.Go(func() {
			t := time.NewTicker(r.o.PollEvery)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					r.Rescan(pctx)
				}
			}
		})
	}
}

// Close stops polling and closes every served version.
func (r *Repository[S]) Close() {
	if r.stopPoll != nil {
		r.stopPoll()
		r.polling.Wait()
	}
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	r.mu.Lock()
	var closing []S
	for _, versions := range r.table {
		for _, e := range versions {
			if e.has {
				closing = append(closing, e.served)
				e.has = false
			}
		}
	}
	r.mu.Unlock()
	for _, s := range closing {
		s.Close()
	}
}

// loadAll loads every model found per the version policy; failures are recorded and logged.
func (r *Repository[S]) loadAll(ctx context.Context) {
	found := r.layout.models(ctx)
	for _, name := range sortedKeys(found) {
		if err := r.load(ctx, name); err != nil {
			r.log.Warn("model not loaded", "model", name, "reason", message(err))
		}
	}
}

// Load (re)loads name per the version policy (RepositoryModelLoad): refused unless the control
// mode is explicit; NOT_FOUND for an unknown model; FAILED_PRECONDITION naming each selected
// version that failed and why (the others still load).
func (r *Repository[S]) Load(ctx context.Context, name string) error {
	if r.o.Mode != "explicit" {
		return status.New(codes.Unavailable, ControlRefused)
	}
	return r.load(ctx, name)
}

// Unload stops serving every version of name (RepositoryModelUnload): refused unless the
// control mode is explicit; the requests in flight finish on their version.
func (r *Repository[S]) Unload(ctx context.Context, name string) error {
	if r.o.Mode != "explicit" {
		return status.New(codes.Unavailable, ControlRefused)
	}
	return r.unload(name)
}

func (r *Repository[S]) nameLock(name string) *sync.Mutex {
	r.namesMu.Lock()
	defer r.namesMu.Unlock()
	l, ok := r.names[name]
	if !ok {
		l = &sync.Mutex{}
		r.names[name] = l
	}
	return l
}

// modelVersions is name's versions found now; NOT_FOUND when it is no model of the repository.
func (r *Repository[S]) modelVersions(ctx context.Context, name string) ([]uint64, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	found := r.layout.models(ctx)
	versions, ok := found[name]
	if !ok {
		where := ""
		if r.o.SingleModel == "" {
			where = ": no directory " + status.Clip(name, false) + "/ in the repository"
		}
		r.mu.RLock()
		names := map[string]bool{}
		for n := range r.table {
			names[n] = true
		}
		r.mu.RUnlock()
		for n := range found {
			names[n] = true
		}
		return nil, status.New(codes.NotFound, "unknown model '"+status.Clip(name, false)+"'"+where+" ("+known(sortedSet(names))+")")
	}
	return versions, nil
}

func (r *Repository[S]) load(ctx context.Context, name string) error {
	if _, err := r.modelVersions(ctx, name); err != nil { // NOT_FOUND before a per-name lock exists
		return err
	}
	lock := r.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	onDisk, err := r.modelVersions(ctx, name)
	if err != nil {
		return err
	}
	if len(onDisk) == 0 {
		return loadError(fmt.Sprintf("model '%s' has no version directories (e.g. %s/1/)", name, name))
	}
	wanted := r.wanted(onDisk)
	var failures []string
	for _, v := range wanted {
		st := r.loadVersion(ctx, name, v, "", "")
		if st.State != Ready || st.Reason != "" {
			failures = append(failures, fmt.Sprintf("version %d: %s", v, st.Reason))
		}
	}
	r.unloadStale(name, wanted, "unloaded: not selected by the '"+r.o.Policy+"' version policy")
	if len(failures) > 0 {
		return loadError(fmt.Sprintf("model '%s' failed to load: %s", name, strings.Join(failures, "; ")))
	}
	return nil
}

// wanted is what the version policy selects of versions (ascending).
func (r *Repository[S]) wanted(versions []uint64) []uint64 {
	if r.o.Policy == "all" || len(versions) == 0 {
		return versions
	}
	return versions[len(versions)-1:]
}

// unloadStale marks every version of name that is not in keep UNAVAILABLE with reason and
// closes what served them.
func (r *Repository[S]) unloadStale(name string, keep []uint64, reason string) {
	r.mu.Lock()
	var closing []S
	var changed []Status
	for v, e := range r.table[name] {
		if slices.Contains(keep, v) || (e.st.State == Unavailable && !e.has && e.st.Reason == reason) {
			continue
		}
		if e.has {
			closing = append(closing, e.served)
		}
		*e = entry[S]{st: Status{Name: name, Version: v, State: Unavailable, Reason: reason}}
		changed = append(changed, e.st)
	}
	r.mu.Unlock()
	r.notify(changed...)
	for _, s := range closing {
		s.Close()
	}
}

// loadVersion (re)loads one version and records its state. digest and stamp, when known, are
// the manifest's sha256 and the files' stamp the caller saw (poll); the version's own read of
// the manifest is what gets recorded.
func (r *Repository[S]) loadVersion(ctx context.Context, name string, version uint64, digest, stamp string) Status {
	r.mu.Lock()
	prev := r.table[name][version]
	serving := prev != nil && prev.st.State == Ready && prev.has
	if !serving {
		r.setLocked(name, version, &entry[S]{st: Status{Name: name, Version: version, State: Loading}, digest: digest, stamp: stamp})
	}
	r.mu.Unlock()
	if !serving {
		r.notify(Status{Name: name, Version: version, State: Loading})
	}
	store, storeErr := r.layout.store(name, version)
	var outside *outsideError
	if errors.As(storeErr, &outside) {
		r.log.Warn("path outside the repository", "path", outside.path, "target", outside.target)
	}
	if storeErr != nil && digest == "" {
		digest = "refused: " + storeErr.Error() // what Rescan compares: tried again once it changes
	}
	if stamp == "" && storeErr == nil {
		stamp = filesStamp(store) // before reading: a change while loading is a change
	}
	rel := r.layout.rel(name, version)
	root := rootOf(r.layout)
	path := root.Display(rel)
	r.log.Info("loading model", "model", name, "version", version, "path", path)
	served, got, err := r.open(ctx, store, storeErr, name, version, rel)
	if got != "" {
		digest = got
	}
	if err == nil {
		r.mu.Lock()
		var old S
		hadOld := false
		if e := r.table[name][version]; e != nil && e.has {
			old, hadOld = e.served, true
		}
		st := Status{Name: name, Version: version, State: Ready}
		r.setLocked(name, version, &entry[S]{st: st, served: served, has: true, digest: digest, stamp: stamp})
		r.mu.Unlock()
		r.notify(st)
		if hadOld {
			old.Close()
		}
		return st
	}
	reason := message(err)
	r.log.Warn("model failed to load", "model", name, "version", version, "path", path, "reason", reason)
	reason = r.strip.public(reason)
	r.mu.Lock()
	var st Status
	if e := r.table[name][version]; serving && e != nil && e.has {
		st = Status{Name: name, Version: version, State: Ready, Reason: "reload failed, previous load still serving: " + reason}
		e.st, e.digest, e.stamp = st, digest, stamp
	} else {
		st = Status{Name: name, Version: version, State: Unavailable, Reason: reason}
		r.setLocked(name, version, &entry[S]{st: st, digest: digest, stamp: stamp})
	}
	r.mu.Unlock()
	r.notify(st)
	return st
}

// open reads the version's manifest and hands it to the loader; the manifest's sha256 comes
// back even when the load fails.
func (r *Repository[S]) open(ctx context.Context, store artifact.Store, storeErr error, name string, version uint64, rel string) (S, string, error) {
	var zero S
	if storeErr != nil {
		return zero, "", storeErr
	}
	a, err := artifact.Open(ctx, store)
	if err != nil {
		digest, _ := artifact.ManifestDigest(ctx, store)
		return zero, digest, loadError(artifact.LoadReason(err))
	}
	served, err := r.loader.Load(ctx, &Version{Model: name, Number: version, Rel: rel, Artifact: a, Location: store.Display("")})
	if err != nil {
		return zero, a.ManifestSHA256, err
	}
	return served, a.ManifestSHA256, nil
}

func (r *Repository[S]) setLocked(name string, version uint64, e *entry[S]) {
	versions, ok := r.table[name]
	if !ok {
		versions = map[uint64]*entry[S]{}
		r.table[name] = versions
	}
	versions[version] = e
}

func (r *Repository[S]) notify(changes ...Status) {
	if r.o.OnChange == nil {
		return
	}
	for _, st := range changes {
		r.o.OnChange(st)
	}
}

func (r *Repository[S]) unload(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	r.mu.RLock()
	_, known := r.table[name]
	r.mu.RUnlock()
	if !known && !r.layout.hasModel(name) {
		// Before taking a per-name lock: one is kept per name, so a caller unloading made-up
		// names must not grow that table.
		return r.unknownModel(name, ": nothing to unload")
	}
	lock := r.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	r.mu.Lock()
	versions := r.table[name]
	if len(versions) == 0 {
		r.mu.Unlock()
		if r.layout.hasModel(name) {
			return nil
		}
		return r.unknownModel(name, ": nothing to unload")
	}
	var closing []S
	var changed []Status
	for v, e := range versions {
		if e.has {
			closing = append(closing, e.served)
		}
		*e = entry[S]{st: Status{Name: name, Version: v, State: Unavailable, Reason: "unloaded"}}
		changed = append(changed, e.st)
	}
	r.mu.Unlock()
	r.notify(changed...)
	for _, s := range closing {
		s.Close()
	}
	r.log.Info("model unloaded", "model", name)
	return nil
}

// Rescan is one poll step: the repository listed again; new versions the policy selects are
// loaded, versions whose manifest.json changed are reloaded (a failed reload keeps the serving
// one), versions no longer selected are unloaded, removed versions and models leave the table.
// Poll mode calls it every PollEvery; it is exported for tests and tools.
func (r *Repository[S]) Rescan(ctx context.Context) {
	r.pollMu.Lock()
	defer r.pollMu.Unlock()
	found := r.layout.models(ctx)
	for _, name := range sortedKeys(found) {
		r.rescanModel(ctx, name, found[name])
	}
	r.mu.RLock()
	var gone []string
	for name := range r.table {
		if _, ok := found[name]; !ok {
			gone = append(gone, name)
		}
	}
	r.mu.RUnlock()
	for _, name := range gone {
		r.remove(name, nil)
		r.log.Info("model unloaded", "model", name, "reason", "removed from the repository")
	}
}

func (r *Repository[S]) rescanModel(ctx context.Context, name string, onDisk []uint64) {
	lock := r.nameLock(name)
	lock.Lock()
	defer lock.Unlock()
	wanted := r.wanted(onDisk)
	for _, v := range wanted {
		store, err := r.layout.store(name, v)
		digest, stamp := "", ""
		if err == nil {
			digest, err = artifact.ManifestDigest(ctx, store)
			stamp = filesStamp(store)
		} else {
			digest, err = "refused: "+err.Error(), nil // tried again once where it leads changes
		}
		r.mu.RLock()
		e := r.table[name][v]
		r.mu.RUnlock()
		switch {
		case e == nil || err != nil || e.st.State == Loading:
		case e.st.State == Unavailable && strings.HasPrefix(e.st.Reason, "unloaded"):
			// selected again (a newer version went away)
		case e.has:
			if e.digest == digest {
				continue // serving, manifest unchanged
			}
			r.log.Info("model changed in the repository; reloading", "model", name, "version", v)
		default:
			// Failed: tried again once its manifest or (locally) its files changed, so a
			// version copied in while polling loads once the copy is whole.
			if e.digest == digest && e.stamp == stamp {
				continue
			}
		}
		r.loadVersion(ctx, name, v, digest, stamp)
	}
	r.remove(name, onDisk) // versions whose directories are gone
	r.unloadStale(name, wanted, "unloaded: not selected by the '"+r.o.Policy+"' version policy")
}

// filesStamp is a local version directory's files as the file system describes them (relative
// path, size, modification time), hashed; "" by URL.
func filesStamp(s artifact.Store) string {
	dir := s.Local()
	if dir == "" {
		return ""
	}
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}

// remove takes every version of name not in keep (nil: all of them) out of the table and
// closes what served them; a model left with none leaves the table.
func (r *Repository[S]) remove(name string, keep []uint64) {
	r.mu.Lock()
	var closing []S
	for v, e := range r.table[name] {
		if keep != nil && slices.Contains(keep, v) {
			continue
		}
		if e.has {
			closing = append(closing, e.served)
		}
		delete(r.table[name], v)
	}
	if len(r.table[name]) == 0 {
		delete(r.table, name)
	}
	r.mu.Unlock()
	for _, s := range closing {
		s.Close()
	}
}

// Get is the READY version a request names ("" = the highest READY one), acquired when S can
// be (see Served). NOT_FOUND for an unknown model or version; UNAVAILABLE, with the reason, for
// a known one that is not ready (loading, failed, unloaded).
func (r *Repository[S]) Get(name, version string) (S, error) {
	var zero S
	if err := CheckName(name); err != nil {
		return zero, err
	}
	number, latest, err := VersionNumber(name, version)
	if err != nil {
		return zero, err
	}
	r.mu.RLock()
	versions := r.table[name]
	if latest {
		var best *entry[S]
		var bestV uint64
		for v, e := range versions {
			if e.st.State == Ready && e.has && (best == nil || v > bestV) {
				best, bestV = e, v
			}
		}
		if best != nil && acquire(best.served) {
			r.mu.RUnlock()
			return best.served, nil
		}
	} else if e := versions[number]; e != nil && e.st.State == Ready && e.has && acquire(e.served) {
		r.mu.RUnlock()
		return e.served, nil
	}
	statuses := make(map[uint64]Status, len(versions))
	for v, e := range versions {
		statuses[v] = e.st
	}
	r.mu.RUnlock()
	return zero, r.notServing(name, version, number, latest, statuses)
}

func acquire[S Served](s S) bool {
	if a, ok := any(s).(acquirer); ok {
		return a.Acquire()
	}
	return true
}

// notServing is Get's error for a reference no READY version answers.
func (r *Repository[S]) notServing(name, version string, number uint64, latest bool, table map[uint64]Status) error {
	if len(table) == 0 {
		if r.layout.hasModel(name) {
			return status.New(codes.Unavailable, "model '"+name+"' is not loaded; load it first")
		}
		return r.unknownModel(name, "")
	}
	versions := sortedVersions(table)
	if latest {
		last := table[versions[len(versions)-1]]
		detail := last.State
		if last.Reason != "" {
			detail += ": " + last.Reason
		}
		return status.New(codes.Unavailable, fmt.Sprintf("model '%s' has no ready version (version %d is %s)", name, last.Version, detail))
	}
	st, ok := table[number]
	if !ok {
		listed := make([]string, len(versions))
		for i, v := range versions {
			listed[i] = strconv.FormatUint(v, 10)
		}
		if r.layout.hasVersion(name, number) {
			return status.New(codes.Unavailable, fmt.Sprintf("model '%s' version %s is not loaded (version policy '%s'); loaded: %s",
				name, version, r.o.Policy, strings.Join(listed, ", ")))
		}
		return status.New(codes.NotFound, fmt.Sprintf("model '%s' has no version '%s' (known: %s)", name, version, strings.Join(listed, ", ")))
	}
	reason := ""
	if st.Reason != "" {
		reason = ": " + st.Reason
	}
	return status.New(codes.Unavailable, fmt.Sprintf("model '%s' version %s is %s%s", name, version, st.State, reason))
}

// Ready is ModelReady: false for a known model or version that cannot serve; Get's NOT_FOUND
// errors for an unknown one.
func (r *Repository[S]) Ready(name, version string) (bool, error) {
	s, err := r.Get(name, version)
	if err == nil {
		if d, ok := any(s).(interface{ Done() }); ok {
			d.Done()
		}
		return true, nil
	}
	if grpcstatus.Code(err) == codes.Unavailable {
		return false, nil
	}
	return false, err
}

// Serving is every READY version of name in ascending order ("" = of every model, by name),
// not acquired; Get's errors when name is unknown or has no READY version.
func (r *Repository[S]) Serving(name string) ([]S, error) {
	if name != "" {
		if err := CheckName(name); err != nil {
			return nil, err
		}
	}
	r.mu.RLock()
	var out []S
	names := []string{name}
	if name == "" {
		names = sortedKeys(r.table)
	}
	for _, n := range names {
		versions := r.table[n]
		for _, v := range sortedVersions(versions) {
			if e := versions[v]; e.st.State == Ready && e.has {
				out = append(out, e.served)
			}
		}
	}
	r.mu.RUnlock()
	if name != "" && len(out) == 0 {
		_, err := r.Get(name, "")
		return nil, err
	}
	return out, nil
}

// Status is the recorded state of one version (false: none recorded).
func (r *Repository[S]) Status(name string, version uint64) (Status, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.table[name][version]
	if e == nil {
		return Status{}, false
	}
	return e.st, true
}

// Index is every model version in the repository or the table, with its state and reason,
// by name and version (readyOnly: the READY ones).
func (r *Repository[S]) Index(ctx context.Context, readyOnly bool) []Status {
	disk := r.layout.models(ctx)
	r.mu.RLock()
	table := map[string]map[uint64]Status{}
	for n, versions := range r.table {
		table[n] = map[uint64]Status{}
		for v, e := range versions {
			table[n][v] = e.st
		}
	}
	r.mu.RUnlock()
	names := map[string]bool{}
	for n := range disk {
		names[n] = true
	}
	for n := range table {
		names[n] = true
	}
	var out []Status
	for _, name := range sortedSet(names) {
		known := table[name]
		if len(known) == 0 && len(disk[name]) == 0 {
			if !readyOnly {
				out = append(out, Status{Name: name, State: Unavailable,
					Reason: "no version directories (expected " + name + "/1/ ...)"})
			}
			continue
		}
		versions := map[uint64]bool{}
		for _, v := range disk[name] {
			versions[v] = true
		}
		for v := range known {
			versions[v] = true
		}
		for _, v := range sortedVersions(versions) {
			st, ok := known[v]
			if !ok {
				st = Status{Name: name, Version: v, State: Unavailable, Reason: "not loaded"}
			}
			if !readyOnly || st.State == Ready {
				out = append(out, st)
			}
		}
	}
	return out
}

func (r *Repository[S]) unknownModel(name, detail string) error {
	r.mu.RLock()
	names := sortedKeys(r.table)
	r.mu.RUnlock()
	return status.New(codes.NotFound, "unknown model '"+status.Clip(name, false)+"'"+detail+" ("+known(names)+")")
}

// known is "known models: a, b, ..." (at most MaxKnownNamed, each cut) for a NOT_FOUND.
func known(names []string) string {
	if len(names) == 0 {
		return "no models in the repository"
	}
	shown := make([]string, 0, MaxKnownNamed)
	for i, n := range names {
		if i == MaxKnownNamed {
			break
		}
		shown = append(shown, status.ClipN(n, knownNameChars))
	}
	out := "known models: " + strings.Join(shown, ", ")
	if more := len(names) - MaxKnownNamed; more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	return out
}

// loadError is a FAILED_PRECONDITION load failure (bridge/loading.py LoadError).
func loadError(msg string) error { return status.New(codes.FailedPrecondition, msg) }

// message is an error's text as a reason: its status message, LoadReason's words for an
// artifact error, else its text.
func message(err error) string {
	var ae *artifact.Error
	if errors.As(err, &ae) {
		return artifact.LoadReason(err)
	}
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedSet(m map[string]bool) []string { return sortedKeys(m) }

func sortedVersions[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
