package conformance

// gRPC message compression for the cases that send their request compressed
// ("grpc_compression": gzip or deflate). "gzip" is grpc-go's own compressor; grpc-go has no
// "deflate", so the runner registers one that writes and reads a zlib stream (RFC 1950), the
// form gRPC core (grpcio, Triton's C++ server and client) uses under that name. Its own code,
// not the server's: the oracle shares nothing with what it judges.

import (
	"compress/zlib"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/gzip" // registers "gzip"
)

// Compressions are the grpc_compression values a case may name.
var Compressions = []string{"gzip", "deflate"}

func init() {
	encoding.RegisterCompressor(zlibCompressor{})
}

// zlibCompressor is grpc-go's encoding.Compressor "deflate" (zlib streams).
type zlibCompressor struct{}

func (zlibCompressor) Name() string { return "deflate" }

func (zlibCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return zlib.NewWriter(w), nil }

func (zlibCompressor) Decompress(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }

// callOptions are the options of a case's ModelInfer call: its compressor, if any (an error
// names an algorithm the runner does not know).
func callOptions(c Case) ([]grpc.CallOption, error) {
	if c.GRPCCompression == "" {
		return nil, nil
	}
	for _, name := range Compressions {
		if c.GRPCCompression == name {
			return []grpc.CallOption{grpc.UseCompressor(name)}, nil
		}
	}
	return nil, fmt.Errorf("case %s: grpc_compression %q is not one of %v", c.Name, c.GRPCCompression, Compressions)
}
