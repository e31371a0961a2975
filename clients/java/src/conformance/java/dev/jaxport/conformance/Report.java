package dev.jaxport.conformance;

import com.google.gson.GsonBuilder;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * A run's results in the three forms every runner writes (the Python runner's
 * tests/conformance/jaxport_conformance/report.py and the Go runner's report.go): the text lines
 * ({@code PASS}/{@code FAIL}/{@code N/A} per case, then {@code conformance java: N passed, M
 * failed[, K not applicable]}), JSON ({@code --json FILE}: runner, features, passed, failed,
 * not_applicable, cases [{name, status, message, seconds}]) and JUnit XML ({@code --junit FILE}:
 * one testsuite whose tests / failures / skipped are passed+failed+N/A / failed / N/A).
 */
final class Report {
  static final String PASS = "PASS";
  static final String FAIL = "FAIL";
  static final String NOT_APPLICABLE = "N/A";

  /** One case: its status, why (a failure's message, an N/A's reason) and how long it took. */
  record Result(String name, String status, String message, double seconds) {
    String line() {
      return switch (status) {
        case PASS -> String.format(Locale.ROOT, "PASS %s (%d ms)", name, Math.round(seconds * 1e3));
        case FAIL -> "FAIL " + name + ": " + message;
        default -> "N/A " + name + " (" + message + ")";
      };
    }
  }

  final String label;
  /** The claimed features; null: all. */
  final Set<String> features;
  final List<Result> results = new ArrayList<>();

  Report(String label, Set<String> features) {
    this.label = label;
    this.features = features;
  }

  int count(String status) {
    return (int) results.stream().filter(r -> r.status().equals(status)).count();
  }

  String summary() {
    int na = count(NOT_APPLICABLE);
    return "conformance " + label + ": " + count(PASS) + " passed, " + count(FAIL) + " failed"
        + (na > 0 ? ", " + na + " not applicable" : "");
  }

  void writeJson(Path path) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("runner", label);
    doc.put("features", features == null ? null : new ArrayList<>(features));
    doc.put("passed", count(PASS));
    doc.put("failed", count(FAIL));
    doc.put("not_applicable", count(NOT_APPLICABLE));
    List<Map<String, Object>> cases = new ArrayList<>();
    for (Result r : results) {
      Map<String, Object> c = new LinkedHashMap<>();
      c.put("name", r.name());
      c.put("status", r.status());
      c.put("message", r.message());
      c.put("seconds", r.seconds());
      cases.add(c);
    }
    doc.put("cases", cases);
    String text = new GsonBuilder().serializeNulls().setPrettyPrinting().create().toJson(doc);
    Files.writeString(path, text + "\n", StandardCharsets.UTF_8);
  }

  void writeJUnit(Path path) throws IOException {
    double total = results.stream().mapToDouble(Result::seconds).sum();
    StringBuilder b = new StringBuilder("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    b.append("<testsuites name=\"jaxport-conformance\">\n");
    b.append(String.format(Locale.ROOT,
        "  <testsuite name=\"%s\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.3f\">%n",
        xml("conformance " + label), results.size(), count(FAIL), count(NOT_APPLICABLE), total));
    for (Result r : results) {
      b.append(String.format(Locale.ROOT, "    <testcase classname=\"%s\" name=\"%s\" time=\"%.3f\"",
          xml("conformance." + label), xml(r.name()), r.seconds()));
      switch (r.status()) {
        case FAIL -> b.append(">\n      <failure message=\"").append(xml(r.message())).append("\">")
            .append(xml(r.message())).append("</failure>\n    </testcase>\n");
        case NOT_APPLICABLE -> b.append(">\n      <skipped message=\"").append(xml(r.message()))
            .append("\" />\n    </testcase>\n");
        default -> b.append(" />\n");
      }
    }
    b.append("  </testsuite>\n</testsuites>\n");
    Files.writeString(path, b.toString(), StandardCharsets.UTF_8);
  }

  /** Text as XML attribute or element content (the five entities; control characters dropped). */
  static String xml(String s) {
    StringBuilder b = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '&' -> b.append("&amp;");
        case '<' -> b.append("&lt;");
        case '>' -> b.append("&gt;");
        case '"' -> b.append("&quot;");
        case '\'' -> b.append("&apos;");
        case '\n' -> b.append("&#10;");
        default -> {
          if (c >= 0x20 || c == '\t') {
            b.append(c);
          }
        }
      }
    }
    return b.toString();
  }
}
