// Package request is the front's one reading of an inference request and its one writing of
// the answer, for every model whichever engine executes it:
//
//   - Parse reads a serialized ModelInferRequest ONCE at the edge into a Request: the model
//     name and version, the tensors' headers, and raw_input_contents as views into the
//     received buffer (no copy); REST decodes its JSON straight into the same Request.
//   - Signature (built once per model version at load from its manifest) validates a Request
//     (Prepare): names, datatypes, shapes, contents, symbolic dimensions and their rules, the
//     batch rows, the program (exported batch size, or the bucket the request fits, padded
//     under the model's --pad rule), requested outputs, classification, shared-memory
//     references (resolved through a SharedMemory), with the status codes and texts the
//     bridge has always given.
//   - Signature.Response builds the answer from the outputs an engine returned (cut back along
//     padded dimensions, rows of a padded batch dropped, top-k classification, shared-memory
//     outputs written into their regions); Response.Marshal writes it as protobuf with the
//     output bytes referenced, not copied.
package request

import (
	"unicode/utf8"

	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Params are a request's, tensor's or output's parameters (InferParameter by name).
type Params = map[string]*inferencepb.InferParameter

// Request is one ModelInferRequest as received: read once, passed on, never re-parsed.
type Request struct {
	Model   string
	Version string // "" = the model's highest ready version
	ID      string
	Params  Params
	Inputs  []Input
	Outputs []Output // requested outputs; none = every output
	// Raw is raw_input_contents: views into the received message when it was parsed from one
	// contiguous buffer (the caller keeps that buffer until the response is sent).
	Raw [][]byte
}

// Input is one input tensor's header and typed contents (raw bytes are Request.Raw).
type Input struct {
	Name     string
	Datatype string
	Shape    []int64
	Params   Params
	Contents *inferencepb.InferTensorContents // nil: no typed contents
}

// Output is one requested output.
type Output struct {
	Name   string
	Params Params
}

// ErrDeserialize is the status of a message that is no valid ModelInferRequest (bad wire
// format, a string that is not UTF-8): grpcio's wording, which callers and the fuzz campaign
// know.
var ErrDeserialize = status.New(codes.Internal, DeserializeFailed)

// DeserializeFailed is grpc's text for a request that does not parse.
const DeserializeFailed = "Exception deserializing request!"

// Parse reads a serialized ModelInferRequest. Raw contents alias b.
func Parse(b []byte) (*Request, error) {
	r := &Request{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, ErrDeserialize
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, ErrDeserialize
		}
		b = b[n:]
		if typ != protowire.BytesType {
			continue // no field of this message has another wire type: unknown, skipped
		}
		var err error
		switch num {
		case 1:
			r.Model, err = str(v)
		case 2:
			r.Version, err = str(v)
		case 3:
			r.ID, err = str(v)
		case 4:
			r.Params, err = mapEntry(r.Params, v)
		case 5:
			var in Input
			if in, err = parseInput(v); err == nil {
				r.Inputs = append(r.Inputs, in)
			}
		case 6:
			var out Output
			if out, err = parseOutput(v); err == nil {
				r.Outputs = append(r.Outputs, out)
			}
		case 7:
			if v == nil {
				v = []byte{}
			}
			r.Raw = append(r.Raw, v)
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// str is a proto3 string field: UTF-8 or the message does not parse (as every protobuf
// runtime has it).
func str(v []byte) (string, error) {
	if !utf8.Valid(v) {
		return "", ErrDeserialize
	}
	return string(v), nil
}

func parseInput(b []byte) (Input, error) {
	var in Input
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return in, ErrDeserialize
		}
		b = b[n:]
		if num == 3 && typ == protowire.VarintType { // shape, unpacked
			d, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return in, ErrDeserialize
			}
			in.Shape = append(in.Shape, int64(d))
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return in, ErrDeserialize
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return in, ErrDeserialize
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			in.Name, err = str(v)
		case 2:
			in.Datatype, err = str(v)
		case 3: // shape, packed
			if in.Shape == nil {
				in.Shape = make([]int64, 0, len(v))
			}
			for len(v) > 0 {
				d, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return in, ErrDeserialize
				}
				in.Shape = append(in.Shape, int64(d))
				v = v[n:]
			}
		case 4:
			in.Params, err = mapEntry(in.Params, v)
		case 5:
			if in.Contents == nil {
				in.Contents = &inferencepb.InferTensorContents{}
			}
			// merged, as a repeated occurrence of a message field is
			err = proto.UnmarshalOptions{Merge: true}.Unmarshal(v, in.Contents)
			if err != nil {
				err = ErrDeserialize
			}
		}
		if err != nil {
			return in, err
		}
	}
	return in, nil
}

func parseOutput(b []byte) (Output, error) {
	var out Output
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return out, ErrDeserialize
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return out, ErrDeserialize
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return out, ErrDeserialize
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			out.Name, err = str(v)
		case 2:
			out.Params, err = mapEntry(out.Params, v)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// mapEntry adds one map<string, InferParameter> entry (a later key replaces an earlier one).
func mapEntry(m Params, b []byte) (Params, error) {
	var key string
	value := &inferencepb.InferParameter{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return m, ErrDeserialize
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return m, ErrDeserialize
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return m, ErrDeserialize
		}
		b = b[n:]
		var err error
		switch num {
		case 1:
			key, err = str(v)
		case 2:
			if err = (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, value); err != nil {
				err = ErrDeserialize
			}
		}
		if err != nil {
			return m, err
		}
	}
	if m == nil {
		m = Params{}
	}
	m[key] = value
	return m, nil
}

// FromProto is a Request holding req's fields (tests, and callers that already have the
// message); Raw aliases req's raw contents.
func FromProto(req *inferencepb.ModelInferRequest) *Request {
	r := &Request{Model: req.GetModelName(), Version: req.GetModelVersion(), ID: req.GetId(),
		Params: req.GetParameters(), Raw: req.GetRawInputContents()}
	for _, t := range req.GetInputs() {
		r.Inputs = append(r.Inputs, Input{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape(),
			Params: t.GetParameters(), Contents: t.GetContents()})
	}
	for _, o := range req.GetOutputs() {
		r.Outputs = append(r.Outputs, Output{Name: o.GetName(), Params: o.GetParameters()})
	}
	for i, raw := range r.Raw {
		if raw == nil {
			r.Raw[i] = []byte{}
		}
	}
	return r
}
