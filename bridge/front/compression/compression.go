// Package compression is compression on both of the front's transports, gzip and deflate as
// Triton and gRPC's other implementations accept them (importing it registers gRPC's
// "deflate"; grpc-go's "gzip" comes with it).
package compression

//
//   - gRPC: grpc-go decompresses a request message (grpc-encoding) before the codec sees it,
//     so rawCodec still receives the serialized protobuf, and answers with the request's
//     encoding when it has that compressor registered. "gzip" is grpc-go's own package;
//     "deflate" is registered here. gRPC core (grpcio, Triton's C++ server and client) writes
//     "deflate" as a zlib stream (RFC 1950: deflateInit2 with 15 window bits, no gzip bit),
//     so this compressor reads and writes zlib, not a bare RFC 1951 stream.
//     --max-message-bytes bounds the decompressed message (grpc-go checks the decompressed
//     size against MaxRecvMsgSize).
//   - REST: a request body with Content-Encoding gzip or deflate (zlib, as HTTP defines it
//     and tritonclient.http writes it) is decoded, with --max-message-bytes bounding the
//     decoded size (a zip bomb is one 413, not memory); a successful response is compressed
//     with the best encoding the request's Accept-Encoding allows.

import (
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers the "gzip" compressor
)

const (
	encodingGzip    = "gzip"
	encodingDeflate = "deflate"
)

func init() {
	encoding.RegisterCompressor(newDeflateCompressor())
}

// deflateCompressor is grpc-go's encoding.Compressor for "deflate" (zlib streams; writers
// pooled, as grpc-go's gzip pools them).
type deflateCompressor struct {
	writers sync.Pool // *zlibWriter
}

func newDeflateCompressor() *deflateCompressor {
	c := &deflateCompressor{}
	c.writers.New = func() any { return &zlibWriter{Writer: zlib.NewWriter(io.Discard), pool: &c.writers} }
	return c
}

func (c *deflateCompressor) Name() string { return encodingDeflate }

type zlibWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

func (w *zlibWriter) Close() error {
	defer w.pool.Put(w)
	return w.Writer.Close()
}

func (c *deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	z := c.writers.Get().(*zlibWriter)
	z.Reset(w)
	return z, nil
}

// Decompress: a fresh reader per message (grpc-go never closes a decompressor, so there is
// no safe moment to return one to a pool).
func (c *deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	return zlib.NewReader(r)
}

// decodedBody is the request body as its Content-Encoding says (none, identity, gzip or
// deflate); a body in any other encoding is refused with 415 naming it.
func decodedBody(req *http.Request) (io.Reader, string, error) {
	ce := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding")))
	switch ce {
	case "", "identity":
		return req.Body, "", nil
	case encodingGzip:
		r, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, ce, status.BadRequest("request body: Content-Encoding gzip, but the body is not gzip data: %v", err)
		}
		return r, ce, nil
	case encodingDeflate:
		r, err := zlib.NewReader(req.Body)
		if err != nil {
			return nil, ce, status.BadRequest("request body: Content-Encoding deflate, but the body is not zlib (RFC 1950) data: %v", err)
		}
		return r, ce, nil
	}
	return nil, ce, &status.HTTPError{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf(
		"Content-Encoding %q is not supported; send the body as is, gzip or deflate", ce)}
}

// readEncodedBody reads a compressed body: at most limit decoded bytes (413 past it, naming
// the limit, after reading no more than limit+1 of them) and at most limit compressed ones.
func readEncodedBody(req *http.Request, limit int) ([]byte, error) {
	tooLarge := &status.HTTPError{Status: http.StatusRequestEntityTooLarge}
	if req.ContentLength > int64(limit) {
		tooLarge.Msg = fmt.Sprintf("request body of %d bytes exceeds --max-message-bytes %d", req.ContentLength, limit)
		return nil, tooLarge
	}
	compressed := &countingReader{r: io.LimitReader(req.Body, int64(limit)+1)}
	req.Body = io.NopCloser(compressed)
	r, ce, err := decodedBody(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	switch {
	case compressed.n > int64(limit):
		tooLarge.Msg = fmt.Sprintf("request body of more than %d bytes exceeds --max-message-bytes %d", limit, limit)
		return nil, tooLarge
	case len(body) > limit:
		tooLarge.Msg = fmt.Sprintf("request body (Content-Encoding %s) decodes to more than %d bytes: "+
			"--max-message-bytes %d bounds the decoded body", ce, limit, limit)
		return nil, tooLarge
	case err != nil:
		return nil, status.BadRequest("request body: cannot decode its Content-Encoding %s: %v", ce, err)
	}
	return body, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ResponseEncoding picks the response's Content-Encoding from Accept-Encoding (RFC 9110
// 12.5.3): the accepted one of gzip and deflate with the highest q (gzip first on a tie; "*"
// stands for both), none when identity is preferred to both or neither is accepted.
func ResponseEncoding(acceptEncoding string) string {
	q := map[string]float64{}
	for _, part := range strings.Split(acceptEncoding, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		weight := 1.0
		for _, p := range strings.Split(params, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "q="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f <= 1 {
					weight = f
				} else {
					weight = 0 // a malformed weight accepts nothing
				}
			}
		}
		q[name] = weight
	}
	weight := func(name string) float64 {
		if w, ok := q[name]; ok {
			return w
		}
		return q["*"]
	}
	best, bestQ := "", 0.0
	for _, name := range []string{encodingGzip, encodingDeflate} {
		if w := weight(name); w > bestQ {
			best, bestQ = name, w
		}
	}
	if w, ok := q["identity"]; ok && w > bestQ {
		return ""
	}
	return best
}

// Writer compresses a successful response body with the chosen encoding: at
// WriteHeader it drops the uncompressed Content-Length and sets Content-Encoding. Errors pass
// through as they are, as Triton sends them: tritonclient.http reads an error body without
// decoding it. So do empty bodies and HEAD answers. close ends the stream.
type Writer struct {
	http.ResponseWriter
	encoding string
	head     bool
	z        io.WriteCloser
	wrote    bool
}

func NewWriter(w http.ResponseWriter, req *http.Request) *Writer {
	w.Header().Add("Vary", "Accept-Encoding")
	return &Writer{ResponseWriter: w, encoding: ResponseEncoding(req.Header.Get("Accept-Encoding")),
		head: req.Method == http.MethodHead}
}

func (c *Writer) WriteHeader(code int) {
	if c.wrote {
		return
	}
	c.wrote = true
	h := c.Header()
	if c.encoding != "" && !c.head && code == http.StatusOK && h.Get("Content-Length") != "0" {
		h.Del("Content-Length")
		h.Set("Content-Encoding", c.encoding)
		if c.encoding == encodingGzip {
			c.z = gzip.NewWriter(c.ResponseWriter)
		} else {
			c.z = zlib.NewWriter(c.ResponseWriter)
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *Writer) Write(b []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if c.z != nil {
		return c.z.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

// Close ends the compressed stream (its trailer is part of the body).
func (c *Writer) Close() {
	if c.z != nil {
		_ = c.z.Close()
	}
}

// ReadBody reads a REST request body of at most limit bytes (413 past it, naming the limit;
// the decoded size for a body with a Content-Encoding, which is decoded here).
func ReadBody(req *http.Request, limit int) ([]byte, error) {
	if ce := strings.TrimSpace(req.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
		return readEncodedBody(req, limit)
	}
	tooLarge := func(n string) error {
		return &status.HTTPError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf(
			"request body of %s bytes exceeds --max-message-bytes %d", n, limit)}
	}
	if req.ContentLength > int64(limit) {
		return nil, tooLarge(strconv.FormatInt(req.ContentLength, 10))
	}
	var body []byte
	var err error
	if req.ContentLength >= 0 { // one allocation of the announced size
		body = make([]byte, req.ContentLength)
		_, err = io.ReadFull(req.Body, body)
	} else { // chunked: read up to one byte past the limit
		body, err = io.ReadAll(io.LimitReader(req.Body, int64(limit)+1))
	}
	if err != nil {
		return nil, status.BadRequest("cannot read the request body: %v", err)
	}
	if len(body) > limit {
		return nil, tooLarge("more than " + strconv.Itoa(limit))
	}
	return body, nil
}
