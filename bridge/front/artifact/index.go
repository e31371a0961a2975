package artifact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// IndexFile lists what a repository (or one model directory) holds, for stores that cannot
// list directories (a repository by URL). Written by `python -m jaxport.artifact.index REPO`:
//
//	{"jaxport_index": 1, "models": {"mlp": [1, 2], "ranker": [3]}}    # REPO/index.json
//	{"jaxport_index": 1, "versions": [1, 2]}                          # MODEL/index.json
const IndexFile = "index.json"

// IndexVersion is the index format this reader reads.
const IndexVersion = 1

// Index is a read index.json: a repository's models (Models non-nil) or a model directory's
// versions. Version lists are ascending, without duplicates. What a valid model name or
// version is, is the repository's rule, applied to what the index lists.
type Index struct {
	Models   map[string][]uint64
	Versions []uint64
}

// ReadIndex reads store's index.json: nil, nil when it has none. Errors name the file and what
// is wrong (jaxport.artifact.index.read's messages).
func ReadIndex(ctx context.Context, s Store) (*Index, error) {
	source := s.Display(IndexFile)
	data, err := ReadFile(ctx, s, IndexFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, errorf(fmt.Sprintf("%s is not JSON: %v", source, err))
	}
	if dec.More() {
		return nil, errorf(source + " is not JSON: extra data after the object")
	}
	obj, ok := raw.(map[string]any)
	if n, isNumber := obj["jaxport_index"].(json.Number); !ok || !isNumber || !numberIs(n, IndexVersion) {
		return nil, errorf(fmt.Sprintf("%s: expected an object with \"jaxport_index\": %d (write it with python -m "+
			"jaxport.artifact.index)", source, IndexVersion))
	}
	versions := func(value any, what string) ([]uint64, error) {
		list, ok := value.([]any)
		out := make([]uint64, 0, len(list))
		for _, v := range list {
			n, isNumber := v.(json.Number)
			u, err := strconv.ParseUint(string(n), 10, 64)
			if isNumber && errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(string(n), "-") {
				continue // a positive integer above any version the repository serves (10**19)
			}
			if !isNumber || err != nil || u == 0 {
				ok = false
				break
			}
			out = append(out, u)
		}
		if !ok {
			shown := pyJSON(value)
			if len(shown) > 80 {
				shown = shown[:80]
			}
			return nil, errorf(fmt.Sprintf("%s: %s must be a list of positive integers, got %s", source, what, shown))
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	_, hasVersions := obj["versions"]
	models, hasModels := obj["models"]
	if hasVersions && !hasModels {
		v, err := versions(obj["versions"], "versions")
		if err != nil {
			return nil, err
		}
		return &Index{Versions: v}, nil
	}
	byName, ok := models.(map[string]any)
	if !ok || hasVersions {
		return nil, errorf(source + ": needs either \"models\" (a repository) or \"versions\" (a model directory)")
	}
	idx := &Index{Models: map[string][]uint64{}}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := versions(byName[name], "models["+pyRepr(name)+"]")
		if err != nil {
			return nil, err
		}
		idx.Models[name] = v
	}
	return idx, nil
}

// numberIs: a JSON number equal to n (1 and 1.0 alike, as Python's == compares them).
func numberIs(num json.Number, n int64) bool {
	f, err := num.Float64()
	return err == nil && f == float64(n)
}

// pyJSON is a decoded JSON value as Python's json.dumps writes it (", " and ": ").
func pyJSON(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return x.String()
	case string:
		b, _ := json.Marshal(x)
		return string(b)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyJSON(e)
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
			parts[i] = pyJSON(k) + ": " + pyJSON(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

func jsonUnmarshal(text string, v any) error { return json.Unmarshal([]byte(text), v) }
