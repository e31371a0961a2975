package rest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/server"
	"github.com/jaxport/jaxport/bridge/front/telemetry"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestTraceSettingRoute(t *testing.T) {
	for path, method := range map[string]string{"/v2/trace/setting": "GET", "/v2/trace/setting/": "POST",
		"/v2/models/m/trace/setting": "POST"} {
		got, err := parseRoute(method, path)
		if err != nil || got != (route{rpc: "TraceSetting", method: method}) {
			t.Errorf("%s %s: %+v %v", method, path, got, err)
		}
	}
	if got, _ := parseRoute("PUT", "/v2/trace/setting"); got.method != "GET" {
		t.Errorf("PUT allowed: %+v", got)
	}
	for _, path := range []string{"/v2/models//trace/setting", "/v2/models/a/b/trace/setting", "/v3/trace/setting",
		"/v2/trace/settings"} {
		if got, err := parseRoute("GET", path); err == nil && got.rpc == "TraceSetting" {
			t.Errorf("%s routed to %+v", path, got)
		}
	}
}

func TestTraceSettingREST(t *testing.T) {
	on, err := telemetry.Start("127.0.0.1:4317", tracetest.NewSpanRecorder())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(on.Flush)
	r := &Server{svc: server.New(server.Options{Tracing: on}), maxBytes: 1 << 20}
	call := func(method, body string) (int, map[string]any) {
		var req *http.Request
		if body == "" {
			req = httptest.NewRequest(method, "/v2/trace/setting", nil)
		} else {
			req = httptest.NewRequest(method, "/v2/trace/setting", strings.NewReader(body))
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %q: %v: %s", method, body, err, w.Body.String())
		}
		return w.Code, out
	}
	code, got := call("GET", "")
	if code != 200 || got["trace_rate"] != "1" || got["trace_count"] != "-1" || got["url"] != "127.0.0.1:4317" {
		t.Fatalf("GET: %d %v", code, got)
	}
	if lv, ok := got["trace_level"].([]any); !ok || len(lv) != 1 || lv[0] != "TIMESTAMPS" {
		t.Fatalf("trace_level %v", got["trace_level"])
	}
	if code, got := call("POST", `{"trace_level": ["TIMESTAMPS"], "trace_rate": null}`); code != 200 || got["trace_rate"] != "1" {
		t.Fatalf("restating: %d %v", code, got)
	}
	for body, msg := range map[string]string{
		`{"trace_rate": "5"}`: `trace setting 'trace_rate' cannot be changed to ["5"]`,
		`{"trace_rate": 5}`:   `trace setting 'trace_rate': expected a string, an array of strings or null, got 5`,
		`{"x": ["a"]}`:        `unknown trace setting 'x'`,
		`[1]`:                 `trace setting body: expected a JSON object`,
	} {
		code, got := call("POST", body)
		if code != 400 || !strings.Contains(got["error"].(string), msg) {
			t.Errorf("%s: %d %v", body, code, got)
		}
	}
}
