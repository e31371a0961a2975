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
import dev.jaxport.inference.ModelMetadataRequest;
import dev.jaxport.inference.ModelMetadataResponse;
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
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
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
    public void modelMetadata(ModelMetadataRequest r, StreamObserver<ModelMetadataResponse> out) {
      // the version asked for comes back as the only version ("" when the server may choose)
      out.onNext(ModelMetadataResponse.newBuilder().setName(r.getName()).addVersions(r.getVersion()).build());
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

  static InferRequest request(String model, String id) {
    return InferRequest.builder(model).id(id).input(Tensor.ofInt32("k", new long[] {1}, 5)).build();
  }

  @Test
  void streamResultsKeepTheirStatusCode() throws Exception {
    List<InferenceClient.StreamResult> results = new ArrayList<>();
    try (InferStream s = InferenceClient.of(channel).openStream()) {
      s.send(request("echo", "1"));
      s.send(request("reject", "2"));
      s.send(request("plain", "3"));
      s.closeSend();
      for (Optional<InferenceClient.StreamResult> r = s.next(); r.isPresent(); r = s.next()) {
        results.add(r.get());
      }
      assertEquals(Optional.empty(), s.next(), "the end stays the end");
    }
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
  void aStreamIsBidirectional() throws Exception {
    // Each result is read before the next request is sent: the stream stays open between them.
    try (InferStream s = InferenceClient.of(channel).openStream()) {
      for (String id : List.of("a", "b", "c")) {
        s.send(request("echo", id));
        assertEquals(id, s.next().orElseThrow().id());
      }
      s.closeSend();
      assertEquals(Optional.empty(), s.next());
      StatusRuntimeException late = assertThrows(StatusRuntimeException.class, () -> s.send(request("echo", "d")));
      assertEquals(Status.Code.FAILED_PRECONDITION, late.getStatus().getCode());
      assertTrue(ClientErrors.isClientSide(late));
    }
  }

  @Test
  void aStreamWithoutAnEndHitsItsDeadline() throws Exception {
    InferenceClient c = InferenceClient.of(channel);
    assertEquals(InferenceClient.DEFAULT_STREAM_DEADLINE, c.effectiveStreamDeadline());
    assertEquals(Duration.ofSeconds(3), c.withDeadline(Duration.ofSeconds(3)).effectiveStreamDeadline());
    try (InferStream s = c.withStreamDeadline(Duration.ofMillis(300)).openStream()) {
      s.send(request("hang", "1"));
      s.closeSend();
      StatusRuntimeException e = assertThrows(StatusRuntimeException.class, s::next);
      assertEquals(Status.Code.DEADLINE_EXCEEDED, e.getStatus().getCode());
      assertFalse(ClientErrors.isClientSide(e));
      assertEquals(e, assertThrows(StatusRuntimeException.class, s::next), "the failure stays the failure");
    }
  }

  @Test
  void closingAnOpenStreamCancelsIt() throws Exception {
    InferStream s = InferenceClient.of(channel).openStream();
    s.send(request("hang", "1"));
    s.close();
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, s::next);
    assertEquals(Status.Code.CANCELLED, e.getStatus().getCode());
  }

  @Test
  void callbackStreams() throws Exception {
    List<InferenceClient.StreamResult> got = new ArrayList<>();
    CompletableFuture<Void> done = new CompletableFuture<>();
    StreamObserver<InferRequest> requests = InferenceClient.of(channel).streamInfer(new StreamObserver<>() {
      @Override
      public void onNext(InferenceClient.StreamResult r) {
        got.add(r);
      }

      @Override
      public void onError(Throwable t) {
        done.completeExceptionally(t);
      }

      @Override
      public void onCompleted() {
        done.complete(null);
      }
    });
    requests.onNext(request("echo", "1"));
    requests.onNext(request("reject", "2"));
    requests.onCompleted();
    done.get(30, TimeUnit.SECONDS);
    assertEquals(List.of("1", "2"), got.stream().map(InferenceClient.StreamResult::id).toList());
    assertEquals(Status.Code.NOT_FOUND, got.get(1).code());
  }

  @Test
  void metadataAndReadyWithoutAVersion() {
    InferenceClient c = InferenceClient.of(channel);
    assertEquals(List.of(""), c.modelMetadata("m").getVersionsList());
    assertEquals(List.of("3"), c.modelMetadata("m", "3").getVersionsList());
  }

  @Test
  void callCredentialsCarryTheToken() {
    // The in-process transport counts as secure (privacy and integrity), as TLS does.
    InferenceClient c = InferenceClient.of(channel);
    assertFalse(c.serverLive());
    InferenceClient withToken = c.withCallCredentials(BearerToken.of("s3cret"));
    assertTrue(withToken.serverLive());
    // The async stub carries the client's credentials (and limits and deadline) too.
    CompletableFuture<Boolean> live = new CompletableFuture<>();
    withToken.asyncStub().serverLive(ServerLiveRequest.getDefaultInstance(), new StreamObserver<>() {
      @Override
      public void onNext(ServerLiveResponse r) {
        live.complete(r.getLive());
      }

      @Override
      public void onError(Throwable t) {
        live.completeExceptionally(t);
      }

      @Override
      public void onCompleted() {}
    });
    assertTrue(live.join());
    // So does configuredChannel, for stubs of the caller's own.
    assertTrue(GRPCInferenceServiceGrpc.newBlockingStub(withToken.configuredChannel())
        .serverLive(ServerLiveRequest.getDefaultInstance()).getLive());
    assertFalse(GRPCInferenceServiceGrpc.newBlockingStub(withToken.channel())
        .serverLive(ServerLiveRequest.getDefaultInstance()).getLive());
    assertEquals(InferenceClient.DEFAULT_MAX_MESSAGE_BYTES, withToken.asyncStub().getCallOptions().getMaxInboundMessageSize());
    assertTrue(withToken.withDeadline(Duration.ofSeconds(5)).asyncStub().getCallOptions().getDeadline() != null);
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
