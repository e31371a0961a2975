package dev.jaxport.conformance;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.jaxport.client.Tensor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The committed case files load and every tensor they name is readable by this runner. */
class CasesTest {
  static final Path CASES = Path.of("../../tests/conformance/cases");

  @Test
  void committedCasesLoadAndTheirDataIsReadable() throws Exception {
    List<ConformanceRunner.Case> cases = ConformanceRunner.loadCases(CASES);
    assertTrue(cases.size() >= 30, "only " + cases.size() + " cases");
    for (ConformanceRunner.Case c : cases) {
      List<JsonObject> tensors = new ArrayList<>();
      JsonObject req = c.request();
      if (req.has("inputs")) {
        req.getAsJsonArray("inputs").forEach(e -> tensors.add(e.getAsJsonObject()));
      }
      if (c.expect().has("outputs") && c.rpc().equals("ModelInfer")) {
        c.expect().getAsJsonArray("outputs").forEach(e -> {
          if (!e.getAsJsonObject().has("strings")) { // BYTES: its elements are inline
            tensors.add(e.getAsJsonObject());
          }
        });
      }
      for (JsonObject t : tensors) {
        byte[] data = ConformanceRunner.tensorBytes(c, t);
        assertTrue(data.length > 0, c.name());
      }
    }
  }

  @Test
  void comparisonsCanFail() {
    JsonObject spec = JsonParser.parseString(
        "{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[2],\"rtol\":1e-6,\"atol\":1e-6}").getAsJsonObject();
    byte[] want = Tensor.ofFloat32("y", new long[] {2}, 1f, 2f).rawBytes().toByteArray();
    ConformanceRunner.compareTensor(spec, Tensor.ofFloat32("y", new long[] {2}, 1f, 2.000001f), want);
    assertThrows(ConformanceRunner.CaseFailure.class,
        () -> ConformanceRunner.compareTensor(spec, Tensor.ofFloat32("y", new long[] {2}, 1f, 2.1f), want));
    byte[] specials = Tensor.ofFloat32("y", new long[] {2}, Float.POSITIVE_INFINITY, Float.NaN).rawBytes().toByteArray();
    ConformanceRunner.compareTensor(spec, Tensor.ofFloat32("y", new long[] {2}, Float.POSITIVE_INFINITY, Float.NaN), specials);
    assertThrows(ConformanceRunner.CaseFailure.class, () -> ConformanceRunner.compareTensor(
        spec, Tensor.ofFloat32("y", new long[] {2}, Float.NEGATIVE_INFINITY, Float.NaN), specials));
    assertThrows(ConformanceRunner.CaseFailure.class, () -> ConformanceRunner.compareTensor(
        spec, Tensor.ofFloat32("y", new long[] {2}, Float.POSITIVE_INFINITY, 0f), specials));
    JsonElement ints = JsonParser.parseString("{\"name\":\"n\",\"datatype\":\"INT64\",\"shape\":[1]}");
    byte[] big = Tensor.ofInt64("n", new long[] {1}, (1L << 53) + 1).rawBytes().toByteArray();
    assertThrows(ConformanceRunner.CaseFailure.class, () -> ConformanceRunner.compareTensor(
        ints.getAsJsonObject(), Tensor.ofInt64("n", new long[] {1}, 1L << 53), big));
  }

  @Test
  void garbageNpyIsRejected(@TempDir Path tmp) throws Exception {
    Path p = tmp.resolve("bad.npy");
    Files.writeString(p, "not numpy at all");
    assertThrows(java.io.IOException.class, () -> Npy.readData(p));
  }
}
