import dev.jaxport.client.ClientErrors;
import dev.jaxport.client.InferRequest;
import dev.jaxport.client.InferResult;
import dev.jaxport.client.InferStream;
import dev.jaxport.client.InferenceClient;
import dev.jaxport.client.Tensor;
import inference.GRPCInferenceServiceGrpc;
import inference.GrpcService;
import io.grpc.StatusRuntimeException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;

public class Main {
  public static void main(String[] args) throws Exception {
    String[] a = args[0].split(" ");
    try (InferenceClient client = InferenceClient.forTarget(a[0])
        .trustCertificates(Path.of(a[1]))
        .clientCertificate(Path.of(a[2]), Path.of(a[3]))
        .bearerToken(a[4])
        .deadline(Duration.ofSeconds(60))
        .build()) {
      Tensor x = Tensor.ofFloat32("x", new long[] {3}, 1.5f, -2f, 4.25f);
      InferResult r = client.infer("echo", x);
      System.out.println("jaxport infer " + Arrays.toString(r.output("y").orElseThrow().asFloat32()));
      try {
        client.infer("echo", Tensor.ofFloat32("x", new long[] {2}, 1f, 2f));
      } catch (StatusRuntimeException e) {
        System.out.println("jaxport error " + e.getStatus().getCode() + " " + ClientErrors.isClientSide(e)
            + " " + e.getStatus().getDescription());
      }
      try {
        Tensor.ofFloat32("x", new long[] {3}, 1f);
      } catch (StatusRuntimeException e) {
        System.out.println("client error " + e.getStatus().getCode() + " " + ClientErrors.isClientSide(e));
      }
      try (InferStream s = client.openStream()) {
        s.send(InferRequest.builder("echo").id("s1").input(x).build());
        String first = s.next().orElseThrow().id();
        s.send(InferRequest.builder("no_such_model").id("s2").input(x).build());
        s.closeSend();
        InferenceClient.StreamResult second = s.next().orElseThrow();
        System.out.println("stream " + first + " " + second.id() + " " + second.code() + " " + s.next().isPresent());
      }
      // Triton's own generated stubs on the same class path, on the client's configured channel.
      var stub = GRPCInferenceServiceGrpc.newBlockingStub(client.configuredChannel());
      GrpcService.ModelMetadataResponse m =
          stub.modelMetadata(GrpcService.ModelMetadataRequest.newBuilder().setName("echo").build());
      System.out.println("triton metadata " + m.getName() + " " + m.getInputs(0).getName() + " " + m.getInputs(0).getShapeList());
      try {
        stub.modelMetadata(GrpcService.ModelMetadataRequest.newBuilder().setName("no_such_model").build());
      } catch (StatusRuntimeException e) {
        System.out.println("triton error " + e.getStatus().getCode());
      }
    }
  }
}
