package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Manifest schema versions this reader understands (docs/artifact-format.md, schemaVersion).
const (
	MinSchemaVersion = 1
	MaxSchemaVersion = 2
)

// ManifestFile is the manifest's name inside an artifact directory.
const ManifestFile = "manifest.json"

// Refused is why the engine will not run a model: one line naming the model and the cause, so
// the front can log it and hand the model to the Python workers instead.
type Refused struct {
	Model  string
	Reason string
}

func (r *Refused) Error() string {
	return fmt.Sprintf("native engine: model %s: %s", r.Model, oneLine(r.Reason))
}

// oneLine keeps the first line of a (compiler's) multi-line message and says how many followed.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	first, rest, found := strings.Cut(s, "\n")
	if !found {
		return s
	}
	return fmt.Sprintf("%s (+%d more lines)", strings.TrimSpace(first), strings.Count(rest, "\n")+1)
}

// ReadManifest parses dir/manifest.json with the generated jaxport.v1 types (proto3 JSON, the
// format the exporter writes) and checks its schema version.
func ReadManifest(dir string) (*jaxportv1.Manifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	m := &jaxportv1.Manifest{}
	if err := protojson.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("%s: not a jaxport manifest: %v", ManifestFile, err)
	}
	if v := m.GetSchemaVersion(); v < MinSchemaVersion || v > MaxSchemaVersion {
		return nil, fmt.Errorf("%s: schema version %d, this reader accepts %d..%d",
			ManifestFile, v, MinSchemaVersion, MaxSchemaVersion)
	}
	return m, nil
}

// artifactPath joins a manifest-relative path with dir, refusing one that leaves dir.
func artifactPath(dir, rel string) (string, error) {
	clean := filepath.FromSlash(strings.TrimSuffix(rel, "/"))
	if !filepath.IsLocal(clean) {
		return "", fmt.Errorf("path %q leaves the artifact directory", rel)
	}
	return filepath.Join(dir, clean), nil
}

// readListedFile reads a file the manifest's `files` list names and checks its sha256.
func readListedFile(dir string, m *jaxportv1.Manifest, rel string) ([]byte, error) {
	var want string
	for _, f := range m.GetFiles() {
		if f.GetPath() == rel {
			want = f.GetSha256()
			break
		}
	}
	if want == "" {
		return nil, fmt.Errorf("%s is not in the manifest's files list", rel)
	}
	path, err := artifactPath(dir, rel)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	data, err := io.ReadAll(io.TeeReader(f, h))
	if err != nil {
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return nil, fmt.Errorf("%s: sha256 %s, the manifest says %s", rel, got, want)
	}
	return data, nil
}

// Labels reads the class labels of every output that has a `labels_file` (line i names class
// i, as the Python artifact reader splits it: "\n" or "\r\n" ends a line, a final newline adds
// no empty label), sha256-checked when the manifest's files list names the file.
func Labels(dir string, m *jaxportv1.Manifest) (map[string][]string, error) {
	out := map[string][]string{}
	for _, o := range m.GetOutputs() {
		rel := o.GetLabelsFile()
		if rel == "" {
			continue
		}
		data, err := readListedFile(dir, m, rel)
		if err != nil && strings.Contains(err.Error(), "is not in the manifest's files list") {
			var path string
			if path, err = artifactPath(dir, rel); err == nil {
				data, err = os.ReadFile(path)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("labels of output %s: %v", o.GetName(), err)
		}
		text := strings.ReplaceAll(string(data), "\r\n", "\n")
		lines := strings.Split(text, "\n")
		if n := len(lines); n > 0 && lines[n-1] == "" {
			lines = lines[:n-1]
		}
		out[o.GetName()] = lines
	}
	return out, nil
}
