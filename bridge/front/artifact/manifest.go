package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// ManifestFile is the manifest's name inside an artifact directory.
const ManifestFile = "manifest.json"

// Manifest schema versions this reader understands (docs/artifact-format.md, schemaVersion;
// the changelog is in proto/jaxport/v1/manifest.proto).
const (
	MinSchemaVersion = 1
	MaxSchemaVersion = 2
)

// exportedAtLayout is the manifest's exportedAt format (UTC, seconds).
const exportedAtLayout = "2006-01-02T15:04:05Z"

var (
	roleParam    = jaxportv1.ArgumentRole_ARGUMENT_ROLE_PARAMETER
	rolePlatform = jaxportv1.ArgumentRole_ARGUMENT_ROLE_PLATFORM_INDEX
	roleArgToken = jaxportv1.ArgumentRole_ARGUMENT_ROLE_TOKEN
	roleResToken = jaxportv1.ResultRole_RESULT_ROLE_TOKEN
)

// ReadManifest reads, parses and validates the manifest.json of store (the Python reader's
// manifest.load: same checks, same messages, each naming the manifest by its full path or URL).
func ReadManifest(ctx context.Context, s Store) (*jaxportv1.Manifest, error) {
	m, _, err := readManifest(ctx, s)
	return m, err
}

// ManifestDigest is the hex sha256 of store's manifest.json ("" when it has none), without
// parsing it: what a repository in poll mode compares to see a version change.
func ManifestDigest(ctx context.Context, s Store) (string, error) {
	data, err := ReadFile(ctx, s, ManifestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

func readManifest(ctx context.Context, s Store) (*jaxportv1.Manifest, string, error) {
	source := s.Display(ManifestFile)
	if dir := s.Local(); dir != "" {
		path := filepath.Join(dir, ManifestFile)
		if st, err := os.Lstat(path); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			if _, err := ResolveInside(dir, ManifestFile, path); err != nil {
				return nil, "", err
			}
		}
	}
	data, err := ReadFile(ctx, s, ManifestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", errorf(source + ": no manifest.json; is this a jaxport artifact directory?")
	}
	if err != nil {
		return nil, "", err
	}
	if !utf8.Valid(data) {
		return nil, "", errorf(source + " is not UTF-8 text")
	}
	m, err := ParseManifest(data, source)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return m, hex.EncodeToString(sum[:]), nil
}

// ParseManifest parses and validates manifest JSON; source names it in errors.
func ParseManifest(data []byte, source string) (*jaxportv1.Manifest, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var anything any
		if json.Unmarshal(data, &anything) == nil {
			return nil, errorf(source + " must hold a JSON object")
		}
		return nil, errorf(fmt.Sprintf("%s is not valid JSON: %v", source, err))
	}
	version, ok := raw["schemaVersion"]
	if !ok {
		version, ok = raw["schema_version"]
	}
	if !ok {
		version = json.RawMessage("0")
	}
	if err := checkSchemaVersionRaw(version, source); err != nil {
		return nil, err
	}
	m := &jaxportv1.Manifest{}
	if err := protojson.Unmarshal(data, m); err != nil {
		return nil, errorf(fmt.Sprintf("%s does not match the jaxport.v1.Manifest schema: %v", source, err))
	}
	if err := Validate(m, source); err != nil {
		return nil, err
	}
	return m, nil
}

func schemaVersionError(version, source string) error {
	return errorf(fmt.Sprintf("%s: manifest schema_version %s is not supported by this jaxport (supported: %d..%d); "+
		"re-export the model with a matching jaxport or upgrade jaxport", source, version, MinSchemaVersion, MaxSchemaVersion))
}

// checkSchemaVersionRaw checks the schemaVersion as written, before the JSON is decoded into
// the message (a reader of another schema may not decode it).
func checkSchemaVersionRaw(raw json.RawMessage, source string) error {
	text := string(bytes.TrimSpace(raw))
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		var v any
		shown := text
		if json.Unmarshal(raw, &v) == nil {
			if _, isNumber := v.(float64); !isNumber {
				shown = pyValue(v) // a number keeps its spelling (1.0, 1e3)
			}
		}
		return schemaVersionError(shown, source)
	}
	if n < MinSchemaVersion || n > MaxSchemaVersion {
		return schemaVersionError(text, source)
	}
	return nil
}

// neededSchemaVersion is the lowest schema version that can describe m: 2 with symbolic
// dimensions or a device mesh, else 1.
func neededSchemaVersion(m *jaxportv1.Manifest) uint32 {
	if len(m.GetDimensions()) > 0 || len(m.GetPadding()) > 0 || m.GetMesh() != nil {
		return 2
	}
	return 1
}

// Validate checks the manifest's invariants (manifest.proto, the Python manifest.validate);
// the error names the field.
func Validate(m *jaxportv1.Manifest, source string) error {
	if v := m.GetSchemaVersion(); v < MinSchemaVersion || v > MaxSchemaVersion {
		return schemaVersionError(strconv.FormatUint(uint64(v), 10), source)
	}
	if needed := neededSchemaVersion(m); m.GetSchemaVersion() < needed {
		return errorf(fmt.Sprintf("%s: manifest schema_version %d cannot carry symbolic dimensions or a device "+
			"mesh; they need schema_version %d", source, m.GetSchemaVersion(), needed))
	}
	if at := m.GetExportedAt(); at != "" {
		if _, err := time.Parse(exportedAtLayout, at); err != nil {
			return errorf(fmt.Sprintf("%s: exportedAt %s is not a UTC timestamp like 2026-12-01T00:41:07Z", source, pyRepr(at)))
		}
	}
	axes, order, err := checkMesh(m, source)
	if err != nil {
		return err
	}
	if len(m.GetPrograms()) == 0 {
		return errorf(source + ": no programs")
	}
	if err := checkDimensions(m, source); err != nil {
		return err
	}
	multiPlatform := len(m.GetPlatforms()) > 1
	for p, program := range m.GetPrograms() {
		where := fmt.Sprintf("programs[%d]", p)
		if err := CheckRelative(program.GetMlirbcFile(), source+": "+where+".mlirbc_file"); err != nil {
			return err
		}
		if err := CheckRelative(program.GetJaxexportFile(), source+": "+where+".jaxexport_file"); err != nil {
			return err
		}
		names := map[string]bool{}
		for i, arg := range program.GetArguments() {
			what := fmt.Sprintf("%s.arguments[%d] (%s)", where, i, pyRepr(arg.GetName()))
			if err := checkPosition(arg.GetIndex(), int32(arg.GetRole()), i, what, source); err != nil {
				return err
			}
			if names[arg.GetName()] {
				return errorf(source + ": " + what + ": duplicate argument name")
			}
			names[arg.GetName()] = true
			if arg.GetRole() == roleArgToken {
				continue
			}
			n, err := checkShape(arg.GetShape(), what, source, arg.GetDimNames(), program.GetPolymorphic())
			if err != nil {
				return err
			}
			if err := checkSharding(arg.GetSharding(), arg.GetShape(), axes, order, what, source); err != nil {
				return err
			}
			row, err := DTypeOf(arg.GetDtype())
			if err != nil {
				return err
			}
			if arg.GetByteSize() != n*uint64(row.Itemsize) {
				return errorf(fmt.Sprintf("%s: %s byte_size %d != %d elements x %d", source, what, arg.GetByteSize(), n, row.Itemsize))
			}
			switch arg.GetRole() {
			case roleParam:
				if arg.GetTensorstoreSpecJson() == "" || len(arg.GetSha256()) != 64 {
					return errorf(source + ": " + what + " lacks its tensorstore spec or sha256")
				}
			case rolePlatform:
				if i != 0 {
					return errorf(source + ": " + what + ": the platform index must be argument 0")
				}
				if dt := arg.GetDtype().GetNumpy(); len(arg.GetShape()) > 0 || (dt != "int32" && dt != "int64") {
					return errorf(fmt.Sprintf("%s: %s: the platform index must be an int32 or int64 scalar, got %s%s",
						source, what, dt, status.Ints(arg.GetShape())))
				}
			}
		}
		if multiPlatform && (len(program.GetArguments()) == 0 || program.GetArguments()[0].GetRole() != rolePlatform) {
			return errorf(source + ": " + where + ": several platforms but argument 0 is not the platform index")
		}
		for i, res := range program.GetResults() {
			what := fmt.Sprintf("%s.results[%d] (%s)", where, i, pyRepr(res.GetName()))
			if err := checkPosition(res.GetIndex(), int32(res.GetRole()), i, what, source); err != nil {
				return err
			}
			if res.GetRole() == roleResToken {
				continue
			}
			n, err := checkShape(res.GetShape(), what, source, res.GetDimNames(), program.GetPolymorphic())
			if err != nil {
				return err
			}
			if err := checkSharding(res.GetSharding(), res.GetShape(), axes, order, what, source); err != nil {
				return err
			}
			row, err := DTypeOf(res.GetDtype())
			if err != nil {
				return err
			}
			if res.GetByteSize() != n*uint64(row.Itemsize) {
				return errorf(fmt.Sprintf("%s: %s byte_size %d is inconsistent", source, what, res.GetByteSize()))
			}
		}
	}
	for _, f := range m.GetFiles() {
		if err := CheckRelative(f.GetPath(), source+": files[]"); err != nil {
			return err
		}
		if len(f.GetSha256()) != 64 {
			return errorf(fmt.Sprintf("%s: files entry %s has no sha256", source, pyRepr(f.GetPath())))
		}
	}
	return nil
}

// checkPosition: an argument or result sits at its own index with a role.
func checkPosition(index uint32, role int32, i int, what, source string) error {
	if int(index) != i {
		return errorf(fmt.Sprintf("%s: %s has index %d but is at position %d: the manifest must list @main's "+
			"arguments and results in order (was the manifest edited?)", source, what, index, i))
	}
	if role == 0 {
		return errorf(source + ": " + what + " has no role")
	}
	return nil
}

// checkShape is the element count of a fixed shape; 0 for a shape with a symbolic axis, which
// is allowed only in a polymorphic program (or a TensorSpec) and only as -1 on an axis
// dimNames names.
func checkShape(shape []int64, what, source string, dimNames []string, polymorphic bool) (uint64, error) {
	if len(dimNames) > 0 && (!polymorphic || len(dimNames) != len(shape)) {
		tail := "is not in a polymorphic program"
		if polymorphic {
			tail = fmt.Sprintf("%d axes", len(shape))
		}
		return 0, errorf(fmt.Sprintf("%s: %s has dim_names %s but %s", source, what, status.PyList(dimNames), tail))
	}
	symbolic := false
	n := uint64(1)
	for axis, d := range shape {
		named := len(dimNames) > 0 && dimNames[axis] != ""
		if named && d != -1 {
			return 0, errorf(fmt.Sprintf("%s: %s axis %d is symbolic (%s) but its size is %d, not -1",
				source, what, axis, dimNames[axis], d))
		}
		if d < 0 && !named {
			return 0, errorf(fmt.Sprintf("%s: %s has a non-fixed shape %s; only fixed shapes, or -1 on an axis "+
				"dim_names names", source, what, status.Ints(shape)))
		}
		symbolic = symbolic || named
		if d > 0 {
			n *= uint64(d)
		} else {
			n = 0
		}
	}
	if symbolic {
		return 0, nil
	}
	return n, nil
}

// checkMesh is a sharded manifest's mesh (axis -> size, and the axes in order; none without
// a mesh): named, unique axes of size >= 1 whose sizes multiply to nr_devices.
func checkMesh(m *jaxportv1.Manifest, source string) (map[string]int64, []string, error) {
	mesh := m.GetMesh()
	if mesh == nil {
		if m.GetNrDevices() > 1 {
			return nil, nil, errorf(fmt.Sprintf("%s: nr_devices %d without a mesh", source, m.GetNrDevices()))
		}
		return nil, nil, nil
	}
	axes := map[string]int64{}
	var order []string
	bad := false
	for _, a := range mesh.GetAxes() {
		if _, dup := axes[a.GetName()]; dup || a.GetName() == "" || a.GetSize() < 1 {
			bad = true
		}
		if _, dup := axes[a.GetName()]; !dup {
			order = append(order, a.GetName())
		}
		axes[a.GetName()] = int64(a.GetSize())
	}
	if len(axes) == 0 || bad {
		pairs := make([]string, len(mesh.GetAxes()))
		for i, a := range mesh.GetAxes() {
			pairs[i] = fmt.Sprintf("(%s, %d)", pyRepr(a.GetName()), a.GetSize())
		}
		return nil, nil, errorf(fmt.Sprintf("%s: mesh axes must be named, unique and of size >= 1, got [%s]",
			source, strings.Join(pairs, ", ")))
	}
	prod := int64(1)
	for _, s := range axes {
		prod *= s
	}
	if prod != int64(m.GetNrDevices()) {
		return nil, nil, errorf(fmt.Sprintf("%s: mesh %s is %d devices but nr_devices is %d",
			source, pyAxes(axes, order), prod, m.GetNrDevices()))
	}
	return axes, order, nil
}

// pyAxes is a mesh as a Python dict, `{'data': 2, 'model': 2}`.
func pyAxes(axes map[string]int64, order []string) string {
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%s: %d", pyRepr(n), axes[n])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// checkSharding: in a sharded program every argument and result has a spec of one entry per
// axis over the mesh's axes, each used once, splitting its dimension evenly; elsewhere none.
func checkSharding(sh *jaxportv1.Sharding, shape []int64, axes map[string]int64, order []string, what, source string) error {
	if axes == nil {
		if sh != nil {
			return errorf(source + ": " + what + " has a sharding but the manifest no mesh")
		}
		return nil
	}
	spec := sh.GetSpec()
	if len(spec) != len(shape) {
		return errorf(fmt.Sprintf("%s: %s sharding spec %s needs one entry per axis of shape %s",
			source, what, status.PyList(spec), status.Ints(shape)))
	}
	var used []string
	for axis, names := range spec {
		var parts []string
		for _, n := range strings.Split(names, "+") {
			if n != "" {
				parts = append(parts, n)
			}
		}
		split := int64(1)
		for _, n := range parts {
			size, known := axes[n]
			if !known || contains(used, n) {
				return errorf(fmt.Sprintf("%s: %s sharding spec %s: mesh axis %s is unknown or used twice (mesh %s)",
					source, what, status.PyList(spec), pyRepr(n), pyAxes(axes, order)))
			}
			split *= size
		}
		used = append(used, parts...)
		if shape[axis]%split != 0 {
			return errorf(fmt.Sprintf("%s: %s sharding spec %s does not split shape %s evenly on mesh %s",
				source, what, status.PyList(spec), status.Ints(shape), pyAxes(axes, order)))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// checkDimensions: symbolic dimensions (schema 2) are well formed, and every named axis of an
// input or output is -1 and names one of them.
func checkDimensions(m *jaxportv1.Manifest, source string) error {
	declared := map[string]bool{}
	for _, d := range m.GetDimensions() {
		if d.GetName() == "" || declared[d.GetName()] || !(1 <= d.GetMin() && d.GetMin() <= d.GetMax()) ||
			d.GetMultipleOf() < 1 || d.GetMin()%d.GetMultipleOf() != 0 || d.GetMax()%d.GetMultipleOf() != 0 {
			return errorf(fmt.Sprintf("%s: dimensions entry %s is malformed (%d..%d, multiple of %d)",
				source, pyRepr(d.GetName()), d.GetMin(), d.GetMax(), d.GetMultipleOf()))
		}
		declared[d.GetName()] = true
	}
	for _, group := range []struct {
		kind  string
		specs []*jaxportv1.TensorSpec
	}{{"inputs", m.GetInputs()}, {"outputs", m.GetOutputs()}} {
		for _, spec := range group.specs {
			if len(spec.GetDimNames()) == 0 {
				continue
			}
			what := fmt.Sprintf("%s[%s]", group.kind, pyRepr(spec.GetName()))
			if _, err := checkShape(spec.GetShape(), what, source, spec.GetDimNames(), true); err != nil {
				return err
			}
			for _, n := range spec.GetDimNames() {
				if n != "" && !declared[n] {
					return errorf(fmt.Sprintf("%s: %s names dimension %s, which manifest.dimensions does not declare",
						source, what, pyRepr(n)))
				}
			}
		}
	}
	inputs := map[string]bool{}
	for _, in := range m.GetInputs() {
		inputs[in.GetName()] = true
	}
	for _, pad := range m.GetPadding() {
		if !declared[pad.GetDim()] || !inputs[pad.GetMaskInput()] {
			return errorf(fmt.Sprintf("%s: padding entry %s=%s names an undeclared dimension or an input the model "+
				"does not have", source, pad.GetDim(), pad.GetMaskInput()))
		}
	}
	if len(declared) == 0 {
		for _, p := range m.GetPrograms() {
			if p.GetPolymorphic() {
				return errorf(source + ": a polymorphic program but no manifest.dimensions")
			}
		}
	}
	return nil
}

// TensorstoreSpec is the part of Argument.tensorstoreSpecJson that locates a parameter's
// array: a zarr3 array on a `file` kvstore at a path relative to the artifact.
type TensorstoreSpec struct {
	Driver  string `json:"driver"`
	Kvstore struct {
		Driver string `json:"driver"`
		Path   string `json:"path"`
	} `json:"kvstore"`
}

// WeightsDir is the parameter's array directory relative to the artifact (the kvstore path
// without its trailing slash), checked as check_paths checks it.
func WeightsDir(arg *jaxportv1.Argument) (string, error) {
	what := "parameter '" + arg.GetName() + "'"
	var spec any
	if err := json.Unmarshal([]byte(arg.GetTensorstoreSpecJson()), &spec); err != nil {
		return "", errorf(fmt.Sprintf("%s: tensorstore_spec_json is not JSON: %v", what, err))
	}
	obj, _ := spec.(map[string]any)
	kv, _ := obj["kvstore"].(map[string]any)
	path, isString := kv["path"].(string)
	if kv == nil || kv["driver"] != "file" || !isString {
		var shown any = obj["kvstore"]
		return "", errorf(fmt.Sprintf("%s: weights must come from a local 'file' kvstore, got %s", what, pyValue(shown)))
	}
	return strings.TrimRight(path, "/"), nil
}

// checkPaths: every path the manifest names leads inside the store (on disk: symlinks
// followed; by URL: below its URL), and every program and labels file carries a checksum (the
// Python manifest.check_paths).
func checkPaths(s Store, m *jaxportv1.Manifest) error {
	listed := map[string]bool{}
	for _, f := range m.GetFiles() {
		if err := s.Resolve(f.GetPath(), "files["+pyRepr(f.GetPath())+"]"); err != nil {
			return err
		}
		listed[f.GetPath()] = true
	}
	for _, p := range m.GetPrograms() {
		for _, file := range []struct{ what, rel string }{{"mlirbc_file", p.GetMlirbcFile()}, {"jaxexport_file", p.GetJaxexportFile()}} {
			if err := s.Resolve(file.rel, file.what); err != nil {
				return err
			}
			if !listed[file.rel] {
				return errorf(fmt.Sprintf("%s %s has no checksum in manifest.files; refused", file.what, pyRepr(file.rel)))
			}
		}
		for _, arg := range p.GetArguments() {
			if arg.GetRole() != roleParam {
				continue
			}
			dir, err := WeightsDir(arg)
			if err != nil {
				return err
			}
			if err := s.Resolve(dir, "parameter '"+arg.GetName()+"'"); err != nil {
				return err
			}
		}
	}
	for _, out := range m.GetOutputs() {
		if rel := out.GetLabelsFile(); rel != "" {
			what := "outputs[" + pyRepr(out.GetName()) + "].labels_file"
			if err := s.Resolve(rel, what); err != nil {
				return err
			}
			if !listed[rel] {
				return errorf(fmt.Sprintf("%s %s has no checksum in manifest.files; refused", what, pyRepr(rel)))
			}
		}
	}
	return nil
}

// pyValue is a decoded JSON value as Python's repr shows it (dict keys sorted: Go keeps no
// order).
func pyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyRepr(x)
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case json.Number:
		return x.String()
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + pyValue(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}
