package dev.jaxport.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelInferResponse;
import dev.jaxport.inference.ModelStreamInferResponse;
import dev.jaxport.inference.ServerLiveRequest;
import dev.jaxport.inference.ServerLiveResponse;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Unit tests over grpc-java's in-process transport (no sockets, no threads of a network stack):
 * inference, status pass-through, stream results with their codes, the stream deadline, call
 * credentials and channel ownership.
 */
class InProcessClientTest {
  static final Context.Key<String> AUTH = Context.key("auth");

  /** Echo server; model "reject" fails; a stream request for "hang" is never answered. */
  static final class Service extends GRPCInferenceServiceGrpc.GRPCInferenceServiceImplBase {
    @Override
    public void serverLive(ServerLiveRequest r, StreamObserver<ServerLiveResponse> out) {
      out.onNext(ServerLiveResponse.newBuilder().setLive("Bearer s3cret".equals(AUTH.get())).build());
      out.onCompleted();
    }

    static ModelInferResponse echo(ModelInferRequest r) {
      ModelInferResponse.Builder b = ModelInferResponse.newBuilder().setId(r.getId()).setModelName(r.getModelName());
      for (int i = 0; i < r.getInputsCount(); i++) {
        var in = r.getInputs(i);
        b.addOutputs(ModelInferResponse.InferOutputTensor.newBuilder()
            .setName(in.getName() + "_out").setDatatype(in.getDatatype()).addAllShape(in.getShapeList()));
        b.addRawOutputContents(r.getRawInputContents(i));
      }
      return b.build();
    }

    @Override
    public void modelInfer(ModelInferRequest r, StreamObserver<ModelInferResponse> out) {
      if (r.getModelName().equals("reject")) {
        out.onError(Status.INVALID_ARGUMENT.withDescription("input 'k': expected INT32").asRuntimeException());
        return;
      }
      out.onNext(echo(r));
      out.onCompleted();
    }

    @Override
    public StreamObserver<ModelInferRequest> modelStreamInfer(StreamObserver<ModelStreamInferResponse> out) {
      return new StreamObserver<>() {
        boolean hang;

        @Override
        public void onNext(ModelInferRequest r) {
          switch (r.getModelName()) {
            case "reject" -> out.onNext(ModelStreamInferResponse.newBuilder()
                .setErrorMessage("NOT_FOUND: unknown model 'reject'")
                .setInferResponse(ModelInferResponse.newBuilder().setId(r.getId())).build());
            case "plain" -> out.onNext(ModelStreamInferResponse.newBuilder()
                .setErrorMessage("something went wrong: no code")
                .setInferResponse(ModelInferResponse.newBuilder().setId(r.getId())).build());
            case "hang" -> hang = true;
            default -> out.onNext(ModelStreamInferResponse.newBuilder().setInferResponse(echo(r)).build());
          }
        }

        @Override
        public void onError(Throwable t) {}

        @Override
        public void onCompleted() {
          if (!hang) {
            out.onCompleted();
          }
        }
      };
    }
  }

  Server server;
  ManagedChannel channel;

  @BeforeEach
  void start() throws Exception {
    String name = InProcessServerBuilder.generateName();
    ServerInterceptor capture = new ServerInterceptor() {
      @Override
      public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
        String auth = headers.get(Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER));
        return Contexts.interceptCall(Context.current().withValue(AUTH, auth), call, headers, next);
      }
    };
    server = InProcessServerBuilder.forName(name).directExecutor()
        .addService(ServerInterceptors.intercept(new Service(), capture)).build().start();
    channel = InProcessChannelBuilder.forName(name).directExecutor().build();
  }

  @AfterEach
  void stop() {
    channel.shutdownNow();
    server.shutdownNow();
  }

  @Test
  void inferAndStatusPassThrough() {
    InferenceClient c = InferenceClient.of(channel);
    InferResult r = c.infer(InferRequest.builder("echo").id("req-1")
        .input(Tensor.ofInt64("n", new long[] {2}, -3, 1L << 40)).build());
    assertEquals("req-1", r.id());
    assertArrayEquals(new long[] {-3, 1L << 40}, r.output("n_out").orElseThrow().asInt64());
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
        () -> c.infer("reject", Tensor.ofInt32("k", new long[] {1}, 1)));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
    assertEquals("input 'k': expected INT32", e.getStatus().getDescription());
  }

  @Test
  void streamResultsKeepTheirStatusCode() throws Exception {
    Tensor k = Tensor.ofInt32("k", new long[] {1}, 5);
    List<InferenceClient.StreamResult> results = InferenceClient.of(channel).streamInfer(List.of(
        InferRequest.builder("echo").id("1").input(k).build(),
        InferRequest.builder("reject").id("2").input(k).build(),
        InferRequest.builder("plain").id("3").input(k).build()));
    assertEquals(3, results.size());
    InferenceClient.StreamResult ok = results.get(0);
    assertFalse(ok.failed());
    assertEquals(Status.Code.OK, ok.code());
    assertNull(ok.error());
    assertArrayEquals(new int[] {5}, ok.result().output("k_out").orElseThrow().asInt32());
    InferenceClient.StreamResult notFound = results.get(1);
    assertTrue(notFound.failed());
    assertEquals("2", notFound.id());
    assertEquals(Status.Code.NOT_FOUND, notFound.code());
    assertEquals("unknown model 'reject'", notFound.status().getDescription());
    assertEquals("NOT_FOUND: unknown model 'reject'", notFound.error());
    InferenceClient.StreamResult unknown = results.get(2);
    assertEquals(Status.Code.UNKNOWN, unknown.code());
    assertEquals("something went wrong: no code", unknown.status().getDescription());
  }

  @Test
  void aStreamWithoutAnEndHitsItsDeadline() {
    InferenceClient c = InferenceClient.of(channel);
    assertEquals(InferenceClient.DEFAULT_STREAM_DEADLINE, c.effectiveStreamDeadline());
    assertEquals(Duration.ofSeconds(3), c.withDeadline(Duration.ofSeconds(3)).effectiveStreamDeadline());
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class,
        () -> c.withStreamDeadline(Duration.ofMillis(300)).streamInfer(List.of(
            InferRequest.builder("hang").input(Tensor.ofInt32("k", new long[] {1}, 1)).build())));
    assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
  }

  @Test
  void callCredentialsCarryTheToken() {
    // The in-process transport counts as secure (privacy and integrity), as TLS does.
    InferenceClient c = InferenceClient.of(channel);
    assertFalse(c.serverLive());
    assertTrue(c.withCallCredentials(BearerToken.of("s3cret")).serverLive());
  }

  @Test
  void ofLeavesTheCallersChannelOpen() {
    InferenceClient c = InferenceClient.of(channel);
    assertFalse(c.ownsChannel());
    c.close();
    assertFalse(channel.isShutdown());
    assertFalse(c.withDeadline(Duration.ofSeconds(1)).ownsChannel());
    InferenceClient owned = InferenceClient.forTarget("127.0.0.1:1").build();
    assertTrue(owned.ownsChannel());
    assertFalse(owned.withDeadline(Duration.ofSeconds(1)).ownsChannel());
    owned.close();
    assertTrue(((ManagedChannel) owned.channel()).isShutdown());
  }

  @Test
  void streamErrorParsing() {
    assertEquals(Status.Code.CANCELLED, InferenceClient.parseStatus("CANCELLED: gone").getCode());
    assertEquals(Status.Code.UNKNOWN, InferenceClient.parseStatus("OK: fine").getCode());
    assertEquals("OK: fine", InferenceClient.parseStatus("OK: fine").getDescription());
    assertEquals(Status.Code.UNAUTHENTICATED, InferenceClient.parseStatus("UNAUTHENTICATED: who").getCode());
  }
}
