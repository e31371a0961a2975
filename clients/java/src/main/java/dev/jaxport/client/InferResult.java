package dev.jaxport.client;

import dev.jaxport.inference.ModelInferResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/** A decoded inference response: outputs in the server's order. */
public record InferResult(String model, String version, String id, List<Tensor> outputs) {

  /** The output called {@code name}. */
  public Optional<Tensor> output(String name) {
    return outputs.stream().filter(t -> t.name().equals(name)).findFirst();
  }

  /**
   * Decode a wire response: raw_output_contents when present (the jaxport bridge always uses
   * them), typed contents otherwise. A malformed response is INTERNAL ({@link ClientErrors}).
   */
  public static InferResult fromProto(ModelInferResponse r) {
    int raw = r.getRawOutputContentsCount();
    if (raw != 0 && raw != r.getOutputsCount()) {
      throw ClientErrors.internal(
          "response has " + r.getOutputsCount() + " outputs but " + raw + " raw_output_contents");
    }
    List<Tensor> out = new ArrayList<>();
    for (int i = 0; i < r.getOutputsCount(); i++) {
      ModelInferResponse.InferOutputTensor o = r.getOutputs(i);
      long[] shape = o.getShapeList().stream().mapToLong(Long::longValue).toArray();
      out.add(
          raw != 0
              ? Tensor.raw(o.getName(), o.getDatatype(), shape, r.getRawOutputContents(i))
              : Tensor.fromContents(o.getName(), o.getDatatype(), shape, o.getContents()));
    }
    return new InferResult(r.getModelName(), r.getModelVersion(), r.getId(), List.copyOf(out));
  }
}
