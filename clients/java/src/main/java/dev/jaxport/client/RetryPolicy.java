package dev.jaxport.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * gRPC's own retry (the service config's {@code retryPolicy}, applied by the channel under
 * every call): a call failing with UNAVAILABLE (server restarting, connection refused) is tried
 * again after an exponential, jittered backoff, up to {@code maxAttempts} in all (gRPC caps it
 * at 5). Read-only calls (health, metadata, repository index, statistics, shared-memory status)
 * are also retried on DEADLINE_EXCEEDED returned by the server; inference and calls that change
 * state are not, and streams are never retried. The call's deadline still bounds all attempts.
 */
public record RetryPolicy(int maxAttempts, Duration initialBackoff, Duration maxBackoff, double backoffMultiplier) {
  /** 5 attempts, backoff 0.2 s doubling up to 3 s. */
  public static final RetryPolicy DEFAULT =
      new RetryPolicy(5, Duration.ofMillis(200), Duration.ofSeconds(3), 2.0);

  static final String SERVICE = "inference.GRPCInferenceService";
  static final List<String> READS = List.of("ServerLive", "ServerReady", "ModelReady", "ServerMetadata",
      "ModelMetadata", "RepositoryIndex", "ModelStatistics", "SystemSharedMemoryStatus",
      "CudaSharedMemoryStatus");

  public RetryPolicy {
    if (maxAttempts < 2 || maxAttempts > 5) {
      throw ClientErrors.invalidArgument("retry policy: maxAttempts must be 2..5, got " + maxAttempts);
    }
    if (initialBackoff == null || maxBackoff == null || initialBackoff.isNegative() || initialBackoff.isZero()
        || maxBackoff.compareTo(initialBackoff) < 0 || !(backoffMultiplier > 0)) {
      throw ClientErrors.invalidArgument("retry policy: need 0 < initialBackoff <= maxBackoff and "
          + "backoffMultiplier > 0, got " + initialBackoff + ", " + maxBackoff + ", " + backoffMultiplier);
    }
  }

  private static String seconds(Duration d) {
    return String.format(java.util.Locale.ROOT, "%.3fs", d.toNanos() / 1e9);
  }

  private Map<String, Object> policy(String... codes) {
    // grpc-java's service-config parser wants JSON numbers as Double.
    return Map.of("maxAttempts", (double) maxAttempts, "initialBackoff", seconds(initialBackoff),
        "maxBackoff", seconds(maxBackoff), "backoffMultiplier", backoffMultiplier,
        "retryableStatusCodes", List.of(codes));
  }

  /** The service config (as ManagedChannelBuilder.defaultServiceConfig takes it). */
  public Map<String, Object> serviceConfig() {
    List<Object> reads = new ArrayList<>();
    for (String m : READS) {
      reads.add(Map.of("service", SERVICE, "method", m));
    }
    return Map.of("methodConfig", List.of(
        Map.of("name", List.of(Map.of("service", SERVICE)), "retryPolicy", policy("UNAVAILABLE")),
        Map.of("name", reads, "retryPolicy", policy("UNAVAILABLE", "DEADLINE_EXCEEDED")),
        // A stream is not retried: its requests are not idempotent as a whole.
        Map.of("name", List.of(Map.of("service", SERVICE, "method", "ModelStreamInfer")))));
  }
}
