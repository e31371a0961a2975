// jaxport-pjrt-run: run every golden case of a jaxport artifact through the PJRT C API, with
// no Python anywhere (docs/cpp.md).
//
//   jaxport-pjrt-run --plugin PATH ARTIFACT_DIR [--program FILE] [--atol A --rtol R]
//                    [--fast-min-max]
//
// Steps: read manifest.json; set XLA_FLAGS=--xla_cpu_enable_fast_min_max=false (JAX's NaN
// semantics for min/max) and load the plugin; refuse an artifact whose StableHLO target is
// outside the plugin's window; check every file and every parameter against its sha256;
// upload the parameters once; compile each fixed-shape program (every batch size and bucket);
// bind @main's arguments in manifest order (parameters, then each golden case's inputs);
// execute; compare every output with its golden (docs/artifact-format.md, Tolerances) and
// every check output bit for bit. One line per case and output; exit 0 when all match, 1 on
// any mismatch, 2 when the artifact or plugin cannot be used.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "artifact.h"
#include "pjrt.h"

namespace {

using jaxport::artifact::Argument;
using jaxport::artifact::Array;
using jaxport::artifact::ArtifactError;
using jaxport::artifact::GoldenCase;
using jaxport::artifact::Manifest;
using jaxport::artifact::Program;
using jaxport::artifact::Result;
using jaxport::artifact::ShapeText;
namespace pjrt = jaxport::pjrt;

constexpr char kUsage[] =
    "usage: jaxport-pjrt-run --plugin PATH ARTIFACT_DIR [--program FILE] [--atol A --rtol R] "
    "[--fast-min-max]\n"
    "  --plugin PATH    a PJRT plugin (e.g. build/pjrt/pjrt_c_api_cpu_plugin.so: make pjrt-plugin)\n"
    "  --program FILE   only the program whose mlirbcFile is FILE (e.g. model.b4.mlirbc)\n"
    "  --atol/--rtol    replace the float tolerance rule with |a - e| <= A + R*|e|\n"
    "  --fast-min-max   keep the plugin's fast min/max (NaN dropped by min/max, unlike JAX);\n"
    "                   only to show why the program sets XLA_FLAGS=--xla_cpu_enable_fast_min_max=false\n";

struct Options {
  std::string plugin;
  std::string artifact;
  std::string program;
  std::optional<double> atol, rtol;
  bool fast_min_max = false;
};

// Usage errors: exit status 2 with one line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      return argv[++i];
    };
    auto number = [&](const char* flag) {
      const std::string text = value(flag);
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(v >= 0)) {
        throw UsageError(std::string(flag) + " takes a non-negative number, got " + text);
      }
      return v;
    };
    if (arg == "--plugin") {
      o.plugin = value("--plugin");
    } else if (arg == "--program") {
      o.program = value("--program");
    } else if (arg == "--atol") {
      o.atol = number("--atol");
    } else if (arg == "--rtol") {
      o.rtol = number("--rtol");
    } else if (arg == "--fast-min-max") {
      o.fast_min_max = true;
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown flag " + arg);
    } else if (o.artifact.empty()) {
      o.artifact = arg;
    } else {
      throw UsageError("one ARTIFACT_DIR only, got " + o.artifact + " and " + arg);
    }
  }
  if (o.plugin.empty() || o.artifact.empty()) throw UsageError("--plugin and ARTIFACT_DIR are required");
  return o;
}

// "1.18.0" -> {1, 18, 0}; empty when it is not dotted integers.
std::vector<int64_t> ParseVersion(const std::string& text) {
  std::vector<int64_t> parts;
  size_t start = 0;
  while (start <= text.size()) {
    size_t dot = text.find('.', start);
    std::string part = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return {};
    parts.push_back(std::stoll(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

// The artifact's StableHLO target must lie in [stablehlo_minimum_version,
// stablehlo_current_version] of the plugin (StableHLO's compatibility window).
void CheckStablehloWindow(const Manifest& m, const pjrt::Plugin& plugin,
                          const std::string& plugin_path) {
  const auto attributes = plugin.Attributes();
  auto min = attributes.find("stablehlo_minimum_version");
  auto cur = attributes.find("stablehlo_current_version");
  if (min == attributes.end() || cur == attributes.end()) {
    std::printf("warning: %s reports no StableHLO window (stablehlo_minimum_version / "
                "stablehlo_current_version); artifact target %s unchecked\n",
                plugin_path.c_str(), m.stablehlo_target.c_str());
    return;
  }
  const std::vector<int64_t> target = ParseVersion(m.stablehlo_target);
  if (target.empty() || target < min->second.ints || target > cur->second.ints) {
    throw ArtifactError("artifact StableHLO target " +
                        (m.stablehlo_target.empty() ? std::string("(none)") : m.stablehlo_target) +
                        " is outside the plugin's window " + min->second.text + ".." +
                        cur->second.text + " (" + plugin_path + "); re-export for this plugin " +
                        "or use a plugin whose window contains it");
  }
  std::printf("plugin %s: PJRT API %d.%d, StableHLO %s..%s; artifact targets %s: ok\n",
              plugin_path.c_str(), plugin.major_version(), plugin.minor_version(),
              min->second.text.c_str(), cur->second.text.c_str(), m.stablehlo_target.c_str());
}

// Element i of a host array as a double (floats of every width, integers, bool).
double ValueAt(const Array& a, size_t i) {
  const char* p = a.bytes.data() + i * a.dtype.itemsize;
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  const std::string& t = a.dtype.numpy;
  if (t == "float32") return load(float{});
  if (t == "float64") return load(double{});
  if (t == "bfloat16" || t == "float16") {
    const uint16_t h = load(uint16_t{});
    if (t == "bfloat16") {
      const uint32_t bits = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    const double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == 0) return sign * std::ldexp(mantissa, -24);
    if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
    return sign * std::ldexp(mantissa + 1024, exponent - 25);
  }
  if (t == "bool" || t == "uint8") return load(uint8_t{});
  if (t == "int8") return load(int8_t{});
  if (t == "int16") return load(int16_t{});
  if (t == "uint16") return load(uint16_t{});
  if (t == "int32") return load(int32_t{});
  if (t == "uint32") return load(uint32_t{});
  if (t == "int64") return static_cast<double>(load(int64_t{}));
  if (t == "uint64") return static_cast<double>(load(uint64_t{}));
  throw ArtifactError("unsupported dtype " + t);
}

// (atol, rtol) of docs/artifact-format.md, Tolerances; integers and bool exact.
std::pair<double, double> Tolerance(const std::string& dtype, const Options& o) {
  static const std::map<std::string, std::pair<double, double>> kTable = {
      {"float64", {1e-12, 1e-10}},
      {"float32", {1e-5, 1e-4}},
      {"float16", {2e-3, 2e-3}},
      {"bfloat16", {1.6e-2, 1.6e-2}}};
  auto it = kTable.find(dtype);
  if (it == kTable.end()) return {0.0, 0.0};
  if (o.atol || o.rtol) return {o.atol.value_or(0.0), o.rtol.value_or(0.0)};
  return it->second;
}

std::string Format(const char* fmt, double v) {
  char text[64];
  std::snprintf(text, sizeof text, fmt, v);
  return text;
}

struct Verdict {
  bool passed = true;
  double max_abs = 0.0;
  std::string rule;
};

// An output against its golden: |a - e| <= atol + rtol*|e| element by element; NaN matches
// NaN and an infinity the same infinity, anything else non-finite is an infinite error.
Verdict CompareOutput(const Array& actual, const Array& expected, const Options& o) {
  const auto [atol, rtol] = Tolerance(expected.dtype.numpy, o);
  Verdict v;
  v.rule = (atol == 0 && rtol == 0) ? "exact" : Format("%g", atol) + "+" + Format("%g", rtol) + "*|x|";
  const size_t n = expected.bytes.size() / expected.dtype.itemsize;
  const bool exact = (atol == 0 && rtol == 0);
  for (size_t i = 0; i < n; ++i) {
    const double a = ValueAt(actual, i), e = ValueAt(expected, i);
    double err;
    if (std::isnan(a) && std::isnan(e)) {
      err = 0.0;
    } else if (std::isinf(a) && a == e) {
      err = 0.0;
    } else {
      err = std::fabs(a - e);
      if (!std::isfinite(err)) err = INFINITY;
    }
    v.max_abs = std::max(v.max_abs, err);
    // err is 0 or finite-vs-finite here unless it is infinite (then e may be NaN or inf).
    if (err != 0.0 && !(std::isfinite(err) && err <= atol + rtol * std::fabs(e))) v.passed = false;
  }
  // Integers and bools: the bytes themselves (no rounding through double for int64).
  if (exact && std::memcmp(actual.bytes.data(), expected.bytes.data(), expected.bytes.size())) {
    v.passed = false;
  }
  return v;
}

// A program's golden cases: those of its batch size; for a bucket program, those at its sizes
// (exporter/verify/cases.py program_cases).
std::vector<const GoldenCase*> ProgramCases(const Manifest& m, const Program& p) {
  std::vector<const GoldenCase*> cases;
  for (const GoldenCase& c : m.goldens) {
    if (c.batch_size == p.batch_size && (!c.outputs.empty() || !c.check_outputs.empty()) &&
        (p.dims.empty() || c.dims == p.dims)) {
      cases.push_back(&c);
    }
  }
  return cases;
}

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

int Run(const Options& o) {
  const Manifest m = jaxport::artifact::LoadManifest(o.artifact);
  if (m.nr_devices != 1) {
    throw ArtifactError(o.artifact + ": a sharded program (nrDevices " + std::to_string(m.nr_devices) +
                        "); this sample runs single-device programs (docs/artifact-format.md, " +
                        "Sharded programs)");
  }
  // JAX's semantics for min/max (NaN propagates): XLA_FLAGS before the plugin reads it.
  if (!o.fast_min_max) pjrt::AppendXlaFlag("--xla_cpu_enable_fast_min_max=false");
  const pjrt::Plugin plugin = pjrt::Plugin::Load(o.plugin);
  CheckStablehloWindow(m, plugin, o.plugin);

  // Integrity before anything runs: every parameter (by name), then every listed file.
  auto start = std::chrono::steady_clock::now();
  std::map<std::string, Array> parameters;
  for (const Program& p : m.programs) {
    for (const Argument& a : p.arguments) {
      if (a.role == "ARGUMENT_ROLE_PARAMETER" && !parameters.count(a.name)) {
        parameters.emplace(a.name, jaxport::artifact::ReadParameter(o.artifact, a));
      }
    }
  }
  jaxport::artifact::VerifyFiles(o.artifact, m);
  std::printf("artifact %s (%s): %zu parameter(s) and %zu file(s) match their sha256 (%.0f ms)\n",
              o.artifact.c_str(), m.name.c_str(), parameters.size(), m.files.size(),
              MillisSince(start));

  const pjrt::Client client = pjrt::Client::Create(plugin.api());
  size_t platform_index = m.platforms.size();
  for (size_t i = 0; i < m.platforms.size(); ++i) {
    if (m.platforms[i] == client.platform()) platform_index = i;
  }
  if (platform_index == m.platforms.size()) {
    throw ArtifactError("the plugin's platform '" + client.platform() +
                        "' is not among the artifact's platforms");
  }
  // Parameters go to the device once and are shared by every program and case.
  std::map<std::string, pjrt::Buffer> parameter_buffers;
  for (const auto& [name, array] : parameters) {
    parameter_buffers.emplace(
        name, client.Upload(array.bytes.data(), pjrt::BufferType(array.dtype.mlir), array.shape));
  }
  const std::string compile_options = pjrt::CompileOptions();

  int programs_run = 0, cases_run = 0, compared = 0;
  std::vector<std::string> mismatches;
  for (const Program& p : m.programs) {
    if (!o.program.empty() && p.mlirbc_file != o.program) continue;
    if (p.polymorphic) {
      std::printf("program %s: shape-polymorphic (only jax runs it); skipped\n", p.mlirbc_file.c_str());
      continue;
    }
    ++programs_run;
    start = std::chrono::steady_clock::now();
    const std::string code = jaxport::artifact::ReadFile(
        jaxport::artifact::ResolveInside(o.artifact, p.mlirbc_file, "mlirbcFile"));
    const pjrt::Executable executable = client.Compile(code, compile_options);
    std::vector<const Result*> results;  // every non-token result, @main order
    for (const Result& r : p.results) {
      if (r.role != "RESULT_ROLE_TOKEN") results.push_back(&r);
    }
    if (executable.NumOutputs() != results.size()) {
      throw ArtifactError(p.mlirbc_file + ": the compiled program has " +
                          std::to_string(executable.NumOutputs()) + " outputs, the manifest lists " +
                          std::to_string(results.size()));
    }
    const auto cases = ProgramCases(m, p);
    std::printf("program %s (batch size %u): compiled in %.0f ms, %zu golden case(s)\n",
                p.mlirbc_file.c_str(), p.batch_size, MillisSince(start), cases.size());
    for (const GoldenCase* c : cases) {
      ++cases_run;
      // @main's arguments in manifest order.
      std::vector<Array> inputs;  // host arrays of this case, kept alive until the upload
      std::vector<pjrt::Buffer> case_buffers;
      std::vector<PJRT_Buffer*> arguments;
      inputs.reserve(p.arguments.size());
      case_buffers.reserve(p.arguments.size());
      for (const Argument& a : p.arguments) {
        if (a.role == "ARGUMENT_ROLE_PARAMETER") {
          arguments.push_back(parameter_buffers.at(a.name).get());
          continue;
        }
        if (a.role == "ARGUMENT_ROLE_INPUT") {
          auto path = c->inputs.find(a.name);
          if (path == c->inputs.end()) {
            throw ArtifactError("golden case " + c->name + " has no input '" + a.name + "'");
          }
          inputs.push_back(jaxport::artifact::ReadNpy(
              jaxport::artifact::ResolveInside(o.artifact, path->second, "golden input"), a.dtype,
              a.shape, "case " + c->name + " input " + a.name));
        } else if (a.role == "ARGUMENT_ROLE_PLATFORM_INDEX") {
          Array index{{}, a.dtype, std::vector<char>(a.dtype.itemsize, 0)};
          const int64_t value = static_cast<int64_t>(platform_index);
          std::memcpy(index.bytes.data(), &value, a.dtype.itemsize);  // little-endian i32/i64
          inputs.push_back(index);
        } else {
          throw ArtifactError("argument '" + a.name + "' has role " + a.role +
                              " (tokens, ordered effects: not supported)");
        }
        const Array& host = inputs.back();
        case_buffers.push_back(
            client.Upload(host.bytes.data(), pjrt::BufferType(host.dtype.mlir), host.shape));
        arguments.push_back(case_buffers.back().get());
      }
      const std::vector<pjrt::Buffer> outputs = executable.Execute(arguments);
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = *results[i];
        const bool check = r.role == "RESULT_ROLE_CHECK";
        const auto& golden = check ? c->check_outputs : c->outputs;
        auto path = golden.find(r.name);
        if (path == golden.end()) continue;  // e.g. outputs of a case that trips a check
        const Array want = jaxport::artifact::ReadNpy(
            jaxport::artifact::ResolveInside(o.artifact, path->second, "golden output"), r.dtype,
            r.shape, "case " + c->name + " output " + r.name);
        if (outputs[i].ElementType() != pjrt::BufferType(r.dtype.mlir) ||
            outputs[i].Dimensions() != r.shape) {
          throw ArtifactError(p.mlirbc_file + ": result " + r.name + " is not " + r.dtype.numpy +
                              ShapeText(r.shape) + " as the manifest says");
        }
        Array got{r.shape, r.dtype, outputs[i].ToHost()};
        if (got.bytes.size() != want.bytes.size()) {
          throw ArtifactError(p.mlirbc_file + ": result " + r.name + " came back with " +
                              std::to_string(got.bytes.size()) + " bytes, expected " +
                              std::to_string(want.bytes.size()));
        }
        Options exact_for_checks = o;
        if (check) exact_for_checks.atol = exact_for_checks.rtol = std::nullopt;
        Verdict v = CompareOutput(got, want, exact_for_checks);
        if (check) {  // check outputs: bit for bit, whatever their dtype
          v.rule = "bit-exact";
          v.passed = got.bytes == want.bytes;
        }
        ++compared;
        std::printf("  %-16s %-24s %-9s%-12s max abs err %-10s tolerance %-22s %s\n",
                    c->name.c_str(), r.name.c_str(), r.dtype.numpy.c_str(),
                    ShapeText(r.shape).c_str(), Format("%.3g", v.max_abs).c_str(), v.rule.c_str(),
                    v.passed ? "ok" : "MISMATCH");
        if (!v.passed) mismatches.push_back(c->name + " " + r.name);
      }
    }
  }
  if (programs_run == 0) {
    throw ArtifactError(o.program.empty() ? "no fixed-shape program to run (export with --buckets)"
                                          : "no program with mlirbcFile " + o.program);
  }
  if (!mismatches.empty()) {
    std::string list;
    for (const std::string& s : mismatches) list += (list.empty() ? "" : ", ") + s;
    std::printf("FAILED: %zu of %d output(s) differ from the goldens: %s\n", mismatches.size(),
                compared, list.c_str());
    return 1;
  }
  if (compared == 0) {
    std::printf("warning: the artifact has no golden case with outputs: nothing was compared\n");
  }
  std::printf("ok: %d case(s) over %d program(s), %d output(s) within tolerance\n", cases_run,
              programs_run, compared);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(ParseArgs(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "jaxport-pjrt-run: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {  // ArtifactError, PjrtError, I/O
    std::fflush(stdout);
    std::fprintf(stderr, "jaxport-pjrt-run: %s\n", e.what());
    return 2;
  }
}
