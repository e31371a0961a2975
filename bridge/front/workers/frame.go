package workers

// The frame protocol, version 2, specified once in docs/frames.md (header, frame types,
// tensor block, memfd rule, errors); this file holds the header, the types and the tensor
// block, shm.go the memfd payloads, conn.go one connection. Python side: bridge/frames.py,
// bridge/connection.py.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	protocolVersion = 2
	headerSize      = 24

	frameHello   = 1
	frameLoad    = 2
	frameExecute = 3
	frameUnload  = 4
	frameCancel  = 5
	frameReply   = 6

	noDeadline = -1
	// align: tensor data starts at a multiple of this many bytes from the payload's start.
	align = 64
	// preludeSize: EXECUTE's u32 model, u32 program before its tensor block.
	preludeSize    = 8
	blockSize      = 8  // u32 count, u32 reserved
	descriptorSize = 32 // char[8] datatype, u32 rank, u32 reserved, u64 offset, u64 nbytes
)

type header struct {
	length uint32
	ftype  uint8
	code   uint16
	id     uint64
	aux    int64
}

func (h header) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], h.length)
	b[4] = h.ftype
	b[5] = 0 // reserved
	binary.LittleEndian.PutUint16(b[6:], h.code)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.aux))
}

var errReserved = errors.New("frame with a non-zero reserved byte")

func readHeader(r io.Reader, b []byte) (header, error) {
	if _, err := io.ReadFull(r, b[:headerSize]); err != nil {
		return header{}, err
	}
	if b[5] != 0 {
		return header{}, errReserved
	}
	return header{
		length: binary.LittleEndian.Uint32(b[0:]),
		ftype:  b[4],
		code:   binary.LittleEndian.Uint16(b[6:]),
		id:     binary.LittleEndian.Uint64(b[8:]),
		aux:    int64(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}

func padding(n int) int { return (align - n%align) % align }

// zeros pads tensor data up to the next aligned offset.
var zeros [align]byte

// encodeBlock returns the tensor block of ts as parts to send back to back, for a block that
// begins `start` bytes into its payload: the descriptors (with any prefix given) in one
// slice, then each tensor's data and padding as they are (no copy).
func encodeBlock(prefix []byte, ts []Tensor) ([][]byte, int, error) {
	start := len(prefix)
	size := start + blockSize
	for _, t := range ts {
		size += descriptorSize + 8*len(t.Shape)
	}
	head := make([]byte, size, size+padding(size))
	copy(head, prefix)
	binary.LittleEndian.PutUint32(head[start:], uint32(len(ts)))
	head = append(head, zeros[:padding(size)]...)
	offset := len(head)
	parts := [][]byte{head}
	at := start + blockSize
	for i, t := range ts {
		if len(t.Datatype) == 0 || len(t.Datatype) > 8 {
			return nil, 0, fmt.Errorf("tensor %d: datatype %q", i, t.Datatype)
		}
		d := head[at:]
		copy(d[0:8], t.Datatype)
		binary.LittleEndian.PutUint32(d[8:], uint32(len(t.Shape)))
		binary.LittleEndian.PutUint64(d[16:], uint64(offset))
		binary.LittleEndian.PutUint64(d[24:], uint64(len(t.Data)))
		for k, dim := range t.Shape {
			binary.LittleEndian.PutUint64(d[descriptorSize+8*k:], uint64(dim))
		}
		at += descriptorSize + 8*len(t.Shape)
		if len(t.Data) > 0 {
			parts = append(parts, t.Data)
		}
		offset += len(t.Data)
		if p := padding(offset); p > 0 {
			parts = append(parts, zeros[:p])
			offset += p
		}
	}
	return parts, offset, nil
}

// decodeBlock reads the tensor block at `start` of payload; the tensors' Data alias payload.
func decodeBlock(payload []byte, start int) ([]Tensor, error) {
	end := uint64(len(payload))
	if uint64(start)+blockSize > end {
		return nil, errors.New("tensor block truncated")
	}
	count := binary.LittleEndian.Uint32(payload[start:])
	at := uint64(start) + blockSize
	if uint64(count)*descriptorSize > end-at {
		return nil, fmt.Errorf("tensor block of %d tensors truncated", count)
	}
	out := make([]Tensor, count)
	for i := range out {
		if at+descriptorSize > end {
			return nil, fmt.Errorf("tensor %d: descriptor truncated", i)
		}
		d := payload[at:]
		name := d[0:8]
		n := 0
		for n < 8 && name[n] != 0 {
			n++
		}
		rank := uint64(binary.LittleEndian.Uint32(d[8:]))
		offset := binary.LittleEndian.Uint64(d[16:])
		nbytes := binary.LittleEndian.Uint64(d[24:])
		at += descriptorSize
		if rank > (end-at)/8 {
			return nil, fmt.Errorf("tensor %d: shape truncated", i)
		}
		shape := make([]int64, rank)
		for k := range shape {
			shape[k] = int64(binary.LittleEndian.Uint64(payload[at+8*uint64(k):]))
		}
		at += 8 * rank
		if offset > end || nbytes > end-offset {
			return nil, fmt.Errorf("tensor %d: bytes %d..%d beyond the payload of %d", i, offset, offset+nbytes, end)
		}
		out[i] = Tensor{Datatype: string(name[:n]), Shape: shape, Data: payload[offset : offset+nbytes : offset+nbytes]}
	}
	return out, nil
}
