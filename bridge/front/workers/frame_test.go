package workers

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func TestHeaderRoundTripAndReservedByte(t *testing.T) {
	h := header{length: 7, ftype: frameExecute, code: 9, id: 1 << 40, aux: -1}
	var b [headerSize]byte
	h.encode(b[:])
	got, err := readHeader(bytes.NewReader(b[:]), make([]byte, headerSize))
	if err != nil || got != h {
		t.Fatalf("readHeader = %+v, %v; want %+v", got, err, h)
	}
	b[5] = 1
	if _, err := readHeader(bytes.NewReader(b[:]), make([]byte, headerSize)); err != errReserved {
		t.Fatalf("non-zero reserved byte: err = %v, want errReserved", err)
	}
}

func TestTensorBlockRoundTripAligned(t *testing.T) {
	in := []Tensor{
		{Datatype: "FP32", Shape: []int64{2, 3}, Data: bytes.Repeat([]byte{1}, 24)},
		{Datatype: "BOOL", Shape: []int64{}, Data: []byte{1}},
		{Datatype: "INT64", Shape: []int64{0, 4}, Data: nil},
		{Datatype: "BF16", Shape: []int64{5}, Data: bytes.Repeat([]byte{2}, 10)},
	}
	prefix := []byte{9, 9, 9, 9, 8, 8, 8, 8}
	parts, size, err := encodeBlock(prefix, in)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Join(parts, nil)
	if len(payload) != size {
		t.Fatalf("size %d, parts hold %d", size, len(payload))
	}
	if !bytes.Equal(payload[:8], prefix) {
		t.Fatalf("prefix lost: %v", payload[:8])
	}
	out, err := decodeBlock(payload, len(prefix))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d tensors back, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].Datatype != in[i].Datatype || !equalShape(out[i].Shape, in[i].Shape) || !bytes.Equal(out[i].Data, in[i].Data) {
			t.Errorf("tensor %d: got %+v, want %+v", i, out[i], in[i])
		}
		// Data offsets are multiples of 64 from the payload's start (docs/frames.md).
		d := payload[len(prefix)+blockSize:]
		at := 0
		for j := 0; j < i; j++ {
			at += descriptorSize + 8*len(in[j].Shape)
		}
		if off := binary.LittleEndian.Uint64(d[at+16:]); off%align != 0 {
			t.Errorf("tensor %d at offset %d, not a multiple of %d", i, off, align)
		}
	}
}

func TestTensorBlockMalformed(t *testing.T) {
	parts, _, err := encodeBlock(nil, []Tensor{{Datatype: "FP32", Shape: []int64{2}, Data: make([]byte, 8)}})
	if err != nil {
		t.Fatal(err)
	}
	good := bytes.Join(parts, nil)
	for name, c := range map[string]struct {
		payload []byte
		want    string
	}{
		"empty":           {nil, "tensor block truncated"},
		"many tensors":    {binary.LittleEndian.AppendUint32(nil, 1<<30), "truncated"},
		"data beyond end": {good[:len(good)-60], "beyond the payload"},
	} {
		if _, err := decodeBlock(c.payload, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to say %q", name, err, c.want)
		}
	}
	if _, _, err := encodeBlock(nil, []Tensor{{Datatype: "NOTADTYPE", Data: nil}}); err == nil {
		t.Error("a datatype longer than 8 bytes was encoded")
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
