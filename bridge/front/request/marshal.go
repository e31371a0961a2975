package request

import (
	"slices"

	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Marshal writes r as a serialized ModelInferResponse in pieces whose concatenation is the
// message: protobuf's field order, map keys sorted (deterministic, as Python's
// SerializeToString(deterministic=True)), each output's bytes its own piece (referenced, not
// copied), so a transport can send them as they are.
func (r *Response) Marshal() [][]byte {
	head := make([]byte, 0, 128)
	head = appendString(head, 1, r.Model)
	head = appendString(head, 2, r.Version)
	head = appendString(head, 3, r.ID)
	head = appendParams(head, 4, r.Params)
	for _, t := range r.Outputs {
		var o []byte
		o = appendString(o, 1, t.Name)
		o = appendString(o, 2, t.Datatype)
		if len(t.Shape) > 0 {
			var packed []byte
			for _, d := range t.Shape {
				packed = protowire.AppendVarint(packed, uint64(d))
			}
			o = protowire.AppendTag(o, 3, protowire.BytesType)
			o = protowire.AppendBytes(o, packed)
		}
		o = appendParams(o, 4, t.Params)
		head = protowire.AppendTag(head, 5, protowire.BytesType)
		head = protowire.AppendBytes(head, o)
	}
	pieces := [][]byte{head}
	for _, t := range r.Outputs {
		last := pieces[len(pieces)-1]
		last = protowire.AppendTag(last, 6, protowire.BytesType)
		last = protowire.AppendVarint(last, uint64(len(t.Data)))
		pieces[len(pieces)-1] = last
		if len(t.Data) > 0 {
			pieces = append(pieces, t.Data, nil)
		}
	}
	if last := pieces[len(pieces)-1]; last == nil {
		pieces = pieces[:len(pieces)-1]
	}
	return pieces
}

// Size is the length of Marshal's pieces together.
func Size(pieces [][]byte) int {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	return n
}

// MarshalStream writes a ModelStreamInferResponse: error_message (field 1, "" when the
// request succeeded) and infer_response (field 2, the pieces of Marshal).
func MarshalStream(errorMessage string, resp *Response) [][]byte {
	inner := resp.Marshal()
	head := appendString(nil, 1, errorMessage)
	head = protowire.AppendTag(head, 2, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(Size(inner)))
	return append([][]byte{head}, inner...)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendParams(b []byte, num protowire.Number, params Params) []byte {
	if len(params) == 0 {
		return b
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		value, _ := proto.MarshalOptions{Deterministic: true}.Marshal(params[k])
		var entry []byte
		entry = appendString(entry, 1, k)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, value)
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	return b
}

var _ = inferencepb.ModelInferResponse{}
