package main

// The framed protocol between the front and its Python workers, specified once in
// docs/frames.md (header layout, frame types with direction and payload, the memfd rule,
// limits, errors, grouping); this file holds the header and the frame types, shm.go the memfd
// payloads, worker.go the calls. Python side: bridge/frames.py, bridge/connection.py.

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
	// frameSlack is room for a status message beyond the largest allowed response
	// (docs/frames.md, Limits: the same on both sides).
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
