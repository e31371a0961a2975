package dev.jaxport.client;

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
import io.grpc.CallCredentials;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A thin, typed client of an Open Inference Protocol (KServe v2) server such as the jaxport
 * bridge. Immutable and thread-safe; {@code with...} methods return copies on the same channel.
 *
 * <p>Channel ownership is explicit: {@link #forTarget} builds a client that owns its channel
 * (close it, e.g. with try-with-resources); {@link #of(Channel)} wraps a channel the caller
 * owns, and {@link #close} then leaves it alone. Copies made by {@code with...} never own it.
 *
 * <pre>{@code
 * try (InferenceClient client = InferenceClient.forTarget("127.0.0.1:8001").build()) {
 *   InferResult r = client.infer("model", Tensor.ofFloat32("x", new long[] {2}, 1f, 2f));
 * }
 * }</pre>
 *
 * <p>Failed calls throw {@link io.grpc.StatusRuntimeException} unchanged: {@code
 * e.getStatus().getCode()} and {@code getDescription()} are the server's code and message. The
 * client's own errors (bad tensors, unreadable certificates, malformed responses) are
 * StatusRuntimeExceptions too ({@link ClientErrors}): one catch handles everything.
 * Message size limits default to {@link #DEFAULT_MAX_MESSAGE_BYTES} (gRPC's own 4 MiB default
 * rejects real tensors). A stream without a deadline of its own gets
 * {@link #DEFAULT_STREAM_DEADLINE}, so a stream never waits forever.
 *
 * <p>The channel carries no transport of its own choosing: the application puts one on its
 * class path (grpc-netty-shaded, grpc-netty or grpc-okhttp) and {@link Grpc#newChannelBuilder}
 * finds it.
 */
public final class InferenceClient implements AutoCloseable {
  /** Default send and receive limit: 256 MiB. */
  public static final int DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024;

  /** Deadline of a stream when neither a stream deadline nor a per-call deadline is set. */
  public static final Duration DEFAULT_STREAM_DEADLINE = Duration.ofSeconds(60);

  private final Channel channel;
  private final ManagedChannel owned; // null: the caller owns the channel
  private final Duration deadline;
  private final Duration streamDeadline;
  private final int maxMessageBytes;
  private final CallCredentials credentials;

  private InferenceClient(Channel channel, ManagedChannel owned, Duration deadline, Duration streamDeadline,
      int maxMessageBytes, CallCredentials credentials) {
    this.channel = channel;
    this.owned = owned;
    this.deadline = deadline;
    this.streamDeadline = streamDeadline;
    this.maxMessageBytes = maxMessageBytes;
    this.credentials = credentials;
  }

  /** Wrap a channel the caller made and keeps owning ({@link #close} does not shut it down). */
  public static InferenceClient of(Channel channel) {
    return new InferenceClient(channel, null, null, null, DEFAULT_MAX_MESSAGE_BYTES, null);
  }

  /** A builder of a client that owns its channel to target ("host:port" or a gRPC target). */
  public static Builder forTarget(String target) {
    return new Builder(target);
  }

  private InferenceClient copy(Duration deadline, Duration streamDeadline, int max, CallCredentials creds) {
    return new InferenceClient(channel, null, deadline, streamDeadline, max, creds);
  }

  /** A copy whose every call has this deadline (measured from the call's start; null: none). */
  public InferenceClient withDeadline(Duration perCall) {
    return copy(perCall, streamDeadline, maxMessageBytes, credentials);
  }

  /** A copy whose streams have this deadline (instead of the per-call one or the default). */
  public InferenceClient withStreamDeadline(Duration perStream) {
    return copy(deadline, perStream, maxMessageBytes, credentials);
  }

  /** A copy with another message size limit (send and receive). */
  public InferenceClient withMaxMessageBytes(int bytes) {
    return copy(deadline, streamDeadline, bytes, credentials);
  }

  /** A copy that sends these credentials on every call (e.g. {@link BearerToken#of}). */
  public InferenceClient withCallCredentials(CallCredentials creds) {
    return copy(deadline, streamDeadline, maxMessageBytes, creds);
  }

  /** The channel itself (no settings of this client applied; see {@link #configuredChannel}). */
  public Channel channel() {
    return channel;
  }

  /**
   * A Channel that applies this client's call credentials, message limits and per-call deadline
   * (unless a call sets its own) to every call made on it: for stubs of your own, such as
   * another generated copy of the protocol (Triton's Java stubs live beside ours:
   * {@code inference.GRPCInferenceServiceGrpc.newBlockingStub(client.configuredChannel())}).
   */
  public Channel configuredChannel() {
    return ClientInterceptors.intercept(channel, new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        CallOptions o = options;
        if (o.getMaxInboundMessageSize() == null) {
          o = o.withMaxInboundMessageSize(maxMessageBytes);
        }
        if (o.getMaxOutboundMessageSize() == null) {
          o = o.withMaxOutboundMessageSize(maxMessageBytes);
        }
        if (credentials != null && o.getCredentials() == null) {
          o = o.withCallCredentials(credentials);
        }
        if (deadline != null && o.getDeadline() == null) {
          o = o.withDeadlineAfter(deadline.toNanos(), TimeUnit.NANOSECONDS);
        }
        return next.newCall(method, o);
      }
    });
  }

  /** Whether {@link #close} shuts the channel down (built by {@link #forTarget}). */
  public boolean ownsChannel() {
    return owned != null;
  }

  /** The deadline a stream gets: the stream deadline, else the per-call one, else the default. */
  public Duration effectiveStreamDeadline() {
    return streamDeadline != null ? streamDeadline : deadline != null ? deadline : DEFAULT_STREAM_DEADLINE;
  }

  /**
   * Shut an owned channel down, waiting up to 5 s for calls in flight, then force it; nothing
   * for a channel the caller owns.
   */
  @Override
  public void close() {
    if (owned == null) {
      return;
    }
    owned.shutdown();
    try {
      if (!owned.awaitTermination(5, TimeUnit.SECONDS)) {
        owned.shutdownNow();
      }
    } catch (InterruptedException e) {
      owned.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  private <S extends io.grpc.stub.AbstractStub<S>> S configure(S stub, Duration after) {
    S s = stub.withMaxInboundMessageSize(maxMessageBytes).withMaxOutboundMessageSize(maxMessageBytes);
    if (credentials != null) {
      s = s.withCallCredentials(credentials);
    }
    return after == null ? s : s.withDeadlineAfter(after.toNanos(), TimeUnit.NANOSECONDS);
  }

  /** The generated blocking stub with this client's limits, credentials and deadline. */
  public GRPCInferenceServiceGrpc.GRPCInferenceServiceBlockingStub blockingStub() {
    return configure(GRPCInferenceServiceGrpc.newBlockingStub(channel), deadline);
  }

  /** The generated future stub with this client's limits, credentials and deadline. */
  public GRPCInferenceServiceGrpc.GRPCInferenceServiceFutureStub futureStub() {
    return configure(GRPCInferenceServiceGrpc.newFutureStub(channel), deadline);
  }

  /**
   * The generated asynchronous ({@link StreamObserver}) stub with this client's limits,
   * credentials and per-call deadline (its clock starts now: take a fresh stub per call). For
   * ModelStreamInfer prefer {@link #openStream} or {@link #streamInfer(StreamObserver)}, which
   * apply the stream deadline.
   */
  public GRPCInferenceServiceGrpc.GRPCInferenceServiceStub asyncStub() {
    return configure(GRPCInferenceServiceGrpc.newStub(channel), deadline);
  }

  public boolean serverLive() {
    return blockingStub().serverLive(ServerLiveRequest.getDefaultInstance()).getLive();
  }

  public boolean serverReady() {
    return blockingStub().serverReady(ServerReadyRequest.getDefaultInstance()).getReady();
  }

  /** Whether the server's choice of version (usually the latest) of the model is ready. */
  public boolean modelReady(String model) {
    return modelReady(model, "");
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

  /** Metadata of the model: its versions, platform and input/output signatures. */
  public ModelMetadataResponse modelMetadata(String model) {
    return modelMetadata(model, "");
  }

  /** Metadata of one version of the model ("" lets the server choose). */
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

  /**
   * One result of a stream: outputs, or the failure of that request. {@code error} is the
   * server's error_message as sent; {@code status} keeps its code: servers that prefix the status
   * name ("INVALID_ARGUMENT: ...", as the jaxport bridge and Triton do) keep it, any other text is
   * UNKNOWN with the message unchanged. OK with a null error for a success.
   */
  public record StreamResult(InferResult result, Status status, String error, String id) {
    public boolean failed() {
      return !status.isOk();
    }

    /** The code of a failed request (OK for a result). */
    public Status.Code code() {
      return status.getCode();
    }

    static StreamResult ok(InferResult r) {
      return new StreamResult(r, Status.OK, null, r.id());
    }

    /** The result of a request the stream answered with error_message. */
    public static StreamResult failure(String errorMessage, String id) {
      return new StreamResult(null, parseStatus(errorMessage), errorMessage, id);
    }
  }

  /** "CODE: message" -> that status; other text -> UNKNOWN with the text as description. */
  static Status parseStatus(String errorMessage) {
    int sep = errorMessage.indexOf(": ");
    if (sep > 0) {
      try {
        Status.Code code = Status.Code.valueOf(errorMessage.substring(0, sep));
        if (code != Status.Code.OK) {
          return code.toStatus().withDescription(errorMessage.substring(sep + 2));
        }
      } catch (IllegalArgumentException notACode) {
        // fall through: not a status name
      }
    }
    return Status.UNKNOWN.withDescription(errorMessage);
  }

  /** The result of one stream response (a result, or a request's failure in error_message). */
  static StreamResult streamResult(ModelStreamInferResponse r) {
    if (!r.getErrorMessage().isEmpty()) {
      return StreamResult.failure(r.getErrorMessage(), r.getInferResponse().getId());
    }
    return StreamResult.ok(InferResult.fromProto(r.getInferResponse()));
  }

  /**
   * Open a ModelStreamInfer call, callback style: send requests on the returned observer
   * ({@code onNext}, then {@code onCompleted}); {@code results} gets one {@link StreamResult}
   * per response as it arrives (a failed request is a result whose {@code status()} keeps its
   * code, and the stream goes on), then {@code onCompleted}, or {@code onError} with the
   * StatusRuntimeException that ended the whole stream (its deadline, {@link
   * #effectiveStreamDeadline}, included). The returned observer is not thread-safe (gRPC's
   * rule): send from one thread at a time.
   */
  public StreamObserver<InferRequest> streamInfer(StreamObserver<StreamResult> results) {
    StreamObserver<ModelInferRequest> requests =
        configure(GRPCInferenceServiceGrpc.newStub(channel), effectiveStreamDeadline())
            .modelStreamInfer(new StreamObserver<>() {
              @Override
              public void onNext(ModelStreamInferResponse r) {
                StreamResult result;
                try {
                  result = streamResult(r);
                } catch (StatusRuntimeException e) {
                  result = new StreamResult(null, e.getStatus(), e.getStatus().getDescription(), r.getInferResponse().getId());
                }
                results.onNext(result);
              }

              @Override
              public void onError(Throwable t) {
                results.onError(Status.fromThrowable(t).asRuntimeException(Status.trailersFromThrowable(t)));
              }

              @Override
              public void onCompleted() {
                results.onCompleted();
              }
            });
    return new StreamObserver<>() {
      @Override
      public void onNext(InferRequest r) {
        requests.onNext(r.toProto());
      }

      @Override
      public void onError(Throwable t) {
        requests.onError(t);
      }

      @Override
      public void onCompleted() {
        requests.onCompleted();
      }
    };
  }

  /**
   * Open a ModelStreamInfer call, blocking style: {@link InferStream#send} requests and {@link
   * InferStream#next} results in arrival order, interleaved as you like; close it when done
   * (try-with-resources). The stream has {@link #effectiveStreamDeadline}.
   */
  public InferStream openStream() {
    return new InferStream(configure(GRPCInferenceServiceGrpc.newStub(channel), effectiveStreamDeadline()));
  }

  /**
   * Builder of a client that owns its channel: plaintext by default; TLS, client certificate,
   * bearer token, limits, deadlines and retries optional.
   */
  public static final class Builder {
    private final String target;
    private boolean tls;
    private Path caPem;
    private Path certPem;
    private Path keyPem;
    private String token;
    private boolean tokenOverPlaintext;
    private int maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES;
    private Duration deadline;
    private Duration streamDeadline;
    private RetryPolicy retry;
    private java.util.function.Consumer<ManagedChannelBuilder<?>> channelConfig = b -> { };

    private Builder(String target) {
      this.target = target;
    }

    /** Use TLS with the JVM's trust store. */
    public Builder useTransportSecurity() {
      this.tls = true;
      return this;
    }

    /** Use TLS trusting only the CA certificate(s) in this PEM file (private PKI). */
    public Builder trustCertificates(Path caPem) {
      this.tls = true;
      this.caPem = caPem;
      return this;
    }

    /**
     * Use TLS and present this client certificate (mutual TLS). {@code keyPem} must be an
     * unencrypted PKCS#8 PEM key ({@code -----BEGIN PRIVATE KEY-----}); convert another format
     * with {@code openssl pkcs8 -topk8 -nocrypt -in key.pem -out key.pk8.pem}.
     */
    public Builder clientCertificate(Path certPem, Path keyPem) {
      this.tls = true;
      this.certPem = certPem;
      this.keyPem = keyPem;
      return this;
    }

    /**
     * Send {@code authorization: Bearer <token>} on every call ({@link BearerToken} call
     * credentials). Needs TLS: {@link #build} refuses it over plaintext unless
     * {@link #allowBearerTokenOverPlaintext} is also given.
     */
    public Builder bearerToken(String value) {
      this.token = value;
      return this;
    }

    /** Explicit opt-in to send the bearer token over plaintext (loopback, trusted sidecar). */
    public Builder allowBearerTokenOverPlaintext() {
      this.tokenOverPlaintext = true;
      return this;
    }

    public Builder maxMessageBytes(int bytes) {
      this.maxMessageBytes = bytes;
      return this;
    }

    /** Default per-call deadline (none by default; streams then get DEFAULT_STREAM_DEADLINE). */
    public Builder deadline(Duration perCall) {
      this.deadline = perCall;
      return this;
    }

    /** Deadline of each stream (default: the per-call deadline, else DEFAULT_STREAM_DEADLINE). */
    public Builder streamDeadline(Duration perStream) {
      this.streamDeadline = perStream;
      return this;
    }

    /** Turn on gRPC's retry policy (off by default: a call to a server that is down fails at once). */
    public Builder retry(RetryPolicy policy) {
      this.retry = policy;
      return this;
    }

    /**
     * Further settings of the channel builder, applied last (interceptors, keepalive, executors,
     * user agent, ...).
     */
    public Builder configureChannel(java.util.function.Consumer<ManagedChannelBuilder<?>> config) {
      this.channelConfig = this.channelConfig.andThen(config);
      return this;
    }

    /**
     * Build (no I/O: the channel connects on the first call). StatusRuntimeException
     * ({@link ClientErrors}): INVALID_ARGUMENT naming the file if a CA, certificate or key
     * cannot be read, FAILED_PRECONDITION for a bearer token over plaintext without the opt-in.
     */
    public InferenceClient build() {
      if (token != null && !tls && !tokenOverPlaintext) {
        throw ClientErrors.failedPrecondition("refusing to send a bearer token over plaintext to " + target
            + ": use TLS (useTransportSecurity / trustCertificates / clientCertificate) or opt in with"
            + " allowBearerTokenOverPlaintext()");
      }
      ChannelCredentials creds;
      if (caPem != null || certPem != null) {
        TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
        if (caPem != null) {
          try {
            b.trustManager(caPem.toFile());
          } catch (IOException | RuntimeException e) {
            throw ClientErrors.invalidArgument("cannot read CA certificate " + caPem + ": " + e.getMessage(), e);
          }
        }
        if (certPem != null) {
          try {
            b.keyManager(certPem.toFile(), keyPem.toFile());
          } catch (IOException | RuntimeException e) {
            throw ClientErrors.invalidArgument("cannot read client certificate " + certPem + " / key " + keyPem
                + " (the key must be unencrypted PKCS#8 PEM): " + e.getMessage(), e);
          }
        }
        creds = b.build();
      } else if (tls) {
        creds = TlsChannelCredentials.create();
      } else {
        creds = InsecureChannelCredentials.create();
      }
      ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(target, creds).maxInboundMessageSize(maxMessageBytes);
      if (retry != null) {
        builder.defaultServiceConfig(retry.serviceConfig()).enableRetry().maxRetryAttempts(retry.maxAttempts());
      }
      channelConfig.accept(builder);
      ManagedChannel managed = builder.build();
      CallCredentials callCreds = token == null ? null
          : tokenOverPlaintext ? BearerToken.allowingPlaintext(token) : BearerToken.of(token);
      return new InferenceClient(managed, managed, deadline, streamDeadline, maxMessageBytes, callCreds);
    }
  }
}
