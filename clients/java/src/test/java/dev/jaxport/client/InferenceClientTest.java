package dev.jaxport.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelInferResponse;
import dev.jaxport.inference.ServerLiveRequest;
import dev.jaxport.inference.ServerLiveResponse;
import com.google.protobuf.ByteString;
import io.grpc.Context;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Contexts;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The client's own plumbing over a real network connection (token refused over plaintext,
 * limits, deadlines, status pass-through, async) against a tiny OIP server on 127.0.0.1 port 0;
 * InProcessClientTest covers the rest in process, and behaviour against the real bridge is the
 * conformance suite's.
 */
class InferenceClientTest {
  static final Context.Key<String> AUTH = Context.key("auth");
  // The limit test makes the loopback server's write fail on purpose; keep its log quiet.
  static final java.util.logging.Logger GRPC_LOG = java.util.logging.Logger.getLogger("io.grpc");
  static Server server;
  static String target;

  static final class Service extends GRPCInferenceServiceGrpc.GRPCInferenceServiceImplBase {
    @Override
    public void serverLive(ServerLiveRequest r, StreamObserver<ServerLiveResponse> out) {
      out.onNext(ServerLiveResponse.newBuilder().setLive("Bearer s3cret".equals(AUTH.get())).build());
      out.onCompleted();
    }

    @Override
    public void modelInfer(ModelInferRequest r, StreamObserver<ModelInferResponse> out) {
      switch (r.getModelName()) {
        case "reject" -> out.onError(Status.INVALID_ARGUMENT
            .withDescription("input 'pixels': expected shape [2, 3], got [3, 2]").asRuntimeException());
        case "hang" -> {
          // never answered: only the client's deadline ends the call (no timing premise)
        }
        case "big" -> {
          out.onNext(ModelInferResponse.newBuilder()
              .addOutputs(ModelInferResponse.InferOutputTensor.newBuilder().setName("y").setDatatype("UINT8").addShape(16 << 20))
              .addRawOutputContents(ByteString.copyFrom(new byte[16 << 20])).build());
          out.onCompleted();
        }
        default -> {
          ModelInferResponse.Builder b = ModelInferResponse.newBuilder().setId(r.getId()).setModelName(r.getModelName());
          for (int i = 0; i < r.getInputsCount(); i++) {
            var in = r.getInputs(i);
            b.addOutputs(ModelInferResponse.InferOutputTensor.newBuilder()
                .setName(in.getName() + "_out").setDatatype(in.getDatatype()).addAllShape(in.getShapeList()));
            b.addRawOutputContents(r.getRawInputContents(i));
          }
          out.onNext(b.build());
          out.onCompleted();
        }
      }
    }
  }

  @BeforeAll
  static void start() throws Exception {
    GRPC_LOG.setLevel(java.util.logging.Level.SEVERE);
    ServerInterceptor capture = new ServerInterceptor() {
      @Override
      public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
        String auth = headers.get(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER));
        return Contexts.interceptCall(Context.current().withValue(AUTH, auth), call, headers, next);
      }
    };
    server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
        .maxInboundMessageSize(64 << 20)
        .addService(ServerInterceptors.intercept(new Service(), capture)).build().start();
    target = "127.0.0.1:" + server.getPort();
  }

  @AfterAll
  static void stop() {
    server.shutdownNow();
  }

  @Test
  void inferRoundTripKeepsIdAndTypes() {
    try (InferenceClient c = InferenceClient.forTarget(target).build()) {
      InferResult r = c.infer(InferRequest.builder("echo").id("req-7")
          .input(Tensor.ofFloat32("a", new long[] {2}, 1f, 2f))
          .input(Tensor.ofBFloat16("b", new long[] {1}, 0.5f)).build());
      assertEquals("req-7", r.id());
      assertArrayEquals(new float[] {1f, 2f}, r.output("a_out").orElseThrow().asFloat32());
      assertArrayEquals(new float[] {0.5f}, r.output("b_out").orElseThrow().asBFloat16());
    }
  }

  @Test
  void statusCodeAndMessageArePreserved() {
    try (InferenceClient c = InferenceClient.forTarget(target).build()) {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> c.infer("reject", Tensor.ofFloat32("pixels", new long[] {1}, 1f)));
      assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
      assertEquals("input 'pixels': expected shape [2, 3], got [3, 2]", e.getStatus().getDescription());
      ExecutionException x = assertThrows(ExecutionException.class,
          () -> c.inferAsync(InferRequest.builder("reject").input(Tensor.ofFloat32("pixels", new long[] {1}, 1f)).build()).get());
      StatusRuntimeException cause = assertInstanceOf(StatusRuntimeException.class, x.getCause());
      assertEquals(Status.Code.INVALID_ARGUMENT, cause.getStatus().getCode());
    }
  }

  @Test
  void serverErrorsAreNotClientSide() {
    try (InferenceClient c = InferenceClient.forTarget(target).build()) {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> c.infer("reject", Tensor.ofFloat32("pixels", new long[] {1}, 1f)));
      assertEquals(false, ClientErrors.isClientSide(e));
    }
  }

  @Test
  void perCallDeadline() {
    try (InferenceClient c = InferenceClient.forTarget(target).build()) {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> c.withDeadline(Duration.ofMillis(200)).infer("hang", Tensor.ofInt32("k", new long[] {1}, 1)));
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
    }
  }

  @Test
  void default256MiBLimitCarries16MiBAndIsConfigurable() {
    try (InferenceClient c = InferenceClient.forTarget(target).build()) {
      InferResult r = c.infer("big", Tensor.ofUint8("x", new long[] {1}, 1));
      assertEquals(16 << 20, r.output("y").orElseThrow().rawBytes().size());
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> c.withMaxMessageBytes(4 << 20).infer("big", Tensor.ofUint8("x", new long[] {1}, 1)));
      assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.getStatus().getCode());
    }
  }

  @Test
  void bearerTokenOverPlaintextIsRefusedUnlessAllowed() {
    StatusRuntimeException refused = assertThrows(StatusRuntimeException.class,
        () -> InferenceClient.forTarget(target).bearerToken("s3cret").build());
    assertEquals(Status.Code.FAILED_PRECONDITION, refused.getStatus().getCode());
    assertTrue(refused.getStatus().getDescription().contains("plaintext"), refused.getMessage());
    assertTrue(ClientErrors.isClientSide(refused));
    // The call credentials themselves refuse a plaintext channel the caller made.
    ManagedChannel plain = Grpc.newChannelBuilder(target, InsecureChannelCredentials.create()).build();
    try {
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
          () -> InferenceClient.of(plain).withCallCredentials(BearerToken.of("s3cret")).serverLive());
      assertEquals(Status.Code.UNAUTHENTICATED, e.getStatus().getCode());
      assertTrue(e.getStatus().getDescription().contains("transport security"), e.getStatus().getDescription());
    } finally {
      plain.shutdownNow();
    }
    try (InferenceClient with = InferenceClient.forTarget(target).bearerToken("s3cret")
            .allowBearerTokenOverPlaintext().build();
        InferenceClient without = InferenceClient.forTarget(target).build()) {
      assertTrue(with.serverLive());
      assertEquals(false, without.serverLive());
    }
  }

  @Test
  void clientCertificateFileErrorsNameTheFile() throws Exception {
    java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("jaxport-tls");
    java.nio.file.Path missingCert = dir.resolve("absent-client.pem");
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
        () -> InferenceClient.forTarget("127.0.0.1:1")
            .clientCertificate(missingCert, dir.resolve("absent-client.key")).build());
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
    assertTrue(e.getStatus().getDescription().contains("absent-client.pem"), e.getMessage());
    assertTrue(ClientErrors.isClientSide(e));
  }
}
