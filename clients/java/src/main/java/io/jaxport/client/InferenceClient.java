package io.jaxport.client;

import com.google.common.util.concurrent.FutureCallback;
import com.google.common.util.concurrent.Futures;
import com.google.common.util.concurrent.ListenableFuture;
import com.google.common.util.concurrent.MoreExecutors;
import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelInferResponse;
import dev.jaxport.inference.ModelMetadataRequest;
import dev.jaxport.inference.ModelMetadataResponse;
import dev.jaxport.inference.ModelReadyRequest;
import dev.jaxport.inference.ModelStreamInferResponse;
import dev.jaxport.inference.ServerLiveRequest;
import dev.jaxport.inference.ServerMetadataRequest;
import dev.jaxport.inference.ServerMetadataResponse;
import dev.jaxport.inference.ServerReadyRequest;
import io.grpc.Channel;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A thin, typed client of an Open Inference Protocol (KServe v2) server such as the jaxport
 * bridge, over a {@link Channel} the caller owns (see {@link ManagedInferenceClient} for one that
 * owns its channel). Immutable and thread-safe; {@link #withDeadline} returns a copy.
 *
 * <p>Failed calls throw {@link io.grpc.StatusRuntimeException} unchanged: {@code
 * e.getStatus().getCode()} and {@code getDescription()} are the server's code and message.
 * Message size limits default to {@link #DEFAULT_MAX_MESSAGE_BYTES} (gRPC's own 4 MiB default
 * rejects real tensors).
 */
public class InferenceClient {
  /** Default send and receive limit: 256 MiB. */
  public static final int DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024;

  private final Channel channel;
  private final Duration deadline;
  private final int maxMessageBytes;

  public InferenceClient(Channel channel) {
    this(channel, null, DEFAULT_MAX_MESSAGE_BYTES);
  }

  /** deadline: per-call deadline (null for none); maxMessageBytes: send/receive limit. */
  public InferenceClient(Channel channel, Duration deadline, int maxMessageBytes) {
    this.channel = channel;
    this.deadline = deadline;
    this.maxMessageBytes = maxMessageBytes;
  }

  /** A copy whose every call has this deadline (measured from the call's start). */
  public InferenceClient withDeadline(Duration perCall) {
    return new InferenceClient(channel, perCall, maxMessageBytes);
  }

  /** A copy with another message size limit (send and receive). */
  public InferenceClient withMaxMessageBytes(int bytes) {
    return new InferenceClient(channel, deadline, bytes);
  }

  public Channel channel() {
    return channel;
  }

  private <S extends io.grpc.stub.AbstractStub<S>> S configure(S stub) {
    S s = stub.withMaxInboundMessageSize(maxMessageBytes).withMaxOutboundMessageSize(maxMessageBytes);
    return deadline == null ? s : s.withDeadlineAfter(deadline.toNanos(), TimeUnit.NANOSECONDS);
  }

  /** The generated blocking stub with this client's limits and deadline (protocol-level calls). */
  public GRPCInferenceServiceGrpc.GRPCInferenceServiceBlockingStub blockingStub() {
    return configure(GRPCInferenceServiceGrpc.newBlockingStub(channel));
  }

  /** The generated future stub with this client's limits and deadline. */
  public GRPCInferenceServiceGrpc.GRPCInferenceServiceFutureStub futureStub() {
    return configure(GRPCInferenceServiceGrpc.newFutureStub(channel));
  }

  private GRPCInferenceServiceGrpc.GRPCInferenceServiceStub asyncStub() {
    return configure(GRPCInferenceServiceGrpc.newStub(channel));
  }

  public boolean serverLive() {
    return blockingStub().serverLive(ServerLiveRequest.getDefaultInstance()).getLive();
  }

  public boolean serverReady() {
    return blockingStub().serverReady(ServerReadyRequest.getDefaultInstance()).getReady();
  }

  /** version "" lets the server choose. */
  public boolean modelReady(String model, String version) {
    return blockingStub()
        .modelReady(ModelReadyRequest.newBuilder().setName(model).setVersion(version).build())
        .getReady();
  }

  public ServerMetadataResponse serverMetadata() {
    return blockingStub().serverMetadata(ServerMetadataRequest.getDefaultInstance());
  }

  public ModelMetadataResponse modelMetadata(String model, String version) {
    return blockingStub()
        .modelMetadata(ModelMetadataRequest.newBuilder().setName(model).setVersion(version).build());
  }

  /** Run the model on the inputs (raw encoding, every output). */
  public InferResult infer(String model, Tensor... inputs) {
    return infer(InferRequest.builder(model).inputs(List.of(inputs)).build());
  }

  public InferResult infer(InferRequest request) {
    return InferResult.fromProto(blockingStub().modelInfer(request.toProto()));
  }

  /**
   * Asynchronous infer: the future completes with the result, or exceptionally with the
   * {@link io.grpc.StatusRuntimeException} of the failed call.
   */
  public CompletableFuture<InferResult> inferAsync(InferRequest request) {
    CompletableFuture<InferResult> result = new CompletableFuture<>();
    ListenableFuture<ModelInferResponse> call = futureStub().modelInfer(request.toProto());
    Futures.addCallback(
        call,
        new FutureCallback<>() {
          @Override
          public void onSuccess(ModelInferResponse r) {
            try {
              result.complete(InferResult.fromProto(r));
            } catch (RuntimeException e) {
              result.completeExceptionally(e);
            }
          }

          @Override
          public void onFailure(Throwable t) {
            result.completeExceptionally(t);
          }
        },
        MoreExecutors.directExecutor());
    result.whenComplete((r, t) -> {
      if (result.isCancelled()) {
        call.cancel(true);
      }
    });
    return result;
  }

  /** One result of a stream: either outputs or the server's error message for that request. */
  public record StreamResult(InferResult result, String error, String id) {
    public boolean failed() {
      return error != null && !error.isEmpty();
    }
  }

  /**
   * Send every request over one ModelStreamInfer call and collect one result per request, in
   * arrival order. A failed request is a {@link StreamResult} with its error message (the stream
   * carries no status for it); a failure of the stream itself throws StatusRuntimeException.
   */
  public List<StreamResult> streamInfer(List<InferRequest> requests) throws InterruptedException {
    List<StreamResult> results = new ArrayList<>();
    CountDownLatch done = new CountDownLatch(1);
    Throwable[] failure = new Throwable[1];
    StreamObserver<ModelInferRequest> out =
        asyncStub()
            .modelStreamInfer(
                new StreamObserver<>() {
                  @Override
                  public void onNext(ModelStreamInferResponse r) {
                    synchronized (results) {
                      if (!r.getErrorMessage().isEmpty()) {
                        results.add(new StreamResult(null, r.getErrorMessage(), r.getInferResponse().getId()));
                      } else {
                        InferResult ir = InferResult.fromProto(r.getInferResponse());
                        results.add(new StreamResult(ir, "", ir.id()));
                      }
                    }
                  }

                  @Override
                  public void onError(Throwable t) {
                    failure[0] = t;
                    done.countDown();
                  }

                  @Override
                  public void onCompleted() {
                    done.countDown();
                  }
                });
    for (InferRequest r : requests) {
      out.onNext(r.toProto());
    }
    out.onCompleted();
    done.await();
    if (failure[0] instanceof RuntimeException e) {
      throw e;
    }
    if (failure[0] != null) {
      throw new IllegalStateException(failure[0]);
    }
    synchronized (results) {
      return List.copyOf(results);
    }
  }
}
