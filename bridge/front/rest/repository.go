package rest

// The REST codec, repository requests: the optional JSON body of Triton's repository
// endpoints (index, load, unload) -> their protobuf requests.

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/proto"
)

// decodeRepositoryRequest translates the (optional) JSON body of Triton's repository endpoints:
// index {"ready": bool}; load/unload {"parameters": {key: bool | integer | string}}, a "file:"
// key's string being base64 content (Triton's rule), sent as bytes.
func decodeRepositoryRequest(rpc, model string, body []byte) (proto.Message, error) {
	top := newObject()
	if len(strings.TrimSpace(string(body))) > 0 {
		doc, err := parseJSON(body)
		if err != nil {
			return nil, status.BadRequest("request body: %v", err)
		}
		if top, err = asObject(doc, "request body"); err != nil {
			return nil, err
		}
	}
	if rpc == "RepositoryIndex" {
		ready, _, err := boolParam(top, "ready", "request")
		if err != nil {
			return nil, err
		}
		return &inferencepb.RepositoryIndexRequest{Ready: ready}, nil
	}
	params := map[string]*inferencepb.ModelRepositoryParameter{}
	if v, ok := top.get("parameters"); ok {
		o, err := asObject(v, "parameters")
		if err != nil {
			return nil, err
		}
		for _, k := range o.keys {
			path := "parameters." + k
			switch x := o.values[k].(type) {
			case bool:
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_BoolParam{BoolParam: x}}
			case jsonNumber:
				n, err := strconv.ParseInt(string(x), 10, 64)
				if err != nil {
					return nil, status.BadRequest("%s: expected an integer, got %s", path, string(x))
				}
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_Int64Param{Int64Param: n}}
			case string:
				if strings.HasPrefix(k, "file:") {
					b, err := base64.StdEncoding.DecodeString(x)
					if err != nil {
						return nil, status.BadRequest("%s: a file: parameter is base64 content: %v", path, err)
					}
					params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_BytesParam{BytesParam: b}}
					continue
				}
				params[k] = &inferencepb.ModelRepositoryParameter{ParameterChoice: &inferencepb.ModelRepositoryParameter_StringParam{StringParam: x}}
			default:
				return nil, status.BadRequest("%s: a parameter must be a boolean, integer or string, got %s", path, describe(x))
			}
		}
	}
	if len(params) == 0 {
		params = nil
	}
	if rpc == "RepositoryModelLoad" {
		return &inferencepb.RepositoryModelLoadRequest{ModelName: model, Parameters: params}, nil
	}
	return &inferencepb.RepositoryModelUnloadRequest{ModelName: model, Parameters: params}, nil
}
