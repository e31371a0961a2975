package rest

// Unit tests of the REST codec's JSON reader and writer (json.go).

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseJSONValues(t *testing.T) {
	v, err := parseJSON([]byte(` {"a": [1, -2.5e3, NaN, Infinity, -Infinity], "b": "x\"\u00e9\ud83d\ude00\n", "c": [true, false, null], "d": {}} `))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*jsonObject)
	if !reflect.DeepEqual(o.keys, []string{"a", "b", "c", "d"}) {
		t.Fatalf("keys %v", o.keys)
	}
	want := []any{jsonNumber("1"), jsonNumber("-2.5e3"), jsonNumber("NaN"), jsonNumber("Infinity"), jsonNumber("-Infinity")}
	if !reflect.DeepEqual(o.values["a"], want) {
		t.Fatalf("a = %#v", o.values["a"])
	}
	if o.values["b"] != "x\"é😀\n" {
		t.Fatalf("b = %q", o.values["b"])
	}
	if !reflect.DeepEqual(o.values["c"], []any{true, false, nil}) {
		t.Fatalf("c = %#v", o.values["c"])
	}
	// What is written reads back the same.
	again, err := parseJSON(appendJSONValue(nil, v))
	if err != nil || !reflect.DeepEqual(again, v) {
		t.Fatalf("round trip: %v %#v", err, again)
	}
}

func TestParseJSONErrors(t *testing.T) {
	for text, msg := range map[string]string{
		``:                         "invalid JSON at byte 0: unexpected end of input",
		`{"a": 1,}`:                "invalid JSON at byte 8: expected a string key",
		`{"a": 1} x`:               "invalid JSON at byte 9: unexpected data after the JSON value",
		`{"a": 1, "a": 2}`:         `invalid JSON at byte 9: duplicate key "a"`,
		`[01]`:                     "invalid JSON at byte 2: expected ',' or ']' in an array",
		`[1.]`:                     "invalid JSON at byte 3: invalid number: no digit after '.'",
		`["a`:                      "invalid JSON at byte 3: unterminated string",
		"[\"\x01\"]":               "invalid JSON at byte 2: control character in a string",
		`["\ud800"]`:               `invalid JSON at byte 8: unpaired UTF-16 surrogate in a \u escape`,
		`[nan]`:                    "invalid JSON at byte 1: unexpected character 'n'",
		strings.Repeat("[", 200):   "invalid JSON at byte 128: nested deeper than 128 levels",
		"[\"\xff\"]":               "invalid JSON at byte 2: string is not valid UTF-8",
		`{"a" 1}`:                  "invalid JSON at byte 5: expected ':' after an object key",
		`["\q"]`:                   `invalid JSON at byte 4: invalid escape '\q'`,
		`[1e]`:                     "invalid JSON at byte 3: invalid number: no digit in the exponent",
		`{"inputs": [1, 2}`:        "invalid JSON at byte 16: expected ',' or ']' in an array",
		`-`:                        "invalid JSON at byte 0: invalid number",
		`{"a": tru}`:               "invalid JSON at byte 6: unexpected character 't'",
		`{"a": "\u12"}`:            `invalid JSON at byte 9: invalid \u escape`,
		`{"k": [1, 2, 3]`:          "invalid JSON at byte 15: unexpected end of input in an object",
		`[1, 2`:                    "invalid JSON at byte 5: unexpected end of input in an array",
		`{"a": "b", "c": {"d": ]}`: "invalid JSON at byte 22: unexpected character ']'",
	} {
		_, err := parseJSON([]byte(text))
		if err == nil || err.Error() != msg {
			t.Errorf("%q: got %v, want %q", text, err, msg)
		}
	}
}

// FuzzParseJSON: the reader never panics, and what it reads, it writes back readably.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,-2.5e3,NaN,"\u00e9"]}`, `[[[]]]`, `"\ud83d\ude00"`, `-Infinity`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseJSON(data)
		if err != nil {
			return
		}
		again, err := parseJSON(appendJSONValue(nil, v))
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("%q: written back as %q: %v", data, appendJSONValue(nil, v), err)
		}
	})
}
