package repository

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// layout is where the models of a repository are: discovery and the artifact of each version.
type layout interface {
	// models is every model and its versions (ascending), as found now (a fresh listing).
	models(ctx context.Context) map[string][]uint64
	// hasModel: name (already checked by CheckName) is a model of the repository.
	hasModel(name string) bool
	hasVersion(name string, version uint64) bool
	// rel is the version's directory relative to the root, as messages name it.
	rel(name string, version uint64) string
	// store is what the loader opens: the version directory, path rule applied.
	store(name string, version uint64) (artifact.Store, error)
}

// base holds what every layout shares: the root store and the log.
type base struct {
	root artifact.Store
	log  *slog.Logger
}

func (b *base) rel(name string, version uint64) string {
	return name + "/" + strconv.FormatUint(version, 10)
}

// versionStore is the store of directory rel below the root: locally refused (an
// *outsideError, which the loader logs with where it leads) when it resolves outside the
// repository.
func (b *base) versionStore(rel string) (artifact.Store, error) {
	if rel == "" {
		return b.root, nil
	}
	if dir := b.root.Local(); dir != "" {
		if _, err := artifact.ResolveInside(dir, rel, "'"+rel+"'"); err != nil {
			path := filepath.Join(dir, filepath.FromSlash(rel))
			target, _ := filepath.EvalSymlinks(path)
			return nil, &outsideError{rel: rel, path: path, target: target}
		}
	}
	return b.root.Child(rel)
}

// outsideError is a version directory that resolves outside the repository: a load failure
// (FAILED_PRECONDITION) naming it relative to the repository.
type outsideError struct{ rel, path, target string }

func (e *outsideError) Error() string {
	return "'" + e.rel + "' resolves outside the repository; refused"
}

// GRPCStatus makes it a FAILED_PRECONDITION load failure.
func (e *outsideError) GRPCStatus() *grpcstatus.Status {
	return grpcstatus.New(codes.FailedPrecondition, e.Error())
}

// localVersions is the version directories of a local model directory, ascending.
func localVersions(dir string) []uint64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []uint64{}
	}
	out := []uint64{}
	for _, e := range entries {
		if v, ok := versionDir(e.Name()); ok && isDir(filepath.Join(dir, e.Name())) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// isDir follows symlinks (Python's Path.is_dir).
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// dirLayout is ROOT/<model>/<version>/ on the local file system.
type dirLayout struct{ base }

func (l *dirLayout) models(context.Context) map[string][]uint64 {
	dir := l.root.Local()
	out := map[string][]uint64{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if e.Name()[0] == '.' || !isDir(filepath.Join(dir, e.Name())) {
			continue
		}
		out[e.Name()] = localVersions(filepath.Join(dir, e.Name()))
	}
	return out
}

func (l *dirLayout) hasModel(name string) bool { return isDir(filepath.Join(l.root.Local(), name)) }

func (l *dirLayout) hasVersion(name string, version uint64) bool {
	return isDir(filepath.Join(l.root.Local(), name, strconv.FormatUint(version, 10)))
}

func (l *dirLayout) store(name string, version uint64) (artifact.Store, error) {
	return l.versionStore(l.rel(name, version))
}

// maxVersion: versions at or above 10**19 are no version directory name (MaxVersionDigits).
const maxVersion = uint64(9999999999999999999)

// indexLayout is ROOT/<model>/<version>/ by URL, listed by ROOT/index.json. The last listing
// is kept for the per-request questions (hasModel), so an unknown name costs no request.
type indexLayout struct {
	base
	mu     sync.Mutex
	listed map[string][]uint64
}

func (l *indexLayout) models(ctx context.Context) map[string][]uint64 {
	idx, err := artifact.ReadIndex(ctx, l.root)
	if err != nil {
		l.log.Error("repository index unreadable", "reason", err.Error())
	} else if idx == nil {
		l.log.Error("repository has no index.json", "repository", l.root.Display(""),
			"fix", "python -m jaxport.artifact.index REPO, then publish REPO again")
	}
	listed := map[string][]uint64{}
	if idx != nil && idx.Models != nil {
		for name, versions := range idx.Models {
			if !ValidName(name) {
				l.log.Warn("index.json lists an invalid model name; ignored", "model", status.Clip(name, false), "rule", NameRule)
				continue
			}
			kept := []uint64{}
			for _, v := range versions {
				if v <= maxVersion {
					kept = append(kept, v)
				}
			}
			listed[name] = kept
		}
	}
	l.mu.Lock()
	l.listed = listed
	l.mu.Unlock()
	return copyListing(listed)
}

func copyListing(m map[string][]uint64) map[string][]uint64 {
	out := make(map[string][]uint64, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

func (l *indexLayout) hasModel(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.listed[name]
	return ok
}

func (l *indexLayout) hasVersion(name string, version uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.listed[name], version)
}

func (l *indexLayout) store(name string, version uint64) (artifact.Store, error) {
	return l.versionStore(l.rel(name, version))
}

// singleLayout is a root that is one model, served as name: a version directory (manifest.json
// at the root: version 1) or a model directory (version subdirectories; by URL, its index.json).
type singleLayout struct {
	base
	name        string
	mu          sync.Mutex
	versions    []uint64
	versionRoot bool
}

// find is (is the root itself a version, its versions).
func (l *singleLayout) find(ctx context.Context) (bool, []uint64) {
	if dir := l.root.Local(); dir != "" {
		if isFile(filepath.Join(dir, artifact.ManifestFile)) {
			return true, []uint64{1}
		}
		return false, localVersions(dir)
	}
	rc, _, err := l.root.Open(ctx, artifact.ManifestFile)
	if err == nil {
		rc.Close()
		return true, []uint64{1}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		l.log.Error("model root unreadable", "reason", err.Error())
		return false, []uint64{}
	}
	idx, err := artifact.ReadIndex(ctx, l.root)
	if err != nil {
		l.log.Error("model root unreadable", "reason", err.Error())
		return false, []uint64{}
	}
	if idx == nil || idx.Versions == nil {
		return false, []uint64{}
	}
	kept := []uint64{}
	for _, v := range idx.Versions {
		if v <= maxVersion {
			kept = append(kept, v)
		}
	}
	return false, kept
}

func (l *singleLayout) models(ctx context.Context) map[string][]uint64 {
	versionRoot, versions := l.find(ctx)
	l.mu.Lock()
	l.versionRoot, l.versions = versionRoot, versions
	l.mu.Unlock()
	return map[string][]uint64{l.name: slices.Clone(versions)}
}

func (l *singleLayout) hasModel(name string) bool { return name == l.name }

func (l *singleLayout) hasVersion(name string, version uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return name == l.name && slices.Contains(l.versions, version)
}

func (l *singleLayout) rel(_ string, version uint64) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.versionRoot {
		return ""
	}
	return strconv.FormatUint(version, 10)
}

func (l *singleLayout) store(name string, version uint64) (artifact.Store, error) {
	return l.versionStore(l.rel(name, version))
}

// newLayout is the layout of root (single: the model name of a single-model root, "" for none).
func newLayout(root string, single string, log *slog.Logger, opts []artifact.Option) (layout, error) {
	s, err := artifact.Locate(root, opts...)
	if err != nil {
		return nil, err
	}
	b := base{root: s, log: log}
	switch {
	case single != "":
		return &singleLayout{base: b, name: single}, nil
	case s.Local() != "":
		return &dirLayout{base: b}, nil
	default:
		return &indexLayout{base: b}, nil
	}
}

// discardLog is the log of a layout whose complaints the caller words itself (CheckRoot).
var discardLog = slog.New(slog.DiscardHandler)
