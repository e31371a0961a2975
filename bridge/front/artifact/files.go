package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
)

// Artifact is one artifact directory, opened: its manifest read and checked, every path it
// names checked to stay inside the store. Checksums are verified as files are read
// (ReadListed, ReadInto) and for the rest by VerifyFiles.
//
// TRUST BOUNDARY: the checks establish INTEGRITY (the bytes are the ones the exporter wrote),
// not authenticity; compiling and running the programs runs whatever they contain.
type Artifact struct {
	Store    Store
	Manifest *jaxportv1.Manifest
	// ManifestSHA256 is the hex sha256 of manifest.json as read (a repository in poll mode
	// reloads a version whose manifest changed).
	ManifestSHA256 string
	files          map[string]*jaxportv1.FileEntry
}

// Open reads and checks the artifact in store: manifest.json (ReadManifest), the path rule
// for every path it names, and that the manifest describes its programs: each program's
// bytecode (read, sha256-checked) has a @main taking and returning what the manifest lists
// (checkPrograms). Every engine gets an artifact that passed; errors are *Error, one line.
func Open(ctx context.Context, s Store) (*Artifact, error) {
	m, digest, err := readManifest(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := checkPaths(s, m); err != nil {
		return nil, err
	}
	a := &Artifact{Store: s, Manifest: m, ManifestSHA256: digest, files: map[string]*jaxportv1.FileEntry{}}
	for _, f := range m.GetFiles() {
		a.files[f.GetPath()] = f
	}
	if err := a.checkPrograms(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// File is the manifest's entry for rel (false: rel is not in its files list).
func (a *Artifact) File(rel string) (*jaxportv1.FileEntry, bool) {
	f, ok := a.files[rel]
	return f, ok
}

// readBlock is how much of a file is read (and hashed) at a time.
const readBlock = 1 << 20

// ReadListed is the bytes of file rel, which the manifest's files list must name, checked
// against its size and sha256 (a ChecksumError otherwise, worded as verify_files words it).
func (a *Artifact) ReadListed(ctx context.Context, rel string) ([]byte, error) {
	f, ok := a.files[rel]
	if !ok {
		return nil, errorf(fmt.Sprintf("%s: %s is used by the manifest but not in its file list", a.Store.Display(""), rel))
	}
	data := make([]byte, f.GetSizeBytes())
	if err := a.readChecked(ctx, f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// ReadInto reads file rel into dst, which must be exactly the file's size. A listed file is
// checked against its size and sha256 while it is read (ChecksumError, as verify_files has
// it); one the list does not name is only size-checked, and fs.ErrNotExist when missing (zarr
// reads a missing chunk as its fill value).
func (a *Artifact) ReadInto(ctx context.Context, rel string, dst []byte) error {
	if f, ok := a.files[rel]; ok {
		if uint64(len(dst)) != f.GetSizeBytes() {
			return checksumError(fmt.Sprintf("%s: size %d bytes in the manifest, the reader needs %d",
				a.Store.Display(rel), f.GetSizeBytes(), len(dst)))
		}
		return a.readChecked(ctx, f, dst)
	}
	rc, size, err := a.Store.Open(ctx, rel)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size >= 0 && size != int64(len(dst)) {
		return errorf(fmt.Sprintf("%s: %d bytes, the reader needs %d", a.Store.Display(rel), size, len(dst)))
	}
	if err := readExactly(rc, dst); err != nil {
		return readFailure(a.Store, rel, err)
	}
	return nil
}

// readChecked fills dst (the entry's size) from the file, hashing each block as it arrives.
func (a *Artifact) readChecked(ctx context.Context, f *jaxportv1.FileEntry, dst []byte) error {
	rel, where := f.GetPath(), a.Store.Display(f.GetPath())
	rc, size, err := a.Store.Open(ctx, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return checksumError(where + ": file listed in the manifest is missing")
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	if size >= 0 && uint64(size) != f.GetSizeBytes() {
		return checksumError(fmt.Sprintf("%s: size %d bytes, manifest says %d (truncated or replaced?)", where, size, f.GetSizeBytes()))
	}
	h := sha256.New()
	for off := 0; off < len(dst); {
		end := min(off+readBlock, len(dst))
		n, err := io.ReadFull(rc, dst[off:end])
		h.Write(dst[off : off+n])
		off += n
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return checksumError(fmt.Sprintf("%s: size %d bytes, manifest says %d (truncated or replaced?)", where, off, f.GetSizeBytes()))
		}
		if err != nil {
			return readFailure(a.Store, rel, err)
		}
	}
	if extra, _ := io.Copy(io.Discard, io.LimitReader(rc, 1<<20)); extra > 0 {
		return checksumError(fmt.Sprintf("%s: size more than %d bytes, manifest says %d (truncated or replaced?)",
			where, len(dst), f.GetSizeBytes()))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.GetSha256() {
		return checksumError(fmt.Sprintf("%s: sha256 mismatch: expected %s, actual %s", where, f.GetSha256(), got))
	}
	return nil
}

func readExactly(r io.Reader, dst []byte) error {
	if _, err := io.ReadFull(r, dst); err != nil {
		return err
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return errors.New("longer than its announced size")
	}
	return nil
}

// hashFile is the size and sha256 of a file read to its end (streamed).
func (a *Artifact) hashFile(ctx context.Context, f *jaxportv1.FileEntry) error {
	rel, where := f.GetPath(), a.Store.Display(f.GetPath())
	rc, size, err := a.Store.Open(ctx, rel)
	if errors.Is(err, fs.ErrNotExist) {
		return checksumError(where + ": file listed in the manifest is missing")
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	if size >= 0 && uint64(size) != f.GetSizeBytes() {
		return checksumError(fmt.Sprintf("%s: size %d bytes, manifest says %d (truncated or replaced?)", where, size, f.GetSizeBytes()))
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, rc, make([]byte, 256<<10))
	if err != nil {
		return readFailure(a.Store, rel, err)
	}
	if uint64(n) != f.GetSizeBytes() {
		return checksumError(fmt.Sprintf("%s: size %d bytes, manifest says %d (truncated or replaced?)", where, n, f.GetSizeBytes()))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.GetSha256() {
		return checksumError(fmt.Sprintf("%s: sha256 mismatch: expected %s, actual %s", where, f.GetSha256(), got))
	}
	return nil
}

// checkListed: every file the programs and goldens use is in the files list, so nothing
// escapes the checksums.
func (a *Artifact) checkListed() error {
	var missing []string
	need := func(rel string) {
		if _, ok := a.files[rel]; rel != "" && !ok {
			missing = append(missing, rel)
		}
	}
	for _, p := range a.Manifest.GetPrograms() {
		need(p.GetMlirbcFile())
		need(p.GetJaxexportFile())
	}
	for _, c := range a.Manifest.GetGoldens() {
		for _, group := range []map[string]string{c.GetInputs(), c.GetOutputs(), c.GetCheckOutputs()} {
			for _, rel := range group {
				need(rel)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	return errorf(fmt.Sprintf("%s: %s is used by the manifest but not in its file list", a.Store.Display(""), missing[0]))
}

// VerifyFiles checks every file of the files list that skip does not claim (a reader that
// checks those as it reads them: ReadListed, ReadInto) against its size and sha256, several
// at once; the first failure in the list's order is the error (a ChecksumError naming the
// file, as verify_files has it). Also refuses a program or golden file the list does not name.
func (a *Artifact) VerifyFiles(ctx context.Context, skip func(rel string) bool) error {
	if err := a.checkListed(); err != nil {
		return err
	}
	var todo []int
	for i, f := range a.Manifest.GetFiles() {
		if skip == nil || !skip(f.GetPath()) {
			todo = append(todo, i)
		}
	}
	errs := make([]error, len(a.Manifest.GetFiles()))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(len(todo), Parallelism(a.Store)) {
		wg.Go(func() {
			for i := range work {
				if err := a.hashFile(ctx, a.Manifest.GetFiles()[i]); err != nil && ctx.Err() == nil {
					errs[i] = err // (a failure after another one cancelled the rest is not one)
					cancel()
				}
			}
		})
	}
	for _, i := range todo {
		if ctx.Err() != nil {
			break
		}
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return ctx.Err()
}

// Parallelism is how many files of s a reader reads at once: the cores for a local store
// (hashing bounds it), more for a URL (latency bounds it).
func Parallelism(s Store) int {
	if s.Local() != "" {
		return max(2, runtime.GOMAXPROCS(0))
	}
	return 16
}

// ParameterMismatch is the ChecksumError of a parameter whose assembled array does not match
// its manifest sha256.
func ParameterMismatch(s Store, arg *jaxportv1.Argument, actual string) error {
	path := "unknown path"
	if spec, err := tensorstorePath(arg); err == nil {
		path = spec
	}
	return checksumError(fmt.Sprintf("%s: parameter %s (%s) sha256 mismatch: expected %s, actual %s",
		s.Display(""), pyRepr(arg.GetName()), path, arg.GetSha256(), actual))
}

func tensorstorePath(arg *jaxportv1.Argument) (string, error) {
	var spec TensorstoreSpec
	if err := jsonUnmarshal(arg.GetTensorstoreSpecJson(), &spec); err != nil {
		return "", err
	}
	return spec.Kvstore.Path, nil
}

// Labels are the class labels of every output that has a labels_file (line i names class i;
// lines split as Python's str.splitlines splits them), each file checked against its sha256.
func (a *Artifact) Labels(ctx context.Context) (map[string][]string, error) {
	out := map[string][]string{}
	for _, o := range a.Manifest.GetOutputs() {
		rel := o.GetLabelsFile()
		if rel == "" {
			continue
		}
		data, err := a.ReadListed(ctx, rel)
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(data) {
			return nil, errorf(fmt.Sprintf("labels file %s of output %s is not UTF-8 text", pyRepr(rel), pyRepr(o.GetName())))
		}
		out[o.GetName()] = splitLines(string(data))
	}
	return out, nil
}

// splitLines is Python's str.splitlines(): \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028 and
// U+2029 end a line; a final line break adds no empty line.
func splitLines(s string) []string {
	lines := []string{}
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			lines = append(lines, s[start:i])
			if r == '\r' && strings.HasPrefix(s[i+size:], "\n") {
				size++
			}
			start = i + size
		}
		i += size
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}
