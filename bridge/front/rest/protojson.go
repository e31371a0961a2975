package rest

// The REST codec, every other answer: a response message (metadata, config, statistics,
// repository index, shared-memory status) as JSON with Triton's field names and numbers.

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// protoJSON writes any response message as JSON with the proto field names (Triton's REST
// field names for metadata, config and statistics): every scalar, list and map field (zero
// values included, as Triton's JSON does), set message fields, the set member of a oneof;
// 64-bit integers as JSON numbers (Triton writes numbers where protojson writes strings);
// enums by name.
func protoJSON(m protoreflect.Message) *jsonObject {
	o := newObject()
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if (fd.ContainingOneof() != nil || fd.Message() != nil && !fd.IsList() && !fd.IsMap()) && !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			a := make([]any, 0, l.Len())
			for j := 0; j < l.Len(); j++ {
				a = append(a, protoValueJSON(fd, l.Get(j)))
			}
			o.set(string(fd.Name()), a)
		case fd.IsMap():
			mo := newObject()
			var keys []string
			vals := map[string]protoreflect.Value{}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				keys = append(keys, k.String())
				vals[k.String()] = mv
				return true
			})
			sortStrings(keys)
			for _, k := range keys {
				mo.set(k, protoValueJSON(fd.MapValue(), vals[k]))
			}
			o.set(string(fd.Name()), mo)
		default:
			o.set(string(fd.Name()), protoValueJSON(fd, v))
		}
	}
	return o
}

func protoValueJSON(fd protoreflect.FieldDescriptor, v protoreflect.Value) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return protoJSON(v.Message())
	case protoreflect.BoolKind:
		return v.Bool()
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.BytesKind:
		if utf8.Valid(v.Bytes()) {
			return string(v.Bytes())
		}
		return fmt.Sprintf("%x", v.Bytes())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return int64(v.Enum())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return v.Float()
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return v.Uint()
	default:
		return v.Int()
	}
}
