package io.jaxport.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.nio.file.Path;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * An {@link InferenceClient} that owns its {@link ManagedChannel}: use it in try-with-resources.
 *
 * <pre>{@code
 * try (ManagedInferenceClient client = ManagedInferenceClient.forTarget("127.0.0.1:8001").build()) {
 *   InferResult r = client.infer("model", Tensor.ofFloat32("x", new long[] {2}, 1f, 2f));
 * }
 * }</pre>
 */
public final class ManagedInferenceClient extends InferenceClient implements AutoCloseable {
  private final ManagedChannel managed;

  private ManagedInferenceClient(ManagedChannel managed, Channel channel, Duration deadline, int max) {
    super(channel, deadline, max);
    this.managed = managed;
  }

  public static Builder forTarget(String target) {
    return new Builder(target);
  }

  /** Shut the channel down, waiting up to 5 s for calls in flight, then force it. */
  @Override
  public void close() {
    managed.shutdown();
    try {
      if (!managed.awaitTermination(5, TimeUnit.SECONDS)) {
        managed.shutdownNow();
      }
    } catch (InterruptedException e) {
      managed.shutdownNow();
      Thread.currentThread().interrupt();
    }
  }

  /** Builder: plaintext by default; TLS, client certificate, bearer token, limits and deadline optional. */
  public static final class Builder {
    private final String target;
    private boolean tls;
    private Path caPem;
    private Path certPem;
    private Path keyPem;
    private String token;
    private int maxMessageBytes = DEFAULT_MAX_MESSAGE_BYTES;
    private Duration deadline;

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

    /** Send {@code authorization: Bearer <token>} on every call. */
    public Builder bearerToken(String value) {
      this.token = value;
      return this;
    }

    public Builder maxMessageBytes(int bytes) {
      this.maxMessageBytes = bytes;
      return this;
    }

    /** Default per-call deadline. */
    public Builder deadline(Duration perCall) {
      this.deadline = perCall;
      return this;
    }

    /** Build; IllegalArgumentException naming the file if a CA, certificate or key cannot be read. */
    public ManagedInferenceClient build() {
      ChannelCredentials creds;
      if (caPem != null || certPem != null) {
        TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
        if (caPem != null) {
          try {
            b.trustManager(caPem.toFile());
          } catch (IOException | RuntimeException e) {
            throw new IllegalArgumentException("cannot read CA certificate " + caPem + ": " + e.getMessage(), e);
          }
        }
        if (certPem != null) {
          try {
            b.keyManager(certPem.toFile(), keyPem.toFile());
          } catch (IOException | RuntimeException e) {
            throw new IllegalArgumentException("cannot read client certificate " + certPem + " / key " + keyPem
                + " (the key must be unencrypted PKCS#8 PEM): " + e.getMessage(), e);
          }
        }
        creds = b.build();
      } else if (tls) {
        creds = TlsChannelCredentials.create();
      } else {
        creds = InsecureChannelCredentials.create();
      }
      ManagedChannel managed =
          Grpc.newChannelBuilder(target, creds).maxInboundMessageSize(maxMessageBytes).build();
      Channel channel = token == null ? managed : ClientInterceptors.intercept(managed, bearer(token));
      return new ManagedInferenceClient(managed, channel, deadline, maxMessageBytes);
    }
  }

  static ClientInterceptor bearer(String token) {
    Metadata.Key<String> key = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
          @Override
          public void start(Listener<R> listener, Metadata headers) {
            headers.put(key, "Bearer " + token);
            super.start(listener, headers);
          }
        };
      }
    };
  }
}
