package dev.jaxport.client;

import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;

/**
 * The client's one error type. Everything this client throws on purpose is a {@link
 * StatusRuntimeException}: a failed call's status exactly as the server sent it, or an error the
 * client found itself before anything was sent (a tensor whose data does not fill its shape, a
 * value out of its datatype's range, an unreadable certificate, a bearer token over plaintext),
 * or in what came back (a malformed response). The client's own carry a code that says what
 * went wrong (INVALID_ARGUMENT for bad input, FAILED_PRECONDITION for a configuration that
 * cannot work, INTERNAL for a malformed response), a description naming the offending thing, and
 * the trailer {@code jaxport-client-error: true}, which {@link #isClientSide} reads. One {@code
 * catch (StatusRuntimeException e)} handles all of them.
 */
public final class ClientErrors {
  /** Trailer key marking an error the client raised itself. */
  public static final Metadata.Key<String> CLIENT_SIDE =
      Metadata.Key.of("jaxport-client-error", Metadata.ASCII_STRING_MARSHALLER);

  private ClientErrors() {}

  /** Whether {@code t} is an error this client raised itself (nothing, or not this, was sent). */
  public static boolean isClientSide(Throwable t) {
    if (!(t instanceof StatusRuntimeException e) || e.getTrailers() == null) {
      return false;
    }
    return "true".equals(e.getTrailers().get(CLIENT_SIDE));
  }

  static StatusRuntimeException of(Status.Code code, String description, Throwable cause) {
    Metadata trailers = new Metadata();
    trailers.put(CLIENT_SIDE, "true");
    return code.toStatus().withDescription(description).withCause(cause).asRuntimeException(trailers);
  }

  /** Bad input: a tensor, a value, a file, a policy. */
  static StatusRuntimeException invalidArgument(String description) {
    return of(Status.Code.INVALID_ARGUMENT, description, null);
  }

  static StatusRuntimeException invalidArgument(String description, Throwable cause) {
    return of(Status.Code.INVALID_ARGUMENT, description, cause);
  }

  /** A configuration that cannot work (a bearer token over plaintext). */
  static StatusRuntimeException failedPrecondition(String description) {
    return of(Status.Code.FAILED_PRECONDITION, description, null);
  }

  /** What came back cannot be decoded. */
  static StatusRuntimeException internal(String description) {
    return of(Status.Code.INTERNAL, description, null);
  }
}
