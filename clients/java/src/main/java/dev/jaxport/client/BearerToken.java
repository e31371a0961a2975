package dev.jaxport.client;

import io.grpc.CallCredentials;
import io.grpc.Metadata;
import io.grpc.SecurityLevel;
import io.grpc.Status;
import java.util.concurrent.Executor;

/**
 * {@code authorization: Bearer <token>} as gRPC {@link CallCredentials}. Unless built with
 * {@link #allowingPlaintext}, it refuses to travel on a connection without privacy and integrity:
 * the call fails with UNAUTHENTICATED before anything is sent, instead of leaking the token.
 */
public final class BearerToken extends CallCredentials {
  static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final String token;
  private final boolean allowPlaintext;

  private BearerToken(String token, boolean allowPlaintext) {
    if (token == null || token.isEmpty()) {
      throw ClientErrors.invalidArgument("bearer token is empty");
    }
    this.token = token;
    this.allowPlaintext = allowPlaintext;
  }

  /** A token that is only sent over TLS (or another transport with privacy and integrity). */
  public static BearerToken of(String token) {
    return new BearerToken(token, false);
  }

  /** A token also sent over plaintext: only for loopback or a trusted network (a sidecar, tests). */
  public static BearerToken allowingPlaintext(String token) {
    return new BearerToken(token, true);
  }

  public boolean allowsPlaintext() {
    return allowPlaintext;
  }

  @Override
  public void applyRequestMetadata(RequestInfo info, Executor executor, MetadataApplier applier) {
    if (!allowPlaintext && info.getSecurityLevel() != SecurityLevel.PRIVACY_AND_INTEGRITY) {
      applier.fail(Status.UNAUTHENTICATED.withDescription(
          "refusing to send a bearer token over a connection without transport security ("
              + info.getSecurityLevel() + "): use TLS, or BearerToken.allowingPlaintext to opt in"));
      return;
    }
    Metadata headers = new Metadata();
    headers.put(AUTHORIZATION, "Bearer " + token);
    applier.apply(headers);
  }
}
