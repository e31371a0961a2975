package dev.jaxport.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelInferResponse;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientStreamTracer;
import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.ChannelOption;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * gRPC's retry policy across a server restart on the same port: with retries on the request
 * survives, with them off it fails with UNAVAILABLE after one attempt. The restart happens right after an
 * attempt has failed (reported by a stream tracer), not after a guessed sleep.
 */
class RetryTest {
  static final class Echo extends GRPCInferenceServiceGrpc.GRPCInferenceServiceImplBase {
    @Override
    public void modelInfer(ModelInferRequest r, StreamObserver<ModelInferResponse> out) {
      out.onNext(ModelInferResponse.newBuilder().setId(r.getId()).build());
      out.onCompleted();
    }
  }

  static Server serve(int port) throws Exception {
    return NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
        .withOption(ChannelOption.SO_REUSEADDR, true)
        .addService(new Echo()).build().start();
  }

  /** Counts attempts (not gRPC's transparent replays) and releases a permit per failed one. */
  static final class Attempts implements ClientInterceptor {
    final AtomicInteger begun = new AtomicInteger();
    final Semaphore failed = new Semaphore(0);

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return next.newCall(method, options.withStreamTracerFactory(new ClientStreamTracer.Factory() {
        @Override
        public ClientStreamTracer newClientStreamTracer(ClientStreamTracer.StreamInfo info, Metadata headers) {
          if (!info.isTransparentRetry()) {
            begun.incrementAndGet();
          }
          return new ClientStreamTracer() {
            @Override
            public void streamClosed(Status status) {
              if (!status.isOk()) {
                failed.release();
              }
            }
          };
        }
      }));
    }
  }

  /** The call's error and its attempts (never how long it took: the machine may be loaded). */
  record Outcome(Throwable error, int attempts) {}

  static void awaitNotReady(ManagedChannel channel) throws InterruptedException {
    ConnectivityState state = channel.getState(false);
    while (state == ConnectivityState.READY) {
      CountDownLatch changed = new CountDownLatch(1);
      channel.notifyWhenStateChanged(state, changed::countDown);
      changed.await(10, TimeUnit.SECONDS);
      state = channel.getState(false);
    }
  }

  static Outcome inferAcrossRestart(RetryPolicy policy) throws Exception {
    Server server = serve(0);
    int port = server.getPort();
    Attempts attempts = new Attempts();
    InferenceClient.Builder builder = InferenceClient.forTarget("127.0.0.1:" + port)
        .deadline(Duration.ofSeconds(30)).configureChannel(b -> b.intercept(attempts));
    if (policy != null) {
      builder.retry(policy);
    }
    Server restarted = null;
    try (InferenceClient client = builder.build()) {
      InferRequest request = InferRequest.builder("echo").id("r").input(Tensor.ofInt32("k", new long[] {1}, 1)).build();
      client.infer(request);
      server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
      // The call below must meet a server that is down, not be replayed on a closing connection.
      awaitNotReady((ManagedChannel) client.channel());
      attempts.begun.set(0);
      attempts.failed.drainPermits();
      CompletableFuture<InferResult> call = client.inferAsync(request);
      while (!call.isDone() && !attempts.failed.tryAcquire(50, TimeUnit.MILLISECONDS)) {
        // wait for the first failed attempt (or for the call to end)
      }
      if (!call.isDone()) {
        restarted = serve(port);
      }
      Throwable error = null;
      try {
        call.get(30, TimeUnit.SECONDS);
      } catch (java.util.concurrent.ExecutionException e) {
        error = e.getCause();
      }
      return new Outcome(error, attempts.begun.get());
    } finally {
      if (restarted != null) {
        restarted.shutdownNow();
      }
    }
  }

  @Test
  void withRetriesARequestSurvivesARestart() throws Exception {
    // Backoff well above gRPC's reconnect backoff (1 s), so the retries outlast the reconnect.
    Outcome o = inferAcrossRestart(new RetryPolicy(5, Duration.ofSeconds(2), Duration.ofSeconds(5), 2.0));
    assertEquals(null, o.error(), "with retries the request must survive the restart");
    assertTrue(o.attempts() >= 2, "expected a retried request, got " + o.attempts() + " attempt(s)");
  }

  @Test
  void withoutRetriesARequestFailsWithOneAttempt() throws Exception {
    Outcome o = inferAcrossRestart(null);
    StatusRuntimeException e = assertTrue_instance(o.error());
    assertEquals(Status.Code.UNAVAILABLE, e.getStatus().getCode());
    assertEquals(1, o.attempts());
  }

  static StatusRuntimeException assertTrue_instance(Throwable t) {
    assertTrue(t instanceof StatusRuntimeException, "want a StatusRuntimeException, got " + t);
    return (StatusRuntimeException) t;
  }

  @Test
  void policyIsValidated() {
    StatusRuntimeException e = assertThrows(StatusRuntimeException.class, () -> new RetryPolicy(9, Duration.ofMillis(1), Duration.ofSeconds(1), 2));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.getStatus().getCode());
    assertTrue(e.getStatus().getDescription().contains("maxAttempts must be 2..5, got 9"), e.getStatus().getDescription());
    e = assertThrows(StatusRuntimeException.class, () -> new RetryPolicy(3, Duration.ofSeconds(2), Duration.ofSeconds(1), 2));
    assertTrue(e.getStatus().getDescription().contains("initialBackoff <= maxBackoff"), e.getStatus().getDescription());
  }
}
