// docs/scale-out.md's Java example, run by tests/scale/scale_ray.py against the fronts of a
// Ray cluster: a grpc-java name resolver holding the fronts' addresses and round_robin as the
// channel's policy, under jaxport's Java client. Sends N calls to the suite's cf_fp32 with
// data_in = [[0,1,2],[3,4,5]], checks each answer against EXPECTED (data_out, comma-separated,
// rtol 1e-5), and prints {"calls": N, "by_address": {...}} (each call's peer, from the
// transport's attributes).
//
//   java -cp CLASSPATH tests/scale/java/RoundRobin.java N EXPECTED_CSV HOST:PORT [HOST:PORT...]

import dev.jaxport.client.InferResult;
import dev.jaxport.client.InferenceClient;
import dev.jaxport.client.Tensor;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.EquivalentAddressGroup;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.NameResolver;
import io.grpc.NameResolverProvider;
import io.grpc.NameResolverRegistry;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

public final class RoundRobin {
  /** The fronts as a name resolver: every address at once, for round_robin to balance over. */
  static final class Fronts extends NameResolverProvider {
    private final List<EquivalentAddressGroup> fronts;

    Fronts(List<InetSocketAddress> addresses) {
      fronts = addresses.stream().map(EquivalentAddressGroup::new).toList();
    }

    @Override protected boolean isAvailable() { return true; }

    @Override protected int priority() { return 5; }

    @Override public String getDefaultScheme() { return "jaxport"; }

    @Override public NameResolver newNameResolver(URI target, NameResolver.Args args) {
      return new NameResolver() {
        @Override public String getServiceAuthority() { return "fronts"; }

        @Override public void start(Listener2 listener) {
          listener.onResult(ResolutionResult.newBuilder().setAddresses(fronts).build());
        }

        @Override public void shutdown() { }
      };
    }
  }

  /** Counts the calls each peer answered. */
  static final class Peers implements ClientInterceptor {
    final Map<String, AtomicInteger> counts = new ConcurrentHashMap<>();

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
        @Override public void start(Listener<R> listener, Metadata headers) {
          ClientCall<Q, R> call = delegate();
          super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
            @Override public void onHeaders(Metadata h) {
              SocketAddress peer = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
              String key = peer instanceof InetSocketAddress a ? a.getHostString() + ":" + a.getPort() : String.valueOf(peer);
              counts.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
              super.onHeaders(h);
            }
          }, headers);
        }
      };
    }
  }

  public static void main(String[] args) {
    int n = Integer.parseInt(args[0]);
    String[] expected = args[1].split(",");
    List<InetSocketAddress> addresses = new ArrayList<>();
    for (int i = 2; i < args.length; i++) {
      int colon = args[i].lastIndexOf(':');
      addresses.add(new InetSocketAddress(args[i].substring(0, colon), Integer.parseInt(args[i].substring(colon + 1))));
    }
    NameResolverRegistry.getDefaultRegistry().register(new Fronts(addresses));
    Peers peers = new Peers();
    float[] x = {0, 1, 2, 3, 4, 5};
    try (InferenceClient client = InferenceClient.forTarget("jaxport:///fronts")
        .configureChannel(b -> b.defaultLoadBalancingPolicy("round_robin").intercept(peers)).build()) {
      for (int i = 0; i < n; i++) {
        InferResult out = client.infer("cf_fp32", Tensor.ofFloat32("data_in", new long[] {2, 3}, x));
        float[] y = out.output("data_out").orElseThrow().asFloat32();
        for (int j = 0; j < expected.length; j++) {
          float want = Float.parseFloat(expected[j]);
          float got = y[j];
          if (Math.abs(got - want) > 1e-6 + 1e-5 * Math.abs(want)) {
            throw new AssertionError("call " + i + " element " + j + ": got " + got + ", want " + want);
          }
        }
      }
    }
    StringBuilder json = new StringBuilder("{\"calls\": " + n + ", \"by_address\": {");
    Map<String, AtomicInteger> sorted = new TreeMap<>(peers.counts);
    int k = 0;
    for (Map.Entry<String, AtomicInteger> e : sorted.entrySet()) {
      json.append(k++ == 0 ? "" : ", ").append('"').append(e.getKey()).append("\": ").append(e.getValue().get());
    }
    System.out.println(json.append("}}"));
  }
}
