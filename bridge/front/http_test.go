package main

// Unit tests of the REST server's routing and flags (http.go). The codec's tests are
// rest_*_test.go; the live REST tests, against a real front and workers, are
// tests/front/test_rest.py.

import (
	"strings"
	"testing"
)

func TestParseRoute(t *testing.T) {
	for path, want := range map[string]route{
		"/v2":                                {rpc: "ServerMetadata", method: "GET"},
		"/v2/":                               {rpc: "ServerMetadata", method: "GET"},
		"/v2/health/live":                    {rpc: "ServerLive", method: "GET"},
		"/v2/health/ready":                   {rpc: "ServerReady", method: "GET"},
		"/v2/models/stats":                   {rpc: "ModelStatistics", method: "GET"},
		"/v2/models/a":                       {rpc: "ModelMetadata", method: "GET", model: "a"},
		"/v2/models/a/versions/3":            {rpc: "ModelMetadata", method: "GET", model: "a", version: "3"},
		"/v2/models/a/ready":                 {rpc: "ModelReady", method: "GET", model: "a"},
		"/v2/models/a/versions/3/ready":      {rpc: "ModelReady", method: "GET", model: "a", version: "3"},
		"/v2/models/a%2Fb/infer":             {rpc: "ModelInfer", method: "POST", model: "a/b"},
		"/v2/models/a/versions/1/infer":      {rpc: "ModelInfer", method: "POST", model: "a", version: "1"},
		"/v2/models/a/config":                {rpc: "ModelConfig", method: "GET", model: "a"},
		"/v2/models/a/versions/1/stats":      {rpc: "ModelStatistics", method: "GET", model: "a", version: "1"},
		"/v2/models/a%20b/versions/x%2Fy":    {rpc: "ModelMetadata", method: "GET", model: "a b", version: "x/y"},
		"/v2/repository/index":               {rpc: "RepositoryIndex", method: "POST"},
		"/v2/repository/models/a/load":       {rpc: "RepositoryModelLoad", method: "POST", model: "a"},
		"/v2/repository/models/a%2Fb/unload": {rpc: "RepositoryModelUnload", method: "POST", model: "a/b"},
	} {
		got, err := parseRoute("GET", path)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", path, got, err, want)
		}
	}
	for _, path := range []string{"/", "/v1/models/a", "/v2/models", "/v2/models/", "/v2/models/a/explain",
		"/v2/models/a/versions", "/v2/health", "/v2/models/a/ready/x", "/v2/models/%zz",
		"/v2/repository/models/a", "/v2/repository/models/a/delete", "/v2/repository/models//load"} {
		if _, err := parseRoute("GET", path); err == nil {
			t.Errorf("%s: routed", path)
		}
	}
}

func TestHTTPPortFlag(t *testing.T) {
	for args, want := range map[string]int{
		"--repository r":                        defaultHTTPPort,
		"--repository r --port 0":               0,
		"--repository r --port 0 --http-port 9": 9,
		"--repository r --http-port -1":         -1,
	} {
		f, err := parseArgs(strings.Fields(args))
		if err != nil || f.httpPort != want {
			t.Errorf("%s: http port %v %v, want %d", args, f, err, want)
		}
		for _, a := range f.workerArgs {
			if a == "--http-port" {
				t.Errorf("%s: --http-port forwarded to the workers", args)
			}
		}
	}
	t.Setenv("JAXPORT_HTTP_PORT", "8500")
	if f, err := parseArgs([]string{"--port", "0"}); err != nil || f.httpPort != 8500 {
		t.Errorf("environment: %v %v", f, err)
	}
	if _, err := parseArgs([]string{"--http-port", "-2"}); err == nil || err.Error() != "--http-port must be in -1..65535, got -2" {
		t.Errorf("range: %v", err)
	}
}
