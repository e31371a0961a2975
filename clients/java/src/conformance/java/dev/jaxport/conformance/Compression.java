package dev.jaxport.conformance;

import io.grpc.Codec;
import io.grpc.CompressorRegistry;
import io.grpc.DecompressorRegistry;
import io.grpc.ManagedChannelBuilder;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.List;
import java.util.zip.DeflaterOutputStream;
import java.util.zip.InflaterInputStream;

/**
 * gRPC message compression for the cases that send their request compressed
 * ({@code "grpc_compression": "gzip" | "deflate"}). grpc-java has gzip built in; "deflate" is
 * this runner's own {@link Codec}: a zlib stream (java.util.zip's Deflater/Inflater with their
 * default zlib header), the form gRPC core (grpcio, Triton) writes under that name. The runner's
 * channel gets both as compressors (to send) and decompressors (a server answers in the
 * request's encoding).
 */
final class Compression {
  private Compression() {}

  /** The grpc_compression values a case may name. */
  static final List<String> NAMES = List.of("gzip", "deflate");

  /** "deflate" as gRPC core speaks it: zlib (RFC 1950), not a bare RFC 1951 stream. */
  static final Codec DEFLATE = new Codec() {
    @Override
    public String getMessageEncoding() {
      return "deflate";
    }

    @Override
    public OutputStream compress(OutputStream os) {
      return new DeflaterOutputStream(os);
    }

    @Override
    public InputStream decompress(InputStream is) {
      return new InflaterInputStream(is);
    }
  };

  /** Give a channel gzip and deflate both ways (without touching the global registries). */
  static void configure(ManagedChannelBuilder<?> b) {
    CompressorRegistry compressors = CompressorRegistry.newEmptyInstance();
    compressors.register(new Codec.Gzip());
    compressors.register(Codec.Identity.NONE);
    compressors.register(DEFLATE);
    b.compressorRegistry(compressors);
    b.decompressorRegistry(DecompressorRegistry.getDefaultInstance().with(DEFLATE, true));
  }

  /** A case's compression (null: none); IllegalArgumentException naming an unknown one. */
  static String of(ConformanceRunner.Case c) {
    if (!c.json().has("grpc_compression")) {
      return null;
    }
    String name = c.json().get("grpc_compression").getAsString();
    if (!NAMES.contains(name)) {
      throw new IllegalArgumentException(
          "case " + c.name() + ": grpc_compression '" + name + "' is not one of " + NAMES);
    }
    return name;
  }
}
