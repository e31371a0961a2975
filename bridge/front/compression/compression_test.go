package compression

// Unit tests: the gRPC "deflate" compressor against zlib as gRPC core writes it, REST bodies
// with a Content-Encoding (the decoded-size limit, the refusals) and the choice of a response
// encoding. server's grpc_test.go checks a compressed gRPC call reaches its codec;
// tests/front/test_front_compression.py runs tritonclient (gRPC and HTTP) and perf_analyzer
// with gzip and deflate against a live front.

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/encoding"
)

// compressed is b as a zlib stream ("deflate") or gzip data.
func compressed(t *testing.T, encoding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var z io.WriteCloser = gzip.NewWriter(&buf)
	if encoding == "deflate" {
		z = zlib.NewWriter(&buf)
	}
	if _, err := z.Write(b); err != nil {
		t.Fatal(err)
	}
	z.Close()
	return buf.Bytes()
}

func zlibBytes(t *testing.T, b []byte) []byte { return compressed(t, "deflate", b) }
func gzipBytes(t *testing.T, b []byte) []byte { return compressed(t, "gzip", b) }

func TestDeflateCompressorSpeaksZlib(t *testing.T) {
	c := encoding.GetCompressor("deflate")
	if c == nil || encoding.GetCompressor("gzip") == nil {
		t.Fatal("gzip and deflate must be registered with grpc-go")
	}
	msg := bytes.Repeat([]byte("jaxport "), 1000)
	for round := 0; round < 2; round++ { // the second round reuses a pooled writer
		var buf bytes.Buffer
		w, err := c.Compress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		// What a gRPC core peer would read: a zlib stream.
		zr, err := zlib.NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("round %d: not a zlib stream: %v", round, err)
		}
		if got, _ := io.ReadAll(zr); !bytes.Equal(got, msg) {
			t.Fatalf("round %d: zlib reads back %d bytes, want %d", round, len(got), len(msg))
		}
	}
	r, err := c.Decompress(bytes.NewReader(zlibBytes(t, msg)))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(r); !bytes.Equal(got, msg) {
		t.Fatalf("decompressed %d bytes, want %d", len(got), len(msg))
	}
	var raw bytes.Buffer // a bare RFC 1951 stream is not gRPC's deflate
	fw, _ := flate.NewWriter(&raw, flate.DefaultCompression)
	fw.Write(msg)
	fw.Close()
	if _, err := c.Decompress(bytes.NewReader(raw.Bytes())); err == nil {
		t.Fatal("a bare deflate stream was accepted as zlib")
	}
}

func encodedRequest(encoding string, body []byte) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", bytes.NewReader(body))
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	return req
}

func wantRestError(t *testing.T, err error, code int, words ...string) {
	t.Helper()
	var re *status.HTTPError
	if !errors.As(err, &re) || re.Status != code {
		t.Fatalf("got %v, want HTTP %d", err, code)
	}
	for _, w := range words {
		if !strings.Contains(re.Msg, w) {
			t.Errorf("message %q does not name %q", re.Msg, w)
		}
	}
}

func TestReadBodyDecodesContentEncoding(t *testing.T) {
	msg := []byte(`{"inputs": []}`)
	for _, c := range []struct {
		encoding string
		body     []byte
	}{
		{"", msg}, {"identity", msg}, {"gzip", gzipBytes(t, msg)}, {"GZIP", gzipBytes(t, msg)},
		{"deflate", zlibBytes(t, msg)},
	} {
		got, err := ReadBody(encodedRequest(c.encoding, c.body), 1024)
		if err != nil || !bytes.Equal(got, msg) {
			t.Errorf("Content-Encoding %q: got %q, %v", c.encoding, got, err)
		}
	}
}

func TestReadBodyBoundsTheDecodedSize(t *testing.T) {
	const limit = 1 << 16
	bomb := gzipBytes(t, make([]byte, 32<<20)) // 32 MiB of zeros: ~32 KiB of gzip
	if len(bomb) > limit {
		t.Fatalf("test bomb of %d bytes is not under the limit", len(bomb))
	}
	_, err := ReadBody(encodedRequest("gzip", bomb), limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "gzip", "decodes to more than 65536 bytes", "--max-message-bytes")
	_, err = ReadBody(encodedRequest("deflate", zlibBytes(t, make([]byte, limit+1))), limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "deflate", "--max-message-bytes")
	exact, err := ReadBody(encodedRequest("deflate", zlibBytes(t, make([]byte, limit))), limit)
	if err != nil || len(exact) != limit {
		t.Fatalf("a body decoding to exactly the limit: %d bytes, %v", len(exact), err)
	}
	// Compressed bytes past the limit (incompressible, chunked: no Content-Length).
	noise := make([]byte, 2*limit)
	for i := range noise {
		noise[i] = byte(i*7919 + i>>3)
	}
	req := encodedRequest("gzip", gzipBytes(t, noise))
	req.ContentLength = -1
	_, err = ReadBody(req, limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "--max-message-bytes 65536")
}

func TestReadBodyRefusesBadEncodings(t *testing.T) {
	_, err := ReadBody(encodedRequest("br", []byte("x")), 1024)
	wantRestError(t, err, http.StatusUnsupportedMediaType, `"br"`, "gzip or deflate")
	_, err = ReadBody(encodedRequest("gzip", []byte(`{"inputs": []}`)), 1024)
	wantRestError(t, err, http.StatusBadRequest, "Content-Encoding gzip", "not gzip data")
	_, err = ReadBody(encodedRequest("deflate", []byte(`{"inputs": []}`)), 1024)
	wantRestError(t, err, http.StatusBadRequest, "Content-Encoding deflate", "zlib")
	truncated := gzipBytes(t, bytes.Repeat([]byte("abc"), 100))
	_, err = ReadBody(encodedRequest("gzip", truncated[:len(truncated)-6]), 1024)
	wantRestError(t, err, http.StatusBadRequest, "cannot decode its Content-Encoding gzip")
}

func TestResponseEncoding(t *testing.T) {
	for header, want := range map[string]string{
		"":                               "",
		"gzip":                           "gzip",
		"deflate":                        "deflate",
		"gzip, deflate":                  "gzip",
		"deflate, gzip":                  "gzip",
		"gzip;q=0.5, deflate":            "deflate",
		"deflate;q=0.9, gzip;q=0.8":      "deflate",
		"br":                             "",
		"*":                              "gzip",
		"*;q=0.3, gzip;q=0":              "deflate",
		"identity":                       "",
		"identity, gzip;q=0.5":           "",
		"gzip;q=0":                       "",
		"gzip;q=nonsense":                "",
		" GZip ; q=1 ":                   "gzip",
		"identity;q=0.1, deflate;q=0.2 ": "deflate",
	} {
		if got := ResponseEncoding(header); got != want {
			t.Errorf("Accept-Encoding %q: got %q, want %q", header, got, want)
		}
	}
}

func TestCompressingWriter(t *testing.T) {
	body := bytes.Repeat([]byte(`{"a":1}`), 100)
	for _, enc := range []string{"gzip", "deflate", ""} {
		req := httptest.NewRequest(http.MethodGet, "/v2", nil)
		req.Header.Set("Accept-Encoding", enc)
		rec := httptest.NewRecorder()
		cw := NewWriter(rec, req)
		cw.Header().Set("Content-Length", "700")
		cw.WriteHeader(http.StatusOK)
		_, _ = cw.Write(body)
		cw.Close()
		if got := rec.Header().Get("Content-Encoding"); got != enc {
			t.Fatalf("%q: Content-Encoding %q", enc, got)
		}
		var r io.Reader = rec.Body
		switch enc {
		case "gzip":
			r, _ = gzip.NewReader(rec.Body)
		case "deflate":
			r, _ = zlib.NewReader(rec.Body)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%q: body %q, %v", enc, got, err)
		}
		if enc != "" && rec.Header().Get("Content-Length") != "" {
			t.Fatalf("%q: the uncompressed Content-Length was kept", enc)
		}
		if rec.Header().Get("Vary") != "Accept-Encoding" {
			t.Fatalf("%q: no Vary: Accept-Encoding", enc)
		}
	}
	// An error stays uncompressed (tritonclient.http reads it undecoded, as Triton sends it).
	req := httptest.NewRequest(http.MethodPost, "/v2/models/m/infer", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	cw := NewWriter(rec, req)
	cw.WriteHeader(http.StatusNotFound)
	_, _ = cw.Write([]byte(`{"error":"unknown model 'm'"}`))
	cw.Close()
	if rec.Header().Get("Content-Encoding") != "" || !strings.Contains(rec.Body.String(), "unknown model 'm'") {
		t.Fatalf("error answer: Content-Encoding %q, body %q", rec.Header().Get("Content-Encoding"), rec.Body.String())
	}
	// An empty answer (repository load, shared-memory register) stays empty.
	req = httptest.NewRequest(http.MethodPost, "/v2/repository/models/m/load", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec = httptest.NewRecorder()
	cw = NewWriter(rec, req)
	cw.Header().Set("Content-Length", "0")
	cw.WriteHeader(http.StatusOK)
	cw.Close()
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Encoding") != "" {
		t.Fatalf("empty answer: %d bytes, Content-Encoding %q", rec.Body.Len(), rec.Header().Get("Content-Encoding"))
	}
}
