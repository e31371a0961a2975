// jaxport-pjrt-run: a jaxport artifact through the PJRT C API with no Python anywhere, a thin
// user of the jaxport library (docs/cpp.md).
//
//   jaxport-pjrt-run --plugin PATH ARTIFACT_DIR [--program FILE] [--atol A --rtol R] [--fast-min-max]
//       every golden case of every fixed-shape program: outputs compared with JAX's under the
//       format's tolerances, check outputs bit for bit, a tripped check's message against JAX's.
//   jaxport-pjrt-run --plugin PATH ARTIFACT_DIR --input NAME=FILE.npy ... --output-dir DIR
//       the caller's own inputs through Model::Run; each output written as DIR/<output>.npy.
//
// Exit status: 0 ok; 1 a golden mismatch, or (own inputs) a runtime check that fired; 2 the
// artifact, the plugin, the flags or the inputs cannot be used (one line on stderr).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jaxport/jaxport.h"

namespace {

namespace fs = std::filesystem;
using jaxport::ArtifactError;
using jaxport::DType;
using jaxport::GoldenCase;
using jaxport::Manifest;
using jaxport::Program;
using jaxport::Result;
using jaxport::Tensor;

constexpr char kUsage[] =
    "usage: jaxport-pjrt-run --plugin PATH ARTIFACT_DIR [--program FILE] [--atol A --rtol R] [--fast-min-max]\n"
    "       jaxport-pjrt-run --plugin PATH ARTIFACT_DIR --input NAME=FILE.npy ... --output-dir DIR\n"
    "  --plugin PATH        a PJRT plugin (e.g. build/pjrt/pjrt_c_api_cpu_plugin.so: make pjrt-plugin)\n"
    "  --program FILE       golden cases of the program whose mlirbcFile is FILE only (model.b4.mlirbc)\n"
    "  --atol/--rtol        replace the float tolerance rule with |a - e| <= A + R*|e|\n"
    "  --input NAME=FILE    run the model on your own inputs (.npy; bfloat16 as raw V2), one per input\n"
    "  --output-dir DIR     where --input runs write each output as <output>.npy\n"
    "  --fast-min-max       keep the plugin's fast min/max (NaN dropped by min/max, unlike JAX);\n"
    "                       only to show why programs are compiled with xla_cpu_enable_fast_min_max=false\n";

struct Options {
  std::string plugin, artifact, program, output_dir;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::optional<double> atol, rtol;
  bool fast_min_max = false;
};

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
      const double v = std::strtod(text.c_str(), &end);
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
    } else if (arg == "--input") {
      const std::string spec = value("--input");
      const size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
        throw UsageError("--input takes NAME=FILE.npy, got " + spec);
      }
      o.inputs.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    } else if (arg == "--output-dir") {
      o.output_dir = value("--output-dir");
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
  if (o.inputs.empty() != o.output_dir.empty()) throw UsageError("--input and --output-dir go together");
  if (!o.inputs.empty() && (!o.program.empty() || o.atol || o.rtol)) {
    throw UsageError("--program, --atol and --rtol check goldens; they do not apply to --input runs");
  }
  return o;
}

// "[4,3]": shapes in the result table (no spaces, one column).
std::string Compact(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

// Element i of a host tensor as a double (floats of every width, integers, bool).
double ValueAt(const Tensor& a, size_t i) {
  const char* p = static_cast<const char*>(a.data()) + i * jaxport::ItemSize(a.dtype());
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (a.dtype()) {
    case DType::kFloat32: return load(float{});
    case DType::kFloat64: return load(double{});
    case DType::kBFloat16: {
      const uint32_t bits = uint32_t{load(uint16_t{})} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case DType::kFloat16: {
      const uint16_t h = load(uint16_t{});
      const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
      const double sign = (h & 0x8000) ? -1.0 : 1.0;
      if (exponent == 0) return sign * std::ldexp(mantissa, -24);
      if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
      return sign * std::ldexp(mantissa + 1024, exponent - 25);
    }
    case DType::kBool: case DType::kUInt8: return load(uint8_t{});
    case DType::kInt8: return load(int8_t{});
    case DType::kInt16: return load(int16_t{});
    case DType::kUInt16: return load(uint16_t{});
    case DType::kInt32: return load(int32_t{});
    case DType::kUInt32: return load(uint32_t{});
    case DType::kInt64: return static_cast<double>(load(int64_t{}));
    case DType::kUInt64: return static_cast<double>(load(uint64_t{}));
  }
  return 0;
}

// (atol, rtol) of docs/artifact-format.md, Tolerances; integers and bool exact.
std::pair<double, double> Tolerance(DType dtype, const Options& o) {
  std::pair<double, double> rule;
  switch (dtype) {
    case DType::kFloat64: rule = {1e-12, 1e-10}; break;
    case DType::kFloat32: rule = {1e-5, 1e-4}; break;
    case DType::kFloat16: rule = {2e-3, 2e-3}; break;
    case DType::kBFloat16: rule = {1.6e-2, 1.6e-2}; break;
    default: return {0.0, 0.0};
  }
  if (o.atol || o.rtol) return {o.atol.value_or(0.0), o.rtol.value_or(0.0)};
  return rule;
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
Verdict CompareOutput(const Tensor& actual, const Tensor& expected, const Options& o) {
  const auto [atol, rtol] = Tolerance(expected.dtype(), o);
  Verdict v;
  const bool exact = atol == 0 && rtol == 0;
  v.rule = exact ? "exact" : Format("%g", atol) + "+" + Format("%g", rtol) + "*|x|";
  const auto n = static_cast<size_t>(expected.num_elements());
  for (size_t i = 0; i < n; ++i) {
    const double a = ValueAt(actual, i), e = ValueAt(expected, i);
    double err;
    if ((std::isnan(a) && std::isnan(e)) || (std::isinf(a) && a == e)) {
      err = 0.0;
    } else {
      err = std::fabs(a - e);
      if (!std::isfinite(err)) err = INFINITY;
    }
    v.max_abs = std::max(v.max_abs, err);
    if (err != 0.0 && !(std::isfinite(err) && err <= atol + rtol * std::fabs(e))) v.passed = false;
  }
  // Integers and bools: the bytes themselves (no rounding through double for int64).
  if (exact && std::memcmp(actual.data(), expected.data(), expected.size_bytes()) != 0) v.passed = false;
  return v;
}

// A program's golden cases: those of its batch size; for a bucket program, those at its sizes.
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

std::string VersionText(const jaxport::StablehloVersion& v) {
  return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
}

jaxport::Runtime LoadRuntime(const Options& o) {
  jaxport::RuntimeOptions options;
  options.fast_min_max = o.fast_min_max;
  return jaxport::Runtime::Load(o.plugin, options);
}

int RunGoldens(const Options& o) {
  const jaxport::Runtime runtime = LoadRuntime(o);
  auto start = std::chrono::steady_clock::now();
  jaxport::OpenOptions open;
  open.verify_all_files = true;  // goldens are files too: checked before anything is compared
  const jaxport::Model model = jaxport::Model::Open(runtime, o.artifact, open);
  const Manifest& m = model.manifest();
  std::printf("plugin %s: PJRT API %d.%d, StableHLO %s..%s; artifact targets %s: ok\n", o.plugin.c_str(),
              runtime.pjrt_major_version(), runtime.pjrt_minor_version(), VersionText(runtime.window_min()).c_str(),
              VersionText(runtime.window_max()).c_str(), m.stablehlo_target.c_str());
  std::set<std::string> parameters;
  size_t compiled = 0;
  for (const Program& p : m.programs) {
    if (p.polymorphic) continue;
    ++compiled;
    for (const jaxport::Argument& a : p.arguments) {
      if (a.role == jaxport::ArgumentRole::kParameter) parameters.insert(a.name);
    }
  }
  std::printf("artifact %s (%s): %zu parameter(s) and %zu file(s) match their sha256, %zu program(s) compiled (%.0f ms)\n",
              o.artifact.c_str(), m.name.c_str(), parameters.size(), m.files.size(), compiled, MillisSince(start));

  int programs_run = 0, cases_run = 0, compared = 0;
  std::vector<std::string> mismatches;
  for (size_t index = 0; index < m.programs.size(); ++index) {
    const Program& p = m.programs[index];
    if (!o.program.empty() && p.mlirbc_file != o.program) continue;
    if (p.polymorphic) {
      std::printf("program %s: shape-polymorphic (only jax runs it); skipped\n", p.mlirbc_file.c_str());
      continue;
    }
    ++programs_run;
    const auto cases = ProgramCases(m, p);
    std::printf("program %s (batch size %u): %zu golden case(s)\n", p.mlirbc_file.c_str(), p.batch_size, cases.size());
    for (const GoldenCase* c : cases) {
      ++cases_run;
      std::map<std::string, Tensor> host;
      jaxport::Inputs inputs;
      for (const jaxport::Argument& a : p.arguments) {
        if (a.role != jaxport::ArgumentRole::kInput) continue;
        auto path = c->inputs.find(a.name);
        if (path == c->inputs.end()) throw ArtifactError("golden case " + c->name + " has no input '" + a.name + "'");
        host.emplace(a.name, jaxport::ReadNpy(jaxport::ResolveInside(o.artifact, path->second, "golden input"),
                                              a.dtype, a.shape, "case " + c->name + " input " + a.name));
        inputs.emplace(a.name, host.at(a.name).view());
      }
      const std::vector<Tensor> results = model.RunProgram(index, inputs);
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = p.results[i];
        const bool check = r.role == jaxport::ResultRole::kCheck;
        const auto& golden = check ? c->check_outputs : c->outputs;
        auto path = golden.find(r.name);
        if (path == golden.end()) continue;  // e.g. outputs of a case that trips a check
        const Tensor want = jaxport::ReadNpy(jaxport::ResolveInside(o.artifact, path->second, "golden output"),
                                             r.dtype, r.shape, "case " + c->name + " output " + r.name);
        Verdict v = CompareOutput(results[i], want, o);
        if (check) {  // check outputs: bit for bit, whatever their dtype
          v.rule = "bit-exact";
          v.passed = std::memcmp(results[i].data(), want.data(), want.size_bytes()) == 0;
        }
        ++compared;
        std::printf("  %-16s %-24s %-9s%-12s max abs err %-10s tolerance %-22s %s\n", c->name.c_str(), r.name.c_str(),
                    jaxport::Name(r.dtype), Compact(r.shape).c_str(), Format("%.3g", v.max_abs).c_str(),
                    v.rule.c_str(), v.passed ? "ok" : "MISMATCH");
        if (!v.passed) mismatches.push_back(c->name + " " + r.name);
      }
      if (!c->expected_check.empty()) {  // the failure Model::Run raises, against JAX's err.get()
        std::string got = "no check fired";
        bool passed = false;
        try {
          model.Run(inputs);
        } catch (const jaxport::CheckFailedError& e) {
          got = e.kind() + " " + jaxport::StatusCodeName(e.code()) + ": " + e.what();
          passed = e.kind() == c->expected_check && e.what() == c->expected_error &&
                   e.code() == *jaxport::CheckStatus(c->expected_check);
        }
        ++compared;
        std::printf("  %-16s %-24s %s %s\n", c->name.c_str(), "(check failure)", got.c_str(), passed ? "ok" : "MISMATCH");
        if (!passed) mismatches.push_back(c->name + " (check failure)");
      }
    }
  }
  if (programs_run == 0) {
    throw ArtifactError(o.program.empty() ? "no fixed-shape program to run (export with --buckets)"
                                          : "no program with mlirbcFile " + o.program);
  }
  // A polymorphic model's cases at sizes no bucket has exactly: through Model::Run, padded up
  // to the bucket that holds them (a size none holds is named and skipped).
  std::vector<const GoldenCase*> between;
  for (const GoldenCase& c : m.goldens) {
    const bool exact = std::any_of(m.programs.begin(), m.programs.end(), [&](const Program& p) {
      return !p.polymorphic && p.batch_size == c.batch_size && p.dims == c.dims;
    });
    if (o.program.empty() && !exact && !c.dims.empty()) between.push_back(&c);
  }
  if (!between.empty()) std::printf("padded to a bucket: %zu golden case(s)\n", between.size());
  for (const GoldenCase* c : between) {
    std::map<std::string, Tensor> host;
    jaxport::Inputs inputs;
    for (const jaxport::TensorSpec& spec : m.inputs) {
      auto path = c->inputs.find(spec.name);
      if (path == c->inputs.end()) throw ArtifactError("golden case " + c->name + " has no input '" + spec.name + "'");
      host.emplace(spec.name, jaxport::ReadNpy(jaxport::ResolveInside(o.artifact, path->second, "golden input")));
      inputs.emplace(spec.name, host.at(spec.name).view());
    }
    jaxport::Outputs got;
    try {
      got = model.Run(inputs);
    } catch (const jaxport::InvalidInputError& e) {
      std::printf("  %-16s skipped: %s\n", c->name.c_str(), e.what());
      continue;
    } catch (const jaxport::CheckFailedError& e) {
      const bool passed = e.kind() == c->expected_check && e.what() == c->expected_error;
      ++compared;
      std::printf("  %-16s %-24s %s %s: %s %s\n", c->name.c_str(), "(check failure)", e.kind().c_str(),
                  jaxport::StatusCodeName(e.code()), e.what(), passed ? "ok" : "MISMATCH");
      if (!passed) mismatches.push_back(c->name + " (check failure)");
      ++cases_run;
      continue;
    }
    ++cases_run;
    for (const auto& [name, rel] : c->outputs) {
      const Tensor want = jaxport::ReadNpy(jaxport::ResolveInside(o.artifact, rel, "golden output"));
      const Tensor& actual = got.at(name);
      if (actual.shape() != want.shape() || actual.dtype() != want.dtype()) {
        throw ArtifactError("case " + c->name + " output " + name + ": the golden is " + jaxport::Name(want.dtype()) +
                            jaxport::ShapeText(want.shape()) + ", Run gave " + jaxport::Name(actual.dtype()) +
                            jaxport::ShapeText(actual.shape()));
      }
      const Verdict v = CompareOutput(actual, want, o);
      ++compared;
      std::printf("  %-16s %-24s %-9s%-12s max abs err %-10s tolerance %-22s %s\n", c->name.c_str(), name.c_str(),
                  jaxport::Name(want.dtype()), Compact(want.shape()).c_str(), Format("%.3g", v.max_abs).c_str(),
                  v.rule.c_str(), v.passed ? "ok" : "MISMATCH");
      if (!v.passed) mismatches.push_back(c->name + " " + name);
    }
  }
  if (!mismatches.empty()) {
    std::string list;
    for (const std::string& s : mismatches) list += (list.empty() ? "" : ", ") + s;
    std::printf("FAILED: %zu of %d output(s) differ from the goldens: %s\n", mismatches.size(), compared, list.c_str());
    return 1;
  }
  if (compared == 0) std::printf("warning: the artifact has no golden case with outputs: nothing was compared\n");
  std::printf("ok: %d case(s) over %d program(s), %d output(s) within tolerance\n", cases_run, programs_run, compared);
  return 0;
}

// A file name for an output: its name with anything but [A-Za-z0-9_.-] replaced by '_'.
std::string FileName(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '_';
  return out.empty() || out == "." || out == ".." ? "_" + out : out;
}

int RunInputs(const Options& o) {
  std::map<std::string, Tensor> host;
  for (const auto& [name, path] : o.inputs) {
    if (host.count(name)) throw jaxport::InvalidInputError("--input " + name + " given twice");
    host.emplace(name, jaxport::ReadNpy(path));
  }
  const jaxport::Runtime runtime = LoadRuntime(o);
  const jaxport::Model model = jaxport::Model::Open(runtime, o.artifact);
  jaxport::Inputs inputs;
  for (const auto& [name, tensor] : host) inputs.emplace(name, tensor.view());
  jaxport::Outputs outputs;
  try {
    outputs = model.Run(inputs);
  } catch (const jaxport::CheckFailedError& e) {
    std::fprintf(stderr, "jaxport-pjrt-run: check failed: %s (%s): %s\n", e.kind().c_str(),
                 jaxport::StatusCodeName(e.code()), e.what());
    return 1;
  }
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  if (ec) throw ArtifactError(o.output_dir + ": cannot create: " + ec.message());
  for (const auto& [name, tensor] : outputs) {
    const std::string path = (fs::path(o.output_dir) / (FileName(name) + ".npy")).string();
    jaxport::WriteNpy(path, tensor.view());
    std::printf("%s: %s %s\n", path.c_str(), jaxport::Name(tensor.dtype()), jaxport::ShapeText(tensor.shape()).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = ParseArgs(argc, argv);
    return o.inputs.empty() ? RunGoldens(o) : RunInputs(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "jaxport-pjrt-run: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {  // jaxport::Error of every kind, I/O
    std::fflush(stdout);
    std::fprintf(stderr, "jaxport-pjrt-run: %s\n", e.what());
    return 2;
  }
}
