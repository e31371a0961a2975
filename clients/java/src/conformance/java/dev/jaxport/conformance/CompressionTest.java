package dev.jaxport.conformance;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonParser;
import io.grpc.DecompressorRegistry;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.zip.InflaterInputStream;
import org.junit.jupiter.api.Test;

/**
 * The runner's gRPC compression: the compression cases reach a server with grpc-encoding gzip
 * and deflate (the server decodes deflate as zlib), the runner's deflate is a zlib stream, an
 * unknown algorithm is an error naming it, and REST-only cases are N/A.
 */
class CompressionTest {
  static final Metadata.Key<String> ENCODING =
      Metadata.Key.of("grpc-encoding", Metadata.ASCII_STRING_MARSHALLER);

  @Test
  void compressionCasesSendTheirEncoding() throws Exception {
    ConcurrentLinkedQueue<String> seen = new ConcurrentLinkedQueue<>();
    ServerInterceptor record = new ServerInterceptor() {
      @Override
      public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
          ServerCallHandler<Q, R> next) {
        if (call.getMethodDescriptor().getBareMethodName().equals("ModelInfer")) {
          seen.add(String.valueOf(headers.get(ENCODING)));
        }
        return next.startCall(call, headers);
      }
    };
    Server server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
        .decompressorRegistry(DecompressorRegistry.getDefaultInstance().with(Compression.DEFLATE, true))
        .addService(ServerInterceptors.intercept(new UnexpectedSuccessTest.Yes(), record)).build().start();
    try {
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      int rc = ConformanceRunner.runMain(new String[] {"--url", "127.0.0.1:" + server.getPort(),
          "--cases", UnexpectedSuccessTest.CASES, "--run", "infer_grpc_compression"},
          new PrintStream(buf, true, StandardCharsets.UTF_8));
      String out = buf.toString(StandardCharsets.UTF_8);
      // The fake answers data_out, not cf_multi's outputs: both cases run and fail on outputs.
      assertEquals(1, rc, out);
      assertTrue(out.contains("conformance java: 0 passed, 2 failed"), out);
      assertEquals(new TreeSet<>(List.of("deflate", "gzip")), new TreeSet<>(seen), out);
      buf.reset();
      ConformanceRunner.runMain(new String[] {"--url", "127.0.0.1:" + server.getPort(),
          "--cases", UnexpectedSuccessTest.CASES, "--run", "rest_system_shm_infer"},
          new PrintStream(buf, true, StandardCharsets.UTF_8));
      out = buf.toString(StandardCharsets.UTF_8);
      assertTrue(out.contains("N/A rest_system_shm_infer (REST only (this runner speaks gRPC))"), out);
    } finally {
      server.shutdownNow();
    }
  }

  @Test
  void deflateIsZlib() throws Exception {
    byte[] payload = "conformance payload".getBytes(StandardCharsets.UTF_8);
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    try (OutputStream z = Compression.DEFLATE.compress(buf)) {
      z.write(payload);
    }
    byte[] wire = buf.toByteArray();
    assertEquals(0x78, wire[0] & 0xff, "zlib header (CMF 0x78)");
    try (InflaterInputStream in = new InflaterInputStream(new ByteArrayInputStream(wire))) {
      assertArrayEquals(payload, in.readAllBytes());
    }
    try (var in = Compression.DEFLATE.decompress(new ByteArrayInputStream(wire))) {
      assertArrayEquals(payload, in.readAllBytes());
    }
  }

  @Test
  void unknownAlgorithmIsNamed() {
    var c = new ConformanceRunner.Case("c",
        JsonParser.parseString("{\"grpc_compression\": \"snappy\"}").getAsJsonObject(), Path.of("."));
    var e = assertThrows(IllegalArgumentException.class, () -> Compression.of(c));
    assertTrue(e.getMessage().contains("'snappy'"), e.getMessage());
  }
}
