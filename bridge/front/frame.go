package main

// The framed protocol between the front and its Python workers; the authoritative description
// is the docstring of bridge/worker.py (jaxport.bridge.worker). Every integer little-endian; a
// frame is a 24-byte header then `length` payload bytes:
//
//	u32 length | u8 type | u8 method | u16 code | u64 id | i64 aux
//
// method = index of the RPC in inference.GRPCInferenceService (declaration order, taken from
// the descriptor on both sides); aux = remaining time in microseconds (-1: none) on CALL and
// STREAM_OPEN, byte length of the status message at the start of the payload on REPLY and
// STREAM_END. A type with shmFlag (0x80) set: the payload is not on the socket but in the
// memfd sent with the header (shm.go).

import (
	"encoding/binary"
	"io"
)

const (
	headerSize = 24

	frameCall            = 1
	frameReply           = 2
	frameReady           = 3
	frameCancel          = 4
	frameStreamOpen      = 5
	frameStreamMsg       = 6
	frameStreamHalfClose = 7
	frameStreamReply     = 8
	frameStreamEnd       = 9

	noDeadline = -1
	// frameSlack is room for a status message beyond the largest allowed response.
	frameSlack = 64 * 1024
)

type header struct {
	length uint32
	ftype  uint8
	method uint8
	code   uint16
	id     uint64
	aux    int64
}

func (h header) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], h.length)
	b[4] = h.ftype
	b[5] = h.method
	binary.LittleEndian.PutUint16(b[6:], h.code)
	binary.LittleEndian.PutUint64(b[8:], h.id)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.aux))
}

func readHeader(r io.Reader, b []byte) (header, error) {
	if _, err := io.ReadFull(r, b[:headerSize]); err != nil {
		return header{}, err
	}
	return header{
		length: binary.LittleEndian.Uint32(b[0:]),
		ftype:  b[4],
		method: b[5],
		code:   binary.LittleEndian.Uint16(b[6:]),
		id:     binary.LittleEndian.Uint64(b[8:]),
		aux:    int64(binary.LittleEndian.Uint64(b[16:])),
	}, nil
}
