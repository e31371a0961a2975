package main

// Unit tests of compression.go: the gRPC "deflate" compressor against zlib as gRPC core
// writes it, REST bodies with a Content-Encoding (the decoded-size limit, the refusals) and
// the choice of a response encoding. tests/front/test_compression.py runs tritonclient
// (gRPC and HTTP) and perf_analyzer with gzip and deflate against a live front.

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
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

func wantRestError(t *testing.T, err error, status int, words ...string) {
	t.Helper()
	var re *restError
	if !errors.As(err, &re) || re.status != status {
		t.Fatalf("got %v, want HTTP %d", err, status)
	}
	for _, w := range words {
		if !strings.Contains(re.msg, w) {
			t.Errorf("message %q does not name %q", re.msg, w)
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
		got, err := readBody(encodedRequest(c.encoding, c.body), 1024)
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
	_, err := readBody(encodedRequest("gzip", bomb), limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "gzip", "decodes to more than 65536 bytes", "--max-message-bytes")
	_, err = readBody(encodedRequest("deflate", zlibBytes(t, make([]byte, limit+1))), limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "deflate", "--max-message-bytes")
	exact, err := readBody(encodedRequest("deflate", zlibBytes(t, make([]byte, limit))), limit)
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
	_, err = readBody(req, limit)
	wantRestError(t, err, http.StatusRequestEntityTooLarge, "--max-message-bytes 65536")
}

func TestReadBodyRefusesBadEncodings(t *testing.T) {
	_, err := readBody(encodedRequest("br", []byte("x")), 1024)
	wantRestError(t, err, http.StatusUnsupportedMediaType, `"br"`, "gzip or deflate")
	_, err = readBody(encodedRequest("gzip", []byte(`{"inputs": []}`)), 1024)
	wantRestError(t, err, http.StatusBadRequest, "Content-Encoding gzip", "not gzip data")
	_, err = readBody(encodedRequest("deflate", []byte(`{"inputs": []}`)), 1024)
	wantRestError(t, err, http.StatusBadRequest, "Content-Encoding deflate", "zlib")
	truncated := gzipBytes(t, bytes.Repeat([]byte("abc"), 100))
	_, err = readBody(encodedRequest("gzip", truncated[:len(truncated)-6]), 1024)
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
		if got := responseEncoding(header); got != want {
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
		cw := newCompressingWriter(rec, req)
		writeJSON(cw, http.StatusOK, body)
		cw.close()
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
	cw := newCompressingWriter(rec, req)
	writeError(cw, http.StatusNotFound, "unknown model 'm'")
	cw.close()
	if rec.Header().Get("Content-Encoding") != "" || !strings.Contains(rec.Body.String(), "unknown model 'm'") {
		t.Fatalf("error answer: Content-Encoding %q, body %q", rec.Header().Get("Content-Encoding"), rec.Body.String())
	}
	// An empty answer (repository load, shared-memory register) stays empty.
	req = httptest.NewRequest(http.MethodPost, "/v2/repository/models/m/load", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec = httptest.NewRecorder()
	cw = newCompressingWriter(rec, req)
	cw.Header().Set("Content-Length", "0")
	cw.WriteHeader(http.StatusOK)
	cw.close()
	if rec.Body.Len() != 0 || rec.Header().Get("Content-Encoding") != "" {
		t.Fatalf("empty answer: %d bytes, Content-Encoding %q", rec.Body.Len(), rec.Header().Get("Content-Encoding"))
	}
}

// inPayloads records what a client received: uncompressed and on-the-wire payload sizes.
type inPayloads struct{ got chan *stats.InPayload }

func (h *inPayloads) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (h *inPayloads) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h *inPayloads) HandleConn(context.Context, stats.ConnStats)                       {}
func (h *inPayloads) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		h.got <- p
	}
}

// TestGRPCCompressionReachesTheRawCodec: a server with the front's codec decompresses a
// gzip/deflate request before rawCodec sees its bytes, and answers compressed with the
// request's encoding; a message decompressing past MaxRecvMsgSize is RESOURCE_EXHAUSTED.
func TestGRPCCompressionReachesTheRawCodec(t *testing.T) {
	const limit = 1 << 16
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(newRawCodec()), grpc.MaxRecvMsgSize(limit))
	echo := func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		in := new(rawMsg)
		if err := dec(in); err != nil {
			return nil, err
		}
		return &rawMsg{out: in.in}, nil // the request's (decompressed) bytes, back
	}
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "t.Echo", HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: echo}}}, struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	h := &inPayloads{got: make(chan *stats.InPayload, 4)}
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(h), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newRawCodec())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	msg := bytes.Repeat([]byte("tensor bytes "), 1000)
	for _, enc := range []string{"gzip", "deflate"} {
		out := new(rawMsg)
		err := cc.Invoke(context.Background(), "/t.Echo/Echo", &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(msg)}}, out, grpc.UseCompressor(enc))
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		if !bytes.Equal(out.in.Materialize(), msg) {
			t.Fatalf("%s: the echo is not the request's bytes", enc)
		}
		p := <-h.got
		if p.Length != len(msg) || p.CompressedLength >= len(msg)/4 {
			t.Fatalf("%s: response of %d bytes came as %d: not compressed", enc, p.Length, p.CompressedLength)
		}
		bomb := &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(make([]byte, 4*limit))}}
		err = cc.Invoke(context.Background(), "/t.Echo/Echo", bomb, new(rawMsg), grpc.UseCompressor(enc))
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: a message decompressing past the limit: %v", enc, err)
		}
	}
	out := new(rawMsg) // uncompressed request: uncompressed answer
	if err := cc.Invoke(context.Background(), "/t.Echo/Echo", &rawMsg{out: mem.BufferSlice{mem.SliceBuffer(msg)}}, out); err != nil {
		t.Fatal(err)
	}
	if p := <-h.got; p.CompressedLength != p.Length {
		t.Fatalf("identity request answered compressed: %d of %d", p.CompressedLength, p.Length)
	}
}
