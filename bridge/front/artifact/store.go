// Package artifact reads jaxport artifacts (docs/artifact-format.md) and repositories of them
// wherever they are: a local directory, a file:// URL of one, an http(s):// URL or an
// s3://BUCKET/PREFIX URL (Locate, a Store). On top of a Store: index.json (how a repository by
// URL is listed), manifest.json read and checked (schema version and structure, the ONE path
// rule for every path it names), the sha256 of the files it pins, and labels files.
//
// It is the Go reader of the format the Python package jaxport.artifact reads (the exporter
// writes both): the same rules and the same one-line messages (Error), so a repository served
// by the front refuses what `jaxport.artifact.open` refuses, with the same words.
//
// Files: store.go (Store, Locate, the local store), http.go, s3.go + sigv4.go + credentials.go
// (URL stores), paths.go (the path rule), manifest.go (reading and checking a manifest),
// files.go (Open, checksums, labels), index.go (index.json), dtypes.go (the dtype table).
package artifact

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/jaxport/jaxport/bridge/front/status"
)

// Store is the root of an artifact or a repository. Relative paths (rel) are POSIX paths
// inside it; every method applies the path rule to them.
type Store interface {
	// Display is rel as messages name it: the full local path or the full URL ("" = the root).
	Display(rel string) string
	// Local is the directory of a store on the local file system, "" for one by URL.
	Local() string
	// Resolve checks rel against the path rule (locally: where it leads, symlinks followed);
	// what names it in the error.
	Resolve(rel, what string) error
	// Child is the store of directory rel below this one.
	Child(rel string) (Store, error)
	// Open opens file rel for reading, with its size (-1 when the server does not say). A
	// missing file is an error for which errors.Is(err, fs.ErrNotExist) holds; any other
	// failure is an *Error naming the file ("<display>: cannot read: <reason>").
	Open(ctx context.Context, rel string) (io.ReadCloser, int64, error)
}

// ReadFile is the whole of file rel (Store.Open's errors).
func ReadFile(ctx context.Context, s Store, rel string) ([]byte, error) {
	rc, size, err := s.Open(ctx, rel)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var data []byte
	if size >= 0 {
		data = make([]byte, size)
		_, err = io.ReadFull(rc, data)
		if err == nil {
			var one [1]byte
			if n, _ := rc.Read(one[:]); n > 0 {
				err = errors.New("longer than its announced size")
			}
		}
	} else {
		data, err = io.ReadAll(rc)
	}
	if err != nil {
		return nil, readFailure(s, rel, err)
	}
	return data, nil
}

// readFailure is "<display>: cannot read: <reason>" unless err already is an *Error.
func readFailure(s Store, rel string, err error) error {
	var ae *Error
	if errors.As(err, &ae) {
		return err
	}
	return withCause(fmt.Sprintf("%s: cannot read: %s", s.Display(rel), reason(err)), err)
}

// reason is an error's text without Go's "op path:" wrapping (Python's strerror).
func reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// Schemes are the URL schemes Locate accepts (besides plain local paths).
var Schemes = []string{"file", "http", "https", "s3"}

var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// IsURL says whether where has the form scheme://...
func IsURL(where string) bool { return urlScheme.MatchString(where) }

// Option configures Locate.
type Option func(*options)

type options struct {
	env    func(string) string
	client *http.Client
}

// WithEnv reads the environment (AWS_* for s3://, JAXPORT_S3_CREDENTIALS) through getenv
// instead of os.Getenv.
func WithEnv(getenv func(string) string) Option { return func(o *options) { o.env = getenv } }

// WithHTTPClient makes URL stores use c (default: a client of their own).
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.client = c } }

// Locate is the Store of a local path or a file://, http(s):// or s3:// URL. An unsupported
// scheme is an *Error naming it and the supported ones.
func Locate(where string, opts ...Option) (Store, error) {
	o := options{env: os.Getenv}
	for _, opt := range opts {
		opt(&o)
	}
	if o.client == nil {
		t := newTransport()
		roots, err := caRoots(o.env)
		if err != nil {
			return nil, err
		}
		if roots != nil {
			t.TLSClientConfig = &tls.Config{RootCAs: roots}
		}
		o.client = &http.Client{Transport: t}
	}
	m := urlScheme.FindStringSubmatch(where)
	if m == nil {
		return &localStore{path: where}, nil
	}
	switch scheme := strings.ToLower(m[1]); scheme {
	case "file":
		u, err := url.Parse(where)
		if err != nil {
			return nil, errorf(fmt.Sprintf("%s: not a file:///abs/path URL: %v", pyRepr(where), err))
		}
		if u.Host != "" && u.Host != "localhost" {
			return nil, errorf(fmt.Sprintf("%s: a file:// URL names a local path (file:///abs/path), not host %s",
				pyRepr(where), pyRepr(u.Host)))
		}
		return &localStore{path: u.Path}, nil
	case "http", "https":
		return newHTTPStore(where, o.client)
	case "s3":
		return newS3Store(where, o.env, o.client)
	default:
		supported := make([]string, len(Schemes))
		for i, s := range Schemes {
			supported[i] = s + "://"
		}
		return nil, errorf(fmt.Sprintf("%s: %s:// is not supported (supported: a local path, %s); copy the "+
			"artifacts to a local directory, serve them over HTTP or put them in S3",
			pyRepr(where), scheme, strings.Join(supported, ", ")))
	}
}

// CA variables the Python reader's TensorStore takes for https:// with a private CA: a PEM
// bundle, or a directory of PEM certificates. Either replaces the system's CAs (as curl's
// CAINFO/CAPATH do); neither set: the system's.
const (
	CABundleEnv = "TENSORSTORE_CA_BUNDLE"
	CAPathEnv   = "TENSORSTORE_CA_PATH"
)

// caRoots is the CA pool the environment names (nil: the system's).
func caRoots(getenv func(string) string) (*x509.CertPool, error) {
	bundle, dir := getenv(CABundleEnv), getenv(CAPathEnv)
	if bundle == "" && dir == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	var files []string
	if bundle != "" {
		files = append(files, bundle)
	}
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, errorf(fmt.Sprintf("%s=%s: %s", CAPathEnv, dir, reason(err)))
		}
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, errorf(fmt.Sprintf("%s: cannot read: %s", f, reason(err)))
		}
		if !pool.AppendCertsFromPEM(pem) && f == bundle {
			return nil, errorf(fmt.Sprintf("%s=%s: no PEM certificate in it", CABundleEnv, bundle))
		}
	}
	return pool, nil
}

// localStore is a directory on the local file system.
type localStore struct{ path string }

func (s *localStore) String() string { return s.Display("") }

func (s *localStore) Display(rel string) string {
	if rel == "" {
		return filepath.Clean(s.path)
	}
	return filepath.Join(s.path, filepath.FromSlash(rel))
}

func (s *localStore) Local() string { return filepath.Clean(s.path) }

func (s *localStore) Resolve(rel, what string) error {
	_, err := ResolveInside(s.path, rel, what)
	return err
}

func (s *localStore) Child(rel string) (Store, error) {
	if err := CheckRelative(rel, "'"+rel+"'"); err != nil {
		return nil, err
	}
	return &localStore{path: filepath.Join(s.path, filepath.FromSlash(rel))}, nil
}

// Open opens rel once it passes the path rule (so no file of a store is read from outside it,
// whatever a symlink says); a directory or a missing file is fs.ErrNotExist.
func (s *localStore) Open(_ context.Context, rel string) (io.ReadCloser, int64, error) {
	path, err := ResolveInside(s.path, rel, pyRepr(rel))
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, 0, notExist(s, rel)
		}
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: %s", s.Display(rel), reason(err)))
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			return nil, 0, notExist(s, rel)
		}
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: %s", s.Display(rel), reason(err)))
	}
	return f, st.Size(), nil
}

// notExist is fs.ErrNotExist naming the file.
func notExist(s Store, rel string) error {
	return &fs.PathError{Op: "open", Path: s.Display(rel), Err: fs.ErrNotExist}
}

func pyRepr(s string) string { return status.PyRepr(s) }
