package dev.jaxport.client;

import dev.jaxport.inference.ModelInferRequest;
import java.util.ArrayList;
import java.util.List;

/**
 * A full inference request. Defaults: latest version, no id, every output, raw (binary) tensor
 * encoding. Build with {@link #builder(String)}.
 */
public final class InferRequest {
  private final String model;
  private final String version;
  private final String id;
  private final List<Tensor> inputs;
  private final List<String> outputs;
  private final boolean typed;

  private InferRequest(Builder b) {
    this.model = b.model;
    this.version = b.version;
    this.id = b.id;
    this.inputs = List.copyOf(b.inputs);
    this.outputs = List.copyOf(b.outputs);
    this.typed = b.typed;
  }

  public static Builder builder(String model) {
    return new Builder(model);
  }

  public String model() {
    return model;
  }

  public List<Tensor> inputs() {
    return inputs;
  }

  /** The wire message. */
  public ModelInferRequest toProto() {
    ModelInferRequest.Builder msg =
        ModelInferRequest.newBuilder().setModelName(model).setModelVersion(version).setId(id);
    for (Tensor t : inputs) {
      ModelInferRequest.InferInputTensor.Builder in =
          ModelInferRequest.InferInputTensor.newBuilder()
              .setName(t.name())
              .setDatatype(t.datatype());
      for (long d : t.shape()) {
        in.addShape(d);
      }
      if (typed) {
        in.setContents(t.typedContents());
      } else {
        msg.addRawInputContents(t.rawBytes());
      }
      msg.addInputs(in);
    }
    for (String name : outputs) {
      msg.addOutputs(ModelInferRequest.InferRequestedOutputTensor.newBuilder().setName(name));
    }
    return msg.build();
  }

  /** Builder of {@link InferRequest}. */
  public static final class Builder {
    private final String model;
    private String version = "";
    private String id = "";
    private final List<Tensor> inputs = new ArrayList<>();
    private final List<String> outputs = new ArrayList<>();
    private boolean typed;

    private Builder(String model) {
      this.model = model;
    }

    public Builder version(String v) {
      this.version = v;
      return this;
    }

    public Builder id(String v) {
      this.id = v;
      return this;
    }

    public Builder input(Tensor t) {
      inputs.add(t);
      return this;
    }

    public Builder inputs(List<Tensor> ts) {
      inputs.addAll(ts);
      return this;
    }

    /** Ask for this output only (repeatable); none asked means all outputs. */
    public Builder output(String name) {
      outputs.add(name);
      return this;
    }

    /** Send inputs in typed contents instead of raw bytes (impossible for FP16/BF16). */
    public Builder typed(boolean v) {
      this.typed = v;
      return this;
    }

    public InferRequest build() {
      return new InferRequest(this);
    }
  }
}
