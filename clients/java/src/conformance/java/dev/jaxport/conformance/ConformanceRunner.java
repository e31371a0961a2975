package dev.jaxport.conformance;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.jaxport.inference.CudaSharedMemoryRegisterRequest;
import dev.jaxport.inference.CudaSharedMemoryStatusRequest;
import dev.jaxport.inference.CudaSharedMemoryUnregisterRequest;
import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.InferParameter;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelStreamInferResponse;
import io.grpc.CallOptions;
import io.grpc.stub.StreamObserver;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import dev.jaxport.inference.ModelMetadataResponse;
import dev.jaxport.inference.ServerMetadataResponse;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import dev.jaxport.client.InferRequest;
import dev.jaxport.client.InferStream;
import dev.jaxport.client.InferResult;
import dev.jaxport.client.InferenceClient;
import dev.jaxport.client.Tensor;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.stream.Stream;

/**
 * Java runner of the shared conformance suite (tests/conformance/cases) against any Open
 * Inference Protocol server, through the jaxport Java client:
 *
 * <pre>mvn -q test exec:exec@conformance -Dconformance.url=127.0.0.1:8001</pre>
 *
 * Prints one PASS/FAIL/N/A line per case and {@code conformance java: N passed, M failed[, K not
 * applicable]}; fails (non-zero Maven exit) if any case failed. A call that succeeds where the
 * case expects an error status is a FAIL ("call succeeded (...), expected status X").
 * {@code --features all|core|LIST} (or {@code --features=LIST} as one argument) names what the
 * server claims beyond the core protocol; cases needing more are N/A. {@code --json FILE} and
 * {@code --junit FILE} (or {@code --json=FILE}, {@code --junit=FILE}) write the results as the
 * Python and Go runners do ({@link Report}).
 */
public final class ConformanceRunner {
  /** A mismatch in a successful answer. */
  static final class CaseFailure extends RuntimeException {
    CaseFailure(String msg) {
      super(msg);
    }
  }

  private final InferenceClient client;

  ConformanceRunner(InferenceClient client) {
    this.client = client;
  }

  /** A case file plus its directory (data paths are relative to it). */
  record Case(String name, JsonObject json, Path dir) {
    String rpc() {
      return json.get("rpc").getAsString();
    }

    JsonObject request() {
      return json.getAsJsonObject("request");
    }

    JsonObject expect() {
      return json.getAsJsonObject("expect");
    }

    List<String> requires() {
      List<String> out = new ArrayList<>();
      if (json.has("requires")) {
        json.getAsJsonArray("requires").forEach(e -> out.add(e.getAsString()));
      }
      return out;
    }
  }

  static final List<String> CUDA_RPCS =
      List.of("CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister");

  static final List<String> KNOWN_RPCS =
      List.of("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
          "ModelInfer", "ModelStreamInfer", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
          "CudaSharedMemoryUnregister");

  /** Every *.json case in dir, sorted by name and checked for shape. */
  static List<Case> loadCases(Path dir) throws IOException {
    List<Path> files;
    try (Stream<Path> s = Files.list(dir)) {
      files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
    }
    if (files.isEmpty()) {
      throw new IOException("no case files (*.json) in " + dir);
    }
    List<Case> cases = new ArrayList<>();
    for (Path p : files) {
      JsonObject json = JsonParser.parseString(Files.readString(p, StandardCharsets.UTF_8)).getAsJsonObject();
      String stem = p.getFileName().toString().replaceFirst("\\.json$", "");
      if (!json.has("name") || !json.get("name").getAsString().equals(stem)) {
        throw new IOException(p + ": name does not match the file name");
      }
      if (!json.has("rpc") || !KNOWN_RPCS.contains(json.get("rpc").getAsString())) {
        throw new IOException(p + ": unknown rpc " + json.get("rpc"));
      }
      if (json.has("transport") && !List.of("grpc", "rest").contains(json.get("transport").getAsString())) {
        throw new IOException(p + ": unknown transport " + json.get("transport") + " (known: grpc, rest)");
      }
      cases.add(new Case(stem, json, dir));
    }
    return cases;
  }

  static long[] shape(JsonObject t) {
    JsonArray a = t.getAsJsonArray("shape");
    long[] out = new long[a.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = a.get(i).getAsLong();
    }
    return out;
  }

  static String str(JsonObject o, String key) {
    return o.has(key) ? o.get(key).getAsString() : "";
  }

  /** The bytes a case tensor describes: a data file, or a ramp start + step * (i % modulo). */
  static byte[] tensorBytes(Case c, JsonObject t) throws IOException {
    if (t.has("data")) {
      return Npy.readData(c.dir().resolve(t.get("data").getAsString()));
    }
    if (t.has("ramp")) {
      JsonObject r = t.getAsJsonObject("ramp");
      double start = r.get("start").getAsDouble();
      double step = r.get("step").getAsDouble();
      long modulo = r.get("modulo").getAsLong();
      int n = (int) Tensor.numElements(shape(t));
      String dt = t.get("datatype").getAsString();
      if (!dt.equals("FP32")) {
        throw new IOException("ramp data is defined for FP32 here, not " + dt);
      }
      ByteBuffer b = ByteBuffer.allocate(4 * n).order(ByteOrder.LITTLE_ENDIAN);
      for (int i = 0; i < n; i++) {
        b.putFloat((float) (start + step * (i % modulo)));
      }
      return b.array();
    }
    throw new IOException("case " + c.name() + ": tensor without data or ramp");
  }

  static String codeName(StatusRuntimeException e) {
    return e.getStatus().getCode().name();
  }

  /**
   * Throws (CaseFailure or anything) unless the server answers as the case expects, or as one of
   * its {@code expect.alternatives} (the other answers the protocol allows; each a whole
   * expectation judged with its own call).
   */
  void run(Case c) throws Exception {
    try {
      runOne(c);
    } catch (CaseFailure first) {
      if (!c.expect().has("alternatives")) {
        throw first;
      }
      List<String> failures = new ArrayList<>(List.of(first.getMessage()));
      for (JsonElement alt : c.expect().getAsJsonArray("alternatives")) {
        JsonObject json = c.json().deepCopy();
        json.add("expect", alt.getAsJsonObject());
        try {
          runOne(new Case(c.name(), json, c.dir()));
          return;
        } catch (CaseFailure other) {
          failures.add(other.getMessage());
        } catch (StatusRuntimeException other) {
          failures.add("status " + codeName(other) + " (\"" + other.getStatus().getDescription()
              + "\"), expected " + alt.getAsJsonObject().get("code").getAsString());
        }
      }
      throw new CaseFailure(String.join(" | or: ", failures));
    }
  }

  private void runOne(Case c) throws Exception {
    String want = c.expect().get("code").getAsString();
    if (want.equals("OK")) {
      call(c);
      return;
    }
    String answer;
    try {
      answer = callOnly(c);
    } catch (StatusRuntimeException e) {
      String msg = e.getStatus().getDescription() == null ? "" : e.getStatus().getDescription();
      if (!codeName(e).equals(want)) {
        throw new CaseFailure("status " + codeName(e) + " (\"" + msg + "\"), expected " + want);
      }
      if (c.expect().has("message_contains")) {
        for (JsonElement part : c.expect().getAsJsonArray("message_contains")) {
          if (!msg.contains(part.getAsString())) {
            throw new CaseFailure("status message \"" + msg + "\" does not mention \"" + part.getAsString() + "\"");
          }
        }
      }
      return;
    }
    // An answer where an error status was expected: described, never compared with outputs
    // the case does not have.
    throw new CaseFailure("call succeeded (" + answer + "), expected status " + want);
  }

  /** Makes the case's call without judging the answer; describes what came back. */
  private String callOnly(Case c) throws Exception {
    JsonObject req = c.request();
    switch (c.rpc()) {
      case "ServerLive":
        return "live=" + client.serverLive();
      case "ServerReady":
        return "ready=" + client.serverReady();
      case "ModelReady":
        return "ready=" + client.modelReady(str(req, "model"), str(req, "version"));
      case "ServerMetadata":
        return "name=\"" + client.serverMetadata().getName() + "\"";
      case "ModelMetadata": {
        ModelMetadataResponse m = client.modelMetadata(str(req, "model"), str(req, "version"));
        return "name=\"" + m.getName() + "\" versions=" + m.getVersionsList();
      }
      case "ModelInfer": {
        InferResult r = infer(c, req);
        TreeSet<String> names = new TreeSet<>();
        r.outputs().forEach(t -> names.add(t.name()));
        return "model \"" + r.model() + "\" version \"" + r.version() + "\", outputs " + names;
      }
      case "ModelStreamInfer": {
        List<InferRequest> reqs = new ArrayList<>();
        for (JsonElement el : req.getAsJsonArray("requests")) {
          reqs.add(toRequest(c, el.getAsJsonObject()));
        }
        return streamAll(reqs).size() + " stream responses";
      }
      case "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister":
        return c.rpc() + " answered (regions " + cuda(c.rpc(), req) + ")";
      default:
        throw new IllegalStateException("unknown rpc " + c.rpc());
    }
  }

  /** One CUDA shared-memory RPC through the generated stub; the regions a status lists. */
  private List<String> cuda(String rpc, JsonObject req) {
    var stub = client.blockingStub();
    String name = str(req, "name");
    switch (rpc) {
      case "CudaSharedMemoryStatus" -> {
        var r = stub.cudaSharedMemoryStatus(CudaSharedMemoryStatusRequest.newBuilder().setName(name).build());
        return new ArrayList<>(new TreeSet<>(r.getRegionsMap().keySet()));
      }
      case "CudaSharedMemoryRegister" -> {
        stub.cudaSharedMemoryRegister(CudaSharedMemoryRegisterRequest.newBuilder().setName(name)
            .setDeviceId(req.has("device_id") ? req.get("device_id").getAsLong() : 0)
            .setByteSize(req.has("byte_size") ? req.get("byte_size").getAsLong() : 0).build());
        return List.of();
      }
      case "CudaSharedMemoryUnregister" -> {
        stub.cudaSharedMemoryUnregister(CudaSharedMemoryUnregisterRequest.newBuilder().setName(name).build());
        return List.of();
      }
      default -> throw new IllegalStateException("unknown rpc " + rpc);
    }
  }

  /** A case's JSON parameter value (bool, integer or string) as an InferParameter. */
  static InferParameter parameter(String key, JsonElement v) {
    if (v.isJsonPrimitive() && v.getAsJsonPrimitive().isBoolean()) {
      return InferParameter.newBuilder().setBoolParam(v.getAsBoolean()).build();
    }
    if (v.isJsonPrimitive() && v.getAsJsonPrimitive().isNumber()) {
      return InferParameter.newBuilder().setInt64Param(v.getAsLong()).build();
    }
    if (v.isJsonPrimitive() && v.getAsJsonPrimitive().isString()) {
      return InferParameter.newBuilder().setStringParam(v.getAsString()).build();
    }
    throw new IllegalArgumentException("parameter " + key + ": " + v + " is not a bool, an integer or a string");
  }

  /** Whether a case request needs what the client does not send (parameters, classification). */
  static boolean needsWire(JsonObject req) {
    return req.has("parameters") || req.has("classification");
  }

  /** The wire request: the client's request plus request parameters and classification counts. */
  static ModelInferRequest wire(Case c, JsonObject req) throws IOException {
    ModelInferRequest.Builder msg = toRequest(c, req).toProto().toBuilder();
    if (req.has("parameters")) {
      for (Map.Entry<String, JsonElement> p : req.getAsJsonObject("parameters").entrySet()) {
        msg.putParameters(p.getKey(), parameter(p.getKey(), p.getValue()));
      }
    }
    if (req.has("classification")) {
      JsonObject classes = req.getAsJsonObject("classification");
      for (int i = 0; i < msg.getOutputsCount(); i++) {
        String name = msg.getOutputs(i).getName();
        if (classes.has(name)) {
          msg.getOutputsBuilder(i).putParameters("classification",
              InferParameter.newBuilder().setInt64Param(classes.get(name).getAsLong()).build());
        }
      }
    }
    return msg.build();
  }

  /**
   * The suite's one feature table (features.json beside the case directory; the Python and Go
   * runners read the same file): what a case may need beyond the core protocol (its "requires"
   * list) with a description each, and the ServerMetadata.extensions entries that claim one.
   */
  record FeatureTable(Map<String, String> features, Map<String, String> extensions) {}

  /** Where the feature table of a case directory lives: features.json beside it. */
  static Path featuresFile(Path cases) {
    return cases.toAbsolutePath().normalize().getParent().resolve("features.json");
  }

  static FeatureTable loadFeatures(Path path) throws IOException {
    JsonObject json = JsonParser.parseString(Files.readString(path, StandardCharsets.UTF_8)).getAsJsonObject();
    Map<String, String> features = new java.util.TreeMap<>();
    json.getAsJsonObject("features").entrySet().forEach(e -> features.put(e.getKey(), e.getValue().getAsString()));
    Map<String, String> extensions = new java.util.TreeMap<>();
    json.getAsJsonObject("extensions").entrySet().forEach(e -> extensions.put(e.getKey(), e.getValue().getAsString()));
    if (features.isEmpty()) {
      throw new IOException(path + ": no features");
    }
    return new FeatureTable(features, extensions);
  }

  /** --features: "all" (null: every case applies), "core"/"" (nothing beyond the core), or a list. */
  static java.util.Set<String> parseFeatures(String text, FeatureTable table) {
    Map<String, String> features = table.features();
    text = text.trim();
    if (text.equals("all")) {
      return null;
    }
    java.util.Set<String> claimed = new TreeSet<>();
    List<String> unknown = new ArrayList<>();
    for (String f : text.split(",")) {
      f = f.trim();
      if (f.isEmpty() || f.equals("core")) {
        continue;
      }
      if (!features.containsKey(f)) {
        unknown.add(f);
      } else {
        claimed.add(f);
      }
    }
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException("unknown feature(s) " + unknown + "; known: core, all, "
          + new TreeSet<>(features.keySet()));
    }
    return claimed;
  }

  /** The features c needs that claimed lacks (null claimed: none). */
  static List<String> missing(Case c, java.util.Set<String> claimed) {
    List<String> out = new ArrayList<>();
    if (claimed != null) {
      for (String f : c.requires()) {
        if (!claimed.contains(f)) {
          out.add(f);
        }
      }
    }
    return out;
  }

  private void call(Case c) throws Exception {
    JsonObject e = c.expect();
    JsonObject req = c.request();
    switch (c.rpc()) {
      case "ServerLive" -> {
        if (client.serverLive() != e.get("live").getAsBoolean()) {
          throw new CaseFailure("live is not " + e.get("live"));
        }
      }
      case "ServerReady" -> {
        if (client.serverReady() != e.get("ready").getAsBoolean()) {
          throw new CaseFailure("ready is not " + e.get("ready"));
        }
      }
      case "ModelReady" -> {
        boolean ready = client.modelReady(str(req, "model"), str(req, "version"));
        if (ready != e.get("ready").getAsBoolean()) {
          throw new CaseFailure("model ready is " + ready + ", expected " + e.get("ready"));
        }
      }
      case "ServerMetadata" -> {
        ServerMetadataResponse m = client.serverMetadata();
        Map<String, String> fields = Map.of("name", m.getName(), "version", m.getVersion());
        if (e.has("nonempty")) {
          for (JsonElement f : e.getAsJsonArray("nonempty")) {
            if (fields.getOrDefault(f.getAsString(), "").isEmpty()) {
              throw new CaseFailure("server metadata field " + f.getAsString() + " is empty");
            }
          }
        }
        if (e.has("extensions_include")) {
          for (JsonElement x : e.getAsJsonArray("extensions_include")) {
            if (!m.getExtensionsList().contains(x.getAsString())) {
              throw new CaseFailure("extensions " + m.getExtensionsList() + " lack " + x);
            }
          }
        }
      }
      case "ModelMetadata" -> {
        ModelMetadataResponse m = client.modelMetadata(str(req, "model"), str(req, "version"));
        if (!m.getName().equals(e.get("name").getAsString())) {
          throw new CaseFailure("name " + m.getName() + ", expected " + e.get("name"));
        }
        if (e.has("versions_include")) {
          for (JsonElement v : e.getAsJsonArray("versions_include")) {
            if (!m.getVersionsList().contains(v.getAsString())) {
              throw new CaseFailure("versions " + m.getVersionsList() + " lack " + v);
            }
          }
        }
        sameSignature("inputs", m.getInputsList(), e.getAsJsonArray("inputs"));
        sameSignature("outputs", m.getOutputsList(), e.getAsJsonArray("outputs"));
      }
      case "ModelInfer" -> {
        int parallel = c.json().has("parallel") ? c.json().get("parallel").getAsInt() : 1;
        if (parallel <= 1) {
          compareOutputs(c, e, infer(c, req));
          return;
        }
        // Several requests in flight at once, through the asynchronous API.
        List<CompletableFuture<InferResult>> calls = new ArrayList<>();
        for (int i = 0; i < parallel; i++) {
          calls.add(client.inferAsync(toRequest(c, req)));
        }
        for (CompletableFuture<InferResult> f : calls) {
          try {
            compareOutputs(c, e, f.get());
          } catch (ExecutionException x) {
            if (x.getCause() instanceof Exception cause) {
              throw cause;
            }
            throw x;
          }
        }
      }
      case "ModelStreamInfer" -> stream(c);
      case "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister" -> {
        List<String> regions = cuda(c.rpc(), req);
        if (e.has("regions")) {
          List<String> want = new ArrayList<>();
          e.getAsJsonArray("regions").forEach(x -> want.add(x.getAsString()));
          want.sort(null);
          if (!regions.equals(want)) {
            throw new CaseFailure("regions " + regions + ", expected " + want);
          }
        }
      }
      default -> throw new IllegalStateException("unknown rpc " + c.rpc());
    }
  }

  private static void sameSignature(String kind, List<ModelMetadataResponse.TensorMetadata> got, JsonArray want) {
    List<String> g = new ArrayList<>();
    for (ModelMetadataResponse.TensorMetadata t : got) {
      g.add(t.getName() + ":" + t.getDatatype() + t.getShapeList());
    }
    List<String> w = new ArrayList<>();
    for (JsonElement el : want) {
      JsonObject t = el.getAsJsonObject();
      w.add(str(t, "name") + ":" + str(t, "datatype") + Arrays.toString(shape(t)));
    }
    if (!g.equals(w)) {
      throw new CaseFailure(kind + " " + g + ", expected " + w);
    }
  }

  private static InferRequest toRequest(Case c, JsonObject req) throws IOException {
    InferRequest.Builder b =
        InferRequest.builder(str(req, "model"))
            .version(str(req, "version"))
            .id(str(req, "id"))
            .typed(str(req, "encoding").equals("typed"));
    for (JsonElement el : req.getAsJsonArray("inputs")) {
      JsonObject t = el.getAsJsonObject();
      b.input(Tensor.raw(str(t, "name"), str(t, "datatype"), shape(t), tensorBytes(c, t)));
    }
    if (req.has("outputs")) {
      req.getAsJsonArray("outputs").forEach(o -> b.output(o.getAsString()));
    }
    return b.build();
  }

  private InferResult infer(Case c, JsonObject req) throws IOException {
    String compression = Compression.of(c);
    if (compression != null && !str(req, "encoding").equals("both")) {
      return InferResult.fromProto(
          client.blockingStub().withCompression(compression).modelInfer(wire(c, req)));
    }
    if (needsWire(req) && !str(req, "encoding").equals("both")) {
      return InferResult.fromProto(client.blockingStub().modelInfer(wire(c, req)));
    }
    InferRequest r = toRequest(c, req);
    String encoding = str(req, "encoding");
    if (encoding.equals("both")) {
      // Deliberately invalid: raw bytes and typed contents for the same tensors.
      ModelInferRequest.Builder msg = r.toProto().toBuilder();
      for (int i = 0; i < r.inputs().size(); i++) {
        msg.getInputsBuilder(i).setContents(r.inputs().get(i).typedContents());
      }
      return InferResult.fromProto(client.blockingStub().modelInfer(msg.build()));
    }
    return client.infer(r);
  }

  private static void compareOutputs(Case c, JsonObject expect, InferResult got) throws IOException {
    TreeSet<String> gotNames = new TreeSet<>();
    got.outputs().forEach(t -> gotNames.add(t.name()));
    TreeSet<String> wantNames = new TreeSet<>();
    expect.getAsJsonArray("outputs").forEach(o -> wantNames.add(str(o.getAsJsonObject(), "name")));
    if (!gotNames.equals(wantNames)) {
      throw new CaseFailure("outputs " + gotNames + ", expected " + wantNames);
    }
    for (JsonElement el : expect.getAsJsonArray("outputs")) {
      JsonObject spec = el.getAsJsonObject();
      Tensor t = got.output(str(spec, "name")).orElseThrow();
      if (str(spec, "datatype").equals("BYTES")) {
        compareStrings(spec, t);
      } else {
        compareTensor(spec, t, tensorBytes(c, spec));
      }
    }
    if (expect.has("id") && !got.id().equals(expect.get("id").getAsString())) {
      throw new CaseFailure("response id \"" + got.id() + "\", expected " + expect.get("id"));
    }
    if (expect.has("model_name") && !got.model().equals(expect.get("model_name").getAsString())) {
      throw new CaseFailure("response model_name \"" + got.model() + "\", expected " + expect.get("model_name"));
    }
    if (expect.has("model_version") && !got.version().equals(expect.get("model_version").getAsString())) {
      throw new CaseFailure("response model_version \"" + got.version() + "\", expected " + expect.get("model_version"));
    }
  }

  /**
   * An expected BYTES output: shape, then every element (raw contents: a 4-byte little-endian
   * length, then its bytes) equal to the expected UTF-8 text.
   */
  static void compareStrings(JsonObject spec, Tensor got) {
    String name = str(spec, "name");
    if (!got.datatype().equals("BYTES")) {
      throw new CaseFailure("output " + name + ": datatype " + got.datatype() + ", expected BYTES");
    }
    if (!Arrays.equals(got.shape(), shape(spec))) {
      throw new CaseFailure("output " + name + ": shape " + Arrays.toString(got.shape())
          + ", expected " + Arrays.toString(shape(spec)));
    }
    ByteBuffer b = got.rawBytes().asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
    List<String> elements = new ArrayList<>();
    while (b.hasRemaining()) {
      if (b.remaining() < 4) {
        throw new CaseFailure("output " + name + ": " + b.remaining() + " trailing bytes are not a length prefix");
      }
      int n = b.getInt();
      if (n < 0 || n > b.remaining()) {
        throw new CaseFailure("output " + name + ": element " + elements.size() + " claims " + n + " bytes");
      }
      byte[] e = new byte[n];
      b.get(e);
      elements.add(new String(e, StandardCharsets.UTF_8));
    }
    List<String> want = new ArrayList<>();
    spec.getAsJsonArray("strings").forEach(x -> want.add(x.getAsString()));
    if (elements.size() != want.size()) {
      throw new CaseFailure("output " + name + ": " + elements.size() + " elements, expected " + want.size());
    }
    for (int i = 0; i < want.size(); i++) {
      if (!elements.get(i).equals(want.get(i))) {
        throw new CaseFailure("output " + name + ": flat index " + i + ": got \"" + elements.get(i)
            + "\", expected \"" + want.get(i) + "\"");
      }
    }
  }

  /** Datatype, shape, then values: exact for integers and BOOL, within rtol/atol for floats. */
  static void compareTensor(JsonObject spec, Tensor got, byte[] wantBytes) {
    String name = str(spec, "name");
    String dt = str(spec, "datatype");
    if (!got.datatype().equals(dt)) {
      throw new CaseFailure("output " + name + ": datatype " + got.datatype() + ", expected " + dt);
    }
    if (!Arrays.equals(got.shape(), shape(spec))) {
      throw new CaseFailure("output " + name + ": shape " + Arrays.toString(got.shape())
          + ", expected " + Arrays.toString(shape(spec)));
    }
    got.validate();
    Tensor want = Tensor.raw(name, dt, shape(spec), wantBytes);
    want.validate();
    byte[] g = got.rawBytes().toByteArray();
    switch (dt) {
      case "FP16", "BF16", "FP32", "FP64" -> {
        double rtol = spec.get("rtol").getAsDouble();
        double atol = spec.get("atol").getAsDouble();
        double[] a = got.asDoubles();
        double[] w = want.asDoubles();
        for (int i = 0; i < w.length; i++) {
          if (a[i] == w[i] || (Double.isNaN(a[i]) && Double.isNaN(w[i]))) {
            continue; // equal infinities have an infinite difference
          }
          if (Double.isInfinite(a[i]) || Double.isInfinite(w[i])
              || !(Math.abs(a[i] - w[i]) <= atol + rtol * Math.abs(w[i]))) {
            throw new CaseFailure("output " + name + ": flat index " + i + ": got " + a[i]
                + ", expected " + w[i] + " (rtol=" + rtol + " atol=" + atol + ")");
          }
        }
      }
      case "BOOL" -> {
        for (int i = 0; i < wantBytes.length; i++) {
          if ((g[i] != 0) != (wantBytes[i] != 0)) {
            throw new CaseFailure("output " + name + ": flat index " + i + " differs");
          }
        }
      }
      default -> {
        if (!Arrays.equals(g, wantBytes)) {
          double[] a = got.asDoubles();
          double[] w = want.asDoubles();
          for (int i = 0; i < w.length; i++) {
            if (a[i] != w[i]) {
              throw new CaseFailure("output " + name + ": flat index " + i + ": got " + (long) a[i]
                  + ", expected " + (long) w[i]);
            }
          }
          throw new CaseFailure("output " + name + ": bytes differ");
        }
      }
    }
  }

  /**
   * A stream whose requests carry their own parameters: each request exactly as the case
   * describes it, through the generated stub (with the client's credentials and deadline);
   * responses matched by id, their parameters checked.
   */
  private void streamWire(Case c) throws Exception {
    JsonArray reqs = c.request().getAsJsonArray("requests");
    List<ModelStreamInferResponse> responses = new ArrayList<>();
    CountDownLatch done = new CountDownLatch(1);
    Throwable[] failure = new Throwable[1];
    CallOptions o = client.futureStub().getCallOptions();
    GRPCInferenceServiceGrpc.GRPCInferenceServiceStub stub =
        GRPCInferenceServiceGrpc.newStub(client.channel()).withDeadline(o.getDeadline());
    if (o.getCredentials() != null) {
      stub = stub.withCallCredentials(o.getCredentials());
    }
    StreamObserver<ModelInferRequest> out = stub.modelStreamInfer(new StreamObserver<>() {
      @Override
      public void onNext(ModelStreamInferResponse r) {
        synchronized (responses) {
          responses.add(r);
        }
      }

      @Override
      public void onError(Throwable t) {
        failure[0] = t;
        done.countDown();
      }

      @Override
      public void onCompleted() {
        done.countDown();
      }
    });
    for (JsonElement el : reqs) {
      out.onNext(wire(c, el.getAsJsonObject()));
    }
    out.onCompleted();
    if (!done.await(120, TimeUnit.SECONDS)) {
      throw new CaseFailure("stream did not end within 120 s");
    }
    if (failure[0] instanceof Exception x) {
      throw x;
    }
    Map<String, ModelStreamInferResponse> byId = new HashMap<>();
    synchronized (responses) {
      if (responses.size() != reqs.size()) {
        throw new CaseFailure(responses.size() + " stream responses, expected " + reqs.size());
      }
      responses.forEach(r -> byId.put(r.getInferResponse().getId(), r));
    }
    for (JsonElement el : c.expect().getAsJsonArray("responses")) {
      JsonObject want = el.getAsJsonObject();
      String id = str(want, "id");
      ModelStreamInferResponse r = byId.get(id);
      if (r == null) {
        throw new CaseFailure("no stream response for request \"" + id + "\"");
      }
      if (!r.getErrorMessage().isEmpty()) {
        throw new CaseFailure("stream request \"" + id + "\" failed: " + r.getErrorMessage());
      }
      compareOutputs(c, want, InferResult.fromProto(r.getInferResponse()));
      Map<String, InferParameter> got = r.getInferResponse().getParametersMap();
      if (want.has("parameters")) {
        for (Map.Entry<String, JsonElement> p : want.getAsJsonObject("parameters").entrySet()) {
          InferParameter w = parameter(p.getKey(), p.getValue());
          if (!w.equals(got.get(p.getKey()))) {
            throw new CaseFailure("stream response \"" + id + "\": parameter " + p.getKey() + " is "
                + got.get(p.getKey()) + ", expected " + w);
          }
        }
      }
      if (want.has("parameters_absent")) {
        for (JsonElement k : want.getAsJsonArray("parameters_absent")) {
          if (got.containsKey(k.getAsString())) {
            throw new CaseFailure("stream response \"" + id + "\": parameter " + k.getAsString()
                + " is " + got.get(k.getAsString()) + ", expected none");
          }
        }
      }
    }
  }

  /** Every request over one stream (the client's InferStream), then every result in order. */
  private List<InferenceClient.StreamResult> streamAll(List<InferRequest> reqs) throws InterruptedException {
    List<InferenceClient.StreamResult> results = new ArrayList<>();
    try (InferStream s = client.openStream()) {
      for (InferRequest r : reqs) {
        s.send(r);
      }
      s.closeSend();
      for (var r = s.next(); r.isPresent(); r = s.next()) {
        results.add(r.get());
      }
    }
    return results;
  }

  private void stream(Case c) throws Exception {
    for (JsonElement el : c.request().getAsJsonArray("requests")) {
      if (el.getAsJsonObject().has("parameters")) {
        streamWire(c);
        return;
      }
    }
    List<InferRequest> reqs = new ArrayList<>();
    for (JsonElement el : c.request().getAsJsonArray("requests")) {
      reqs.add(toRequest(c, el.getAsJsonObject()));
    }
    List<InferenceClient.StreamResult> results = streamAll(reqs);
    if (results.size() != reqs.size()) {
      throw new CaseFailure(results.size() + " stream responses, expected " + reqs.size());
    }
    Map<String, InferResult> byId = new HashMap<>();
    Map<String, String> errorById = new HashMap<>();
    for (InferenceClient.StreamResult r : results) {
      if (r.failed()) {
        errorById.put(r.id(), r.error());
      } else {
        byId.put(r.id(), r.result());
      }
    }
    for (JsonElement el : c.expect().getAsJsonArray("responses")) {
      JsonObject want = el.getAsJsonObject();
      String id = str(want, "id");
      if (errorById.containsKey(id) || want.has("error_contains")) {
        String msg = errorById.get(id);
        if (msg == null) {
          throw new CaseFailure("stream request \"" + id + "\" succeeded, expected an error_message");
        }
        if (!want.has("error_contains")) {
          throw new CaseFailure("stream request \"" + id + "\" failed: " + msg);
        }
        for (JsonElement part : want.getAsJsonArray("error_contains")) {
          if (!msg.contains(part.getAsString())) {
            throw new CaseFailure("stream error \"" + msg + "\" does not mention " + part);
          }
        }
        continue;
      }
      InferResult r = byId.get(id);
      if (r == null) {
        throw new CaseFailure("no stream response for request " + want.get("id"));
      }
      compareOutputs(c, want, r);
    }
  }

  public static void main(String[] args) throws Exception {
    int rc = runMain(args, System.out);
    System.out.flush();
    if (rc != 0) {
      throw new IllegalStateException("conformance java: exit " + rc);
    }
  }

  /**
   * Runs the cases; prints PASS/FAIL/N/A lines and the summary to out. Returns 0 when no case
   * failed, 1 when some did (usage errors throw IllegalArgumentException).
   */
  static int runMain(String[] args, java.io.PrintStream out) throws Exception {
    String features = "all";
    String url = System.getenv("JAXPORT_CONFORMANCE_URL");
    String ca = System.getenv("JAXPORT_CONFORMANCE_CA");
    String token = System.getenv("JAXPORT_CONFORMANCE_TOKEN");
    String cert = System.getenv("JAXPORT_CONFORMANCE_CERT");
    String key = System.getenv("JAXPORT_CONFORMANCE_KEY");
    Path cases = Path.of("../../tests/conformance/cases");
    Path featuresPath = null;
    boolean protocolOnly = false;
    String only = "";
    Path jsonOut = null;
    Path junitOut = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "" -> { } // an unset optional Maven property
        case "--url" -> url = args[++i];
        case "--cases" -> cases = Path.of(args[++i]);
        case "--features-file" -> featuresPath = Path.of(args[++i]);
        case "--protocol-only", "protocol-only" -> protocolOnly = true;
        case "--features" -> features = args[++i];
        case "--run" -> only = args[++i];
        case "--json" -> jsonOut = Path.of(args[++i]);
        case "--junit" -> junitOut = Path.of(args[++i]);
        case "--ca" -> ca = args[++i];
        case "--token" -> token = args[++i];
        case "--cert" -> cert = args[++i];
        case "--key" -> key = args[++i];
        default -> {
          if (args[i].startsWith("--run=")) { // one argument, for -Dconformance.option
            only = args[i].substring("--run=".length());
            continue;
          }
          if (args[i].startsWith("--features=")) { // one argument, for -Dconformance.option
            features = args[i].substring("--features=".length());
            continue;
          }
          if (args[i].startsWith("--json=")) {
            jsonOut = Path.of(args[i].substring("--json=".length()));
            continue;
          }
          if (args[i].startsWith("--junit=")) {
            junitOut = Path.of(args[i].substring("--junit=".length()));
            continue;
          }
          throw new IllegalArgumentException("unknown argument " + args[i]
            + " (use --url HOST:PORT --cases DIR [--features-file JSON] [--features all|core|LIST] [--protocol-only] [--run SUBSTRING] [--json FILE] [--junit FILE] [--ca PEM]"
            + " [--cert PEM --key PKCS8_PEM] [--token TOKEN])");
        }
      }
    }
    if (url == null || url.isEmpty()) {
      throw new IllegalArgumentException("--url (or JAXPORT_CONFORMANCE_URL) is required");
    }
    FeatureTable table = loadFeatures(featuresPath != null ? featuresPath : featuresFile(cases));
    java.util.Set<String> claimed = parseFeatures(protocolOnly ? "core" : features, table);
    List<Case> all = loadCases(cases);
    InferenceClient.Builder builder =
        InferenceClient.forTarget(url).deadline(Duration.ofSeconds(60))
            .configureChannel(Compression::configure);
    if (ca != null && !ca.isEmpty()) {
      builder.trustCertificates(Path.of(ca));
    }
    boolean hasCert = cert != null && !cert.isEmpty();
    if (hasCert != (key != null && !key.isEmpty())) {
      throw new IllegalArgumentException("--cert and --key (JAXPORT_CONFORMANCE_CERT/KEY) go together");
    }
    if (hasCert) {
      builder.clientCertificate(Path.of(cert), Path.of(key));
    }
    if (token != null && !token.isEmpty()) {
      builder.bearerToken(token);
    }
    Report report;
    try (InferenceClient client = builder.build()) {
      ConformanceRunner runner = new ConformanceRunner(client);
      if (claimed != null) {
        try {
          for (String x : client.serverMetadata().getExtensionsList()) {
            if (table.extensions().containsKey(x)) {
              claimed.add(table.extensions().get(x));
            }
            if (table.features().containsKey(x)) {
              claimed.add(x);
            }
          }
        } catch (StatusRuntimeException e) {
          // metadata_server reports it
        }
        out.println("features claimed: " + (claimed.isEmpty() ? "core only" : String.join(", ", claimed)));
      }
      report = new Report("java", claimed == null ? null : new TreeSet<>(claimed));
      for (Case c : all) {
        if (!only.isEmpty() && !c.name().contains(only)) {
          continue;
        }
        Report.Result result;
        List<String> missing = missing(c, claimed);
        if (c.json().has("transport") && c.json().get("transport").getAsString().equals("rest")) {
          result = new Report.Result(c.name(), Report.NOT_APPLICABLE, "REST only (this runner speaks gRPC)", 0);
        } else if (!missing.isEmpty()) {
          result = new Report.Result(c.name(), Report.NOT_APPLICABLE, "needs " + String.join(", ", missing), 0);
        } else {
          long start = System.nanoTime();
          String why = null;
          try {
            runner.run(c);
          } catch (Exception | AssertionError x) {
            Status s = x instanceof StatusRuntimeException sre ? sre.getStatus() : null;
            why = s != null ? "status " + s.getCode() + ": " + s.getDescription()
                : x instanceof CaseFailure ? x.getMessage() : String.valueOf(x);
          }
          double seconds = (System.nanoTime() - start) / 1e9;
          result = new Report.Result(c.name(), why == null ? Report.PASS : Report.FAIL,
              why == null ? "" : why, seconds);
        }
        report.results.add(result);
        out.println(result.line());
      }
    }
    out.println(report.summary());
    out.flush();
    if (jsonOut != null) {
      report.writeJson(jsonOut);
    }
    if (junitOut != null) {
      report.writeJUnit(junitOut);
    }
    return report.count(Report.FAIL) > 0 ? 1 : 0;
  }
}
