package dev.jaxport.client.examples;

import dev.jaxport.inference.ModelMetadataResponse;
import dev.jaxport.inference.ServerMetadataResponse;
import io.grpc.StatusRuntimeException;
import dev.jaxport.client.InferRequest;
import dev.jaxport.client.InferResult;
import dev.jaxport.client.InferenceClient;
import dev.jaxport.client.Tensor;
import java.time.Duration;
import java.util.Arrays;

/**
 * A complete call of a jaxport bridge (or any Open Inference Protocol server): connect, read
 * server and model metadata, run one inference, read its outputs.
 *
 * <pre>mvn -q test-compile exec:exec@example -Dexample.url=127.0.0.1:8001 -Dexample.model=cf_fp32</pre>
 *
 * <p>(An example, compiled with the tests: not in the client's jar.)
 */
public final class InferExample {
  private InferExample() {}

  public static void main(String[] args) {
    String url = args.length > 0 ? args[0] : "127.0.0.1:8001";
    String model = args.length > 1 ? args[1] : "cf_fp32";
    try (InferenceClient client =
        InferenceClient.forTarget(url).deadline(Duration.ofSeconds(30)).build()) {
      ServerMetadataResponse server = client.serverMetadata();
      System.out.println("server " + server.getName() + " " + server.getVersion());
      ModelMetadataResponse meta = client.modelMetadata(model);
      InferRequest.Builder request = InferRequest.builder(model).id("example-1");
      for (ModelMetadataResponse.TensorMetadata in : meta.getInputsList()) {
        long[] shape = in.getShapeList().stream().mapToLong(Long::longValue).toArray();
        System.out.println("input  " + in.getName() + " " + in.getDatatype() + Arrays.toString(shape));
        int n = (int) Tensor.numElements(shape);
        if (in.getDatatype().equals("FP32")) {
          float[] data = new float[n];
          for (int i = 0; i < n; i++) {
            data[i] = i / 2f;
          }
          request.input(Tensor.ofFloat32(in.getName(), shape, data));
        } else {
          request.input(Tensor.raw(in.getName(), in.getDatatype(), shape, new byte[n * Tensor.itemSize(in.getDatatype())]));
        }
      }
      InferResult result = client.infer(request.build());
      for (Tensor t : result.outputs()) {
        System.out.println("output " + t.name() + " " + t.datatype() + Arrays.toString(t.shape())
            + " = " + Arrays.toString(t.asDoubles()));
      }
    } catch (StatusRuntimeException e) {
      // The server's status code and message, unchanged (or the client's own: ClientErrors).
      System.err.println("infer: " + e.getStatus().getCode() + ": " + e.getStatus().getDescription());
      System.exit(1);
    }
  }
}
