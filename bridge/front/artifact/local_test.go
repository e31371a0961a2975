package artifact_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

var ctx = context.Background()

// copied is a fresh copy of the back-compat artifact at <tmp>/repo/m/1.
func copied(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo", "m", "1")
	artifacttest.CopyTree(t, artifacttest.Backcompat(), dir)
	return dir
}

func openDir(t *testing.T, dir string) (*artifact.Artifact, error) {
	t.Helper()
	s, err := artifact.Locate(dir)
	if err != nil {
		t.Fatal(err)
	}
	return artifact.Open(ctx, s)
}

// editManifest rewrites dir/manifest.json after edit changed it.
func editManifest(t *testing.T, dir string, edit func(m *jaxportv1.Manifest)) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, artifact.ManifestFile))
	must(t, err)
	m := &jaxportv1.Manifest{}
	must(t, protojson.Unmarshal(raw, m))
	edit(m)
	out, err := protojson.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, artifact.ManifestFile), out, 0o644))
}

func TestOpenAndVerifyTheCommittedArtifact(t *testing.T) {
	a, err := openDir(t, artifacttest.Backcompat())
	must(t, err)
	if a.Manifest.GetName() == "" || len(a.Manifest.GetFiles()) != 27 {
		t.Fatalf("manifest %q with %d files", a.Manifest.GetName(), len(a.Manifest.GetFiles()))
	}
	must(t, a.VerifyFiles(ctx, nil))
	code, err := a.ReadListed(ctx, "model.mlirbc")
	must(t, err)
	f, _ := a.File("model.mlirbc")
	if sum := sha256.Sum256(code); hex.EncodeToString(sum[:]) != f.GetSha256() {
		t.Fatal("model.mlirbc read wrong")
	}
	labels, err := a.Labels(ctx)
	must(t, err)
	if len(labels) != 0 {
		t.Fatalf("labels %v", labels)
	}
}

func TestTamperedMissingAndTruncatedFilesNameTheFile(t *testing.T) {
	dir := copied(t)
	chunk := artifacttest.FirstChunk(t, dir)
	artifacttest.FlipByte(t, filepath.Join(dir, chunk))
	a, err := openDir(t, dir)
	must(t, err) // paths are fine: checksums are checked when verifying or reading
	err = a.VerifyFiles(ctx, nil)
	wantPrefix(t, err, filepath.Join(dir, chunk)+": sha256 mismatch: expected ")
	if !strings.Contains(err.Error(), ", actual ") {
		t.Fatal(err)
	}
	wantPrefix(t, errors.New(artifact.LoadReason(err)), "checksum verification failed: "+filepath.Join(dir, chunk)+": sha256 mismatch")
	// The reader that checks the chunk itself says the same, and VerifyFiles skips what it reads.
	f, _ := a.File(chunk)
	buf := make([]byte, f.GetSizeBytes())
	wantError(t, a.ReadInto(ctx, chunk, buf), err.Error())
	must(t, a.VerifyFiles(ctx, func(rel string) bool { return rel == chunk }))

	must(t, os.Remove(filepath.Join(dir, "model.mlirbc")))
	_, err = a.ReadListed(ctx, "model.mlirbc")
	wantError(t, err, filepath.Join(dir, "model.mlirbc")+": file listed in the manifest is missing")
	var ae *artifact.Error
	if !errors.As(err, &ae) || !ae.Checksum {
		t.Fatalf("%T %v is no checksum error", err, err)
	}

	jx := filepath.Join(dir, "model.jaxexport")
	data, _ := os.ReadFile(jx)
	must(t, os.WriteFile(jx, data[:len(data)-3], 0o644))
	_, err = a.ReadListed(ctx, "model.jaxexport")
	wantError(t, err, jx+": size "+strconv.Itoa(len(data)-3)+" bytes, manifest says "+strconv.Itoa(len(data))+" (truncated or replaced?)")
}

func TestSymlinksOutOfTheArtifactAreRefused(t *testing.T) {
	dir := copied(t)
	outside := t.TempDir()
	jx := filepath.Join(dir, "model.jaxexport")
	data, _ := os.ReadFile(jx)
	must(t, os.WriteFile(filepath.Join(outside, "model.jaxexport"), data, 0o644))
	must(t, os.Remove(jx))
	must(t, os.Symlink(filepath.Join(outside, "model.jaxexport"), jx))
	_, err := openDir(t, dir)
	wantError(t, err, "files['model.jaxexport']: path 'model.jaxexport' resolves outside 1/; refused")
	wantError(t, errors.New(artifact.LoadReason(err)), "manifest.json: files['model.jaxexport']: path 'model.jaxexport' resolves outside 1/; refused")

	// A symlink inside the artifact is fine; the manifest itself may not lead outside.
	dir = copied(t)
	must(t, os.Rename(filepath.Join(dir, "model.mlir"), filepath.Join(dir, "real.mlir")))
	must(t, os.Symlink("real.mlir", filepath.Join(dir, "model.mlir")))
	a, err := openDir(t, dir)
	must(t, err)
	must(t, a.VerifyFiles(ctx, nil))
	man := filepath.Join(dir, artifact.ManifestFile)
	raw, _ := os.ReadFile(man)
	must(t, os.WriteFile(filepath.Join(outside, "m.json"), raw, 0o644))
	must(t, os.Remove(man))
	must(t, os.Symlink(filepath.Join(outside, "m.json"), man))
	_, err = openDir(t, dir)
	wantError(t, err, man+": path 'manifest.json' resolves outside 1/; refused")

	// A weight chunk that leads outside is refused when read, whatever the manifest says.
	dir = copied(t)
	chunk := artifacttest.FirstChunk(t, dir)
	cdata, _ := os.ReadFile(filepath.Join(dir, chunk))
	must(t, os.WriteFile(filepath.Join(outside, "chunk"), cdata, 0o644))
	must(t, os.Remove(filepath.Join(dir, chunk)))
	must(t, os.Symlink(filepath.Join(outside, "chunk"), filepath.Join(dir, chunk)))
	_, err = openDir(t, dir)
	wantError(t, err, "files['"+chunk+"']: path '"+chunk+"' resolves outside 1/; refused")
}

func TestManifestErrorsNameTheField(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(m *jaxportv1.Manifest)
		want string
	}{
		"schema": {func(m *jaxportv1.Manifest) { m.SchemaVersion = 3 }, "MAN: manifest schema_version 3 is not supported by " +
			"this jaxport (supported: 1..2); re-export the model with a matching jaxport or upgrade jaxport"},
		"dotdot": {func(m *jaxportv1.Manifest) { m.Programs[0].MlirbcFile = "../x.mlirbc" },
			"MAN: programs[0].mlirbc_file: path '../x.mlirbc' contains '..'; refused"},
		"position": {func(m *jaxportv1.Manifest) { m.Programs[0].Arguments[1].Index = 7 },
			"MAN: programs[0].arguments[1] (ARG1) has index 7 but is at position 1: the manifest must list @main's arguments " +
				"and results in order (was the manifest edited?)"},
		"bytes": {func(m *jaxportv1.Manifest) { m.Programs[0].Arguments[0].ByteSize++ }, "MAN: programs[0].arguments[0] (ARG0) byte_size"},
		"dtype": {func(m *jaxportv1.Manifest) { m.Programs[0].Arguments[0].Dtype.Numpy = "complex64" },
			"manifest names an unsupported dtype: unsupported dtype 'complex64'; supported: bool, uint8, uint16, uint32, " +
				"uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64"},
		"nosum": {func(m *jaxportv1.Manifest) { m.Files = m.Files[1:] }, ""},
		"kvstore": {func(m *jaxportv1.Manifest) {
			m.Programs[0].Arguments[0].TensorstoreSpecJson = `{"driver": "zarr3", "kvstore": {"driver": "http", "base_url": "http://x/"}}`
		}, "parameter 'ARG0N': weights must come from a local 'file' kvstore, got {'base_url': 'http://x/', 'driver': 'http'}"},
		"program file": {func(m *jaxportv1.Manifest) {
			for i, f := range m.Files {
				if f.Path == "model.mlirbc" {
					m.Files = append(m.Files[:i], m.Files[i+1:]...)
					break
				}
			}
		}, "mlirbc_file 'model.mlirbc' has no checksum in manifest.files; refused"},
		"polymorphic": {func(m *jaxportv1.Manifest) { m.Programs[0].Polymorphic = true; m.SchemaVersion = 2 },
			"MAN: a polymorphic program but no manifest.dimensions"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := copied(t)
			var arg0, arg1 string
			editManifest(t, dir, func(m *jaxportv1.Manifest) {
				arg0, arg1 = m.Programs[0].Arguments[0].GetName(), m.Programs[0].Arguments[1].GetName()
				c.edit(m)
			})
			_, err := openDir(t, dir)
			if c.want == "" { // removing a golden's checksum is VerifyFiles' refusal
				a, err := openDir(t, dir)
				must(t, err)
				wantPrefix(t, a.VerifyFiles(ctx, nil), dir+": goldens/case0/inputs/")
				return
			}
			want := strings.NewReplacer("MAN", filepath.Join(dir, artifact.ManifestFile), "ARG0N", arg0,
				"ARG0", "'"+arg0+"'", "ARG1", "'"+arg1+"'").Replace(c.want)
			wantPrefix(t, err, want)
		})
	}
}

func TestManifestFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := openDir(t, dir)
	wantError(t, err, filepath.Join(dir, "manifest.json")+": no manifest.json; is this a jaxport artifact directory?")
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{nope"), 0o644))
	_, err = openDir(t, dir)
	wantPrefix(t, err, filepath.Join(dir, "manifest.json")+" is not valid JSON: ")
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("[1]"), 0o644))
	_, err = openDir(t, dir)
	wantError(t, err, filepath.Join(dir, "manifest.json")+" must hold a JSON object")
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"schemaVersion": "1"}`), 0o644))
	_, err = openDir(t, dir)
	wantPrefix(t, err, filepath.Join(dir, "manifest.json")+": manifest schema_version '1' is not supported")
	must(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"schemaVersion": 1, "bogus": 2}`), 0o644))
	_, err = openDir(t, dir)
	wantPrefix(t, err, filepath.Join(dir, "manifest.json")+" does not match the jaxport.v1.Manifest schema: ")
}

func TestLabelsAreCheckedAndSplitAsPythonSplitsLines(t *testing.T) {
	dir := copied(t)
	text := "cat\r\ndog\rbird\u2028fish\n"
	must(t, os.WriteFile(filepath.Join(dir, "labels.txt"), []byte(text), 0o644))
	sum := sha256.Sum256([]byte(text))
	editManifest(t, dir, func(m *jaxportv1.Manifest) {
		m.Outputs[2].LabelsFile = "labels.txt"
		m.Files = append(m.Files, &jaxportv1.FileEntry{Path: "labels.txt", SizeBytes: uint64(len(text)), Sha256: hex.EncodeToString(sum[:])})
	})
	a, err := openDir(t, dir)
	must(t, err)
	labels, err := a.Labels(ctx)
	must(t, err)
	if got := strings.Join(labels["head"], "|"); got != "cat|dog|bird|fish" || len(labels) != 1 {
		t.Fatalf("labels %q", labels)
	}
	must(t, os.WriteFile(filepath.Join(dir, "labels.txt"), []byte(strings.ToUpper(text)), 0o644))
	_, err = a.Labels(ctx)
	wantPrefix(t, err, filepath.Join(dir, "labels.txt")+": sha256 mismatch: expected ")
}

func TestLocate(t *testing.T) {
	dir := copied(t)
	s, err := artifact.Locate("file://" + dir)
	must(t, err)
	if s.Local() != dir || s.Display("a/b") != dir+"/a/b" {
		t.Fatalf("file:// store %q %q", s.Local(), s.Display("a/b"))
	}
	_, err = artifact.Locate("file://host/x")
	wantError(t, err, "'file://host/x': a file:// URL names a local path (file:///abs/path), not host 'host'")
	_, err = artifact.Locate("gs://bucket/repo")
	wantError(t, err, "'gs://bucket/repo': gs:// is not supported (supported: a local path, file://, http://, https://, "+
		"s3://); copy the artifacts to a local directory, serve them over HTTP or put them in S3")
	_, err = artifact.Locate("http://host/repo?x=1")
	wantError(t, err, "'http://host/repo?x=1': a repository or artifact URL takes no ?query or #fragment")
	_, err = artifact.Locate("http:///repo")
	wantError(t, err, "'http:///repo' is not an http(s)://HOST/... URL")
	local, _ := artifact.Locate(dir)
	_, _, err = local.Open(ctx, "nothing")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	_, err = local.Child("../x")
	wantError(t, err, "'../x': path '../x' contains '..'; refused")
}
