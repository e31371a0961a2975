package rest

// Unit tests of the REST server's routes (http.go). The codec's tests are
// rest_*_test.go; the live REST tests, against a real front and workers, are
// tests/front/test_rest.py.

import (
	"testing"
)

func TestParseRoute(t *testing.T) {
	for path, want := range map[string]route{
		"/v2":                                         {rpc: "ServerMetadata", method: "GET"},
		"/v2/":                                        {rpc: "ServerMetadata", method: "GET"},
		"/v2/health/live":                             {rpc: "ServerLive", method: "GET"},
		"/v2/health/ready":                            {rpc: "ServerReady", method: "GET"},
		"/v2/models/stats":                            {rpc: "ModelStatistics", method: "GET"},
		"/v2/models/a":                                {rpc: "ModelMetadata", method: "GET", model: "a"},
		"/v2/models/a/versions/3":                     {rpc: "ModelMetadata", method: "GET", model: "a", version: "3"},
		"/v2/models/a/ready":                          {rpc: "ModelReady", method: "GET", model: "a"},
		"/v2/models/a/versions/3/ready":               {rpc: "ModelReady", method: "GET", model: "a", version: "3"},
		"/v2/models/a%2Fb/infer":                      {rpc: "ModelInfer", method: "POST", model: "a/b"},
		"/v2/models/a/versions/1/infer":               {rpc: "ModelInfer", method: "POST", model: "a", version: "1"},
		"/v2/models/a/config":                         {rpc: "ModelConfig", method: "GET", model: "a"},
		"/v2/models/a/versions/1/stats":               {rpc: "ModelStatistics", method: "GET", model: "a", version: "1"},
		"/v2/models/a%20b/versions/x%2Fy":             {rpc: "ModelMetadata", method: "GET", model: "a b", version: "x/y"},
		"/v2/repository/index":                        {rpc: "RepositoryIndex", method: "POST"},
		"/v2/repository/models/a/load":                {rpc: "RepositoryModelLoad", method: "POST", model: "a"},
		"/v2/repository/models/a%2Fb/unload":          {rpc: "RepositoryModelUnload", method: "POST", model: "a/b"},
		"/v2/systemsharedmemory/status":               {rpc: "SystemSharedMemoryStatus", method: "GET"},
		"/v2/systemsharedmemory/unregister":           {rpc: "SystemSharedMemoryUnregister", method: "POST"},
		"/v2/systemsharedmemory/region/r%2F1/status":  {rpc: "SystemSharedMemoryStatus", method: "GET", model: "r/1"},
		"/v2/systemsharedmemory/region/in/register":   {rpc: "SystemSharedMemoryRegister", method: "POST", model: "in"},
		"/v2/systemsharedmemory/region/in/unregister": {rpc: "SystemSharedMemoryUnregister", method: "POST", model: "in"},
	} {
		got, err := parseRoute("GET", path)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", path, got, err, want)
		}
	}
	for _, path := range []string{"/", "/v1/models/a", "/v2/models", "/v2/models/", "/v2/models/a/explain",
		"/v2/models/a/versions", "/v2/health", "/v2/models/a/ready/x", "/v2/models/%zz",
		"/v2/repository/models/a", "/v2/repository/models/a/delete", "/v2/repository/models//load",
		"/v2/systemsharedmemory", "/v2/systemsharedmemory/region/in", "/v2/systemsharedmemory/region//status",
		"/v2/systemsharedmemory/region/in/delete", "/v2/systemsharedmemory/regions/in/status", "/v2/systemsharedmemoryx/status",
		"/v2/cudasharedmemory", "/v2/cudasharedmemory/region/g"} {
		if _, err := parseRoute("GET", path); err == nil {
			t.Errorf("%s: routed", path)
		}
	}
}
