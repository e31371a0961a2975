package rest

// Unit test of the REST repository bodies (rest_repository.go).

import (
	"bytes"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
)

func TestDecodeRepositoryRequests(t *testing.T) {
	in, err := decodeRepositoryRequest("RepositoryIndex", "", []byte(`{"ready": true}`))
	if err != nil || !in.(*inferencepb.RepositoryIndexRequest).Ready {
		t.Fatalf("index: %v %v", in, err)
	}
	in, err = decodeRepositoryRequest("RepositoryIndex", "", nil)
	if err != nil || in.(*inferencepb.RepositoryIndexRequest).Ready {
		t.Fatalf("index without a body: %v %v", in, err)
	}
	in, err = decodeRepositoryRequest("RepositoryModelLoad", "m", []byte(
		`{"parameters": {"config": "{}", "n": 3, "b": true, "file:1/model.bin": "AAE="}}`))
	if err != nil {
		t.Fatal(err)
	}
	load := in.(*inferencepb.RepositoryModelLoadRequest)
	p := load.Parameters
	if load.ModelName != "m" || p["config"].GetStringParam() != "{}" || p["n"].GetInt64Param() != 3 ||
		!p["b"].GetBoolParam() || !bytes.Equal(p["file:1/model.bin"].GetBytesParam(), []byte{0, 1}) {
		t.Fatalf("load %v", load)
	}
	in, err = decodeRepositoryRequest("RepositoryModelUnload", "m", []byte(`{"parameters": {"unload_dependents": false}}`))
	if err != nil || in.(*inferencepb.RepositoryModelUnloadRequest).ModelName != "m" {
		t.Fatalf("unload %v %v", in, err)
	}
	for body, msg := range map[string]string{
		`{"ready": 1}`:                     "request.ready: expected true or false, got 1",
		`{"parameters": {"x": [1]}}`:       "parameters.x: a parameter must be a boolean, integer or string, got an array",
		`{"parameters": {"x": 1.5}}`:       "parameters.x: expected an integer, got 1.5",
		`{"parameters": {"file:a": "%%"}}`: "parameters.file:a: a file: parameter is base64 content",
		`[`:                                "request body: invalid JSON at byte 1: unexpected end of input",
		`{"parameters": "x"}`:              `parameters: expected a JSON object, got "x"`,
	} {
		rpc := "RepositoryModelLoad"
		if strings.Contains(body, "ready") {
			rpc = "RepositoryIndex"
		}
		_, err := decodeRepositoryRequest(rpc, "m", []byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), msg) || err.(*status.HTTPError).Status != 400 {
			t.Errorf("%s: got %v, want %q", body, err, msg)
		}
	}
}
