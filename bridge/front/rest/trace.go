package rest

// Triton's trace extension over REST: GET/POST /v2[/models/NAME]/trace/setting.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// traceSetting answers GET/POST /v2[/models/NAME]/trace/setting: a JSON object of the
// settings, single values as strings and trace_level as an array (Triton's shapes); POST's
// body is such an object of the settings to change (a value: string, array of strings, or
// null to clear).
func (r *Server) traceSetting(w http.ResponseWriter, req *http.Request) {
	update := map[string][]string{}
	if req.Method == http.MethodPost {
		body, err := io.ReadAll(io.LimitReader(req.Body, int64(r.maxBytes)+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("cannot read the request body: %v", err))
			return
		}
		var raw map[string]any
		if err := json.Unmarshal(body, &raw); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("trace setting body: expected a JSON object, %v", err))
			return
		}
		for name, v := range raw {
			values, ok := settingValues(v)
			if !ok {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("trace setting '%s': expected a string, an array "+
					"of strings or null, got %s", name, mustJSON(v)))
				return
			}
			update[name] = values
		}
	}
	settings, err := r.svc.Tracing().Update(update)
	if err != nil {
		writeFailure(w, err)
		return
	}
	out := map[string]any{}
	for name, values := range settings {
		if name == "trace_level" {
			out[name] = values
		} else {
			out[name] = values[0]
		}
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// settingValues reads one REST setting value: "x" -> [x], ["x", ...] -> [x ...], null -> [].
func settingValues(v any) ([]string, bool) {
	switch v := v.(type) {
	case nil:
		return nil, true
	case string:
		return []string{v}, true
	case []any:
		out := make([]string, len(v))
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out[i] = s
		}
		return out, true
	}
	return nil, false
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// traceSettingRoute: the path is /v2/trace/setting or /v2/models/NAME/trace/setting (GET
// reads, POST updates).
func traceSettingRoute(method, p string) (route, bool) {
	rest, ok := strings.CutSuffix(p, "/trace/setting")
	if !ok {
		return route{}, false
	}
	if rest != "/v2" {
		name, isModel := strings.CutPrefix(rest, "/v2/models/")
		if !isModel || name == "" || strings.Contains(name, "/") {
			return route{}, false
		}
	}
	allowed := http.MethodGet
	if method == http.MethodPost {
		allowed = http.MethodPost
	}
	return route{rpc: "TraceSetting", method: allowed}, true
}
