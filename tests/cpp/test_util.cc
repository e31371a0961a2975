#include "test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

namespace jaxport::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "jaxport-cpp-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

double ValueAt(const Tensor& t, size_t i) {
  const char* p = static_cast<const char*>(t.data()) + i * ItemSize(t.dtype());
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype()) {
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
      const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      const double s = (h & 0x8000) ? -1.0 : 1.0;
      if (e == 0) return s * std::ldexp(m, -24);
      if (e == 31) return m ? NAN : s * INFINITY;
      return s * std::ldexp(m + 1024, e - 25);
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

std::string Mismatch(const Tensor& actual, const Tensor& expected) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return std::string("got ") + Name(actual.dtype()) + ShapeText(actual.shape()) + ", expected " +
           Name(expected.dtype()) + ShapeText(expected.shape());
  }
  double atol = 0, rtol = 0;
  switch (expected.dtype()) {
    case DType::kFloat64: atol = 1e-12; rtol = 1e-10; break;
    case DType::kFloat32: atol = 1e-5; rtol = 1e-4; break;
    case DType::kFloat16: atol = 2e-3; rtol = 2e-3; break;
    case DType::kBFloat16: atol = 1.6e-2; rtol = 1.6e-2; break;
    default:
      return std::memcmp(actual.data(), expected.data(), expected.size_bytes()) == 0 ? "" : "integer/bool values differ";
  }
  for (size_t i = 0; i < static_cast<size_t>(expected.num_elements()); ++i) {
    const double a = ValueAt(actual, i), e = ValueAt(expected, i);
    const bool same_special = (std::isnan(a) && std::isnan(e)) || (std::isinf(e) && a == e);
    const bool close = std::isfinite(a) && std::isfinite(e) && std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!same_special && !close) {
      return "element " + std::to_string(i) + ": got " + std::to_string(a) + ", expected " + std::to_string(e) +
             " (atol " + std::to_string(atol) + ", rtol " + std::to_string(rtol) + ")";
    }
  }
  return "";
}

}  // namespace jaxport::testing

namespace jaxport::testing {
namespace {

using nlohmann::json;

json DT(const std::string& numpy) {
  static const std::map<std::string, std::pair<std::string, int>> kTable = {
      {"float32", {"f32", 4}}, {"int32", {"i32", 4}}, {"bool", {"i1", 1}}};
  const auto& [mlir, size] = kTable.at(numpy);
  std::string datatype = numpy == "float32" ? "FP32" : numpy == "int32" ? "INT32" : "BOOL";
  return {{"numpy", numpy}, {"mlir", mlir}, {"datatype", datatype}, {"itemsize", size}};
}

int64_t Bytes(const std::vector<int64_t>& shape, const std::string& numpy) {
  int64_t n = numpy == "bool" ? 1 : 4;
  for (int64_t d : shape) n *= d < 0 ? 0 : d;
  return n;
}

json Shape(const std::vector<int64_t>& shape) {
  json out = json::array();
  for (int64_t d : shape) out.push_back(std::to_string(d));  // int64 as proto3 JSON strings
  return out;
}

json Arg(int index, const std::string& role, const std::string& name, const std::vector<int64_t>& shape,
         const std::string& numpy, const std::vector<std::string>& dim_names = {}) {
  json a = {{"index", index}, {"role", role}, {"name", name}, {"keyPath", ""}, {"leafIndex", index},
            {"shape", Shape(shape)}, {"dtype", DT(numpy)}, {"byteSize", std::to_string(Bytes(shape, numpy))}};
  if (!dim_names.empty()) a["dimNames"] = dim_names;
  if (role == "ARGUMENT_ROLE_PARAMETER") {
    a["tensorstoreSpecJson"] = R"({"driver": "zarr3", "kvstore": {"driver": "file", "path": "weights/)" + name + R"(/"}})";
    a["sha256"] = std::string(64, 'a');
  }
  return a;
}

json Res(int index, const std::string& name, const std::vector<int64_t>& shape,
         const std::vector<std::string>& dim_names = {}) {
  json r = {{"index", index}, {"role", "RESULT_ROLE_OUTPUT"}, {"name", name}, {"shape", Shape(shape)},
            {"dtype", DT("float32")}, {"byteSize", std::to_string(Bytes(shape, "float32"))}};
  if (!dim_names.empty()) r["dimNames"] = dim_names;
  return r;
}

json Spec(const std::string& name, const std::vector<int64_t>& shape, const std::string& numpy,
          const std::vector<std::string>& dim_names = {}) {
  json t = {{"name", name}, {"shape", Shape(shape)}, {"dtype", DT(numpy)}, {"labelsFile", ""}};
  if (!dim_names.empty()) t["dimNames"] = dim_names;
  return t;
}

}  // namespace

json BatchedManifest() {
  json programs = json::array();
  for (int b : {1, 4}) {
    const std::string file = "model.b" + std::to_string(b) + ".mlirbc";
    programs.push_back({{"mlirbcFile", file}, {"mlirFile", "model.b" + std::to_string(b) + ".mlir"},
                        {"jaxexportFile", "model.b" + std::to_string(b) + ".jaxexport"}, {"batchSize", b},
                        {"arguments", {Arg(0, "ARGUMENT_ROLE_PARAMETER", "params.w", {16, 3}, "float32"),
                                       Arg(1, "ARGUMENT_ROLE_INPUT", "x", {b, 16}, "float32")}},
                        {"results", {Res(0, "probs", {b, 3})}}, {"customCallTargets", json::array()},
                        {"polymorphic", false}, {"dims", json::object()}});
  }
  return {{"schemaVersion", 1}, {"name", "mlp"}, {"sourceFunction", "mlp:predict"},
          {"versions", {{"jaxport", "0.1"}, {"jax", "0.12.0.1"}, {"jaxlib", "0.12.0.1"}, {"stablehloTarget", "1.18.0"},
                        {"callingConvention", 10}, {"serialization", 1}}},
          {"platforms", {"cpu"}}, {"nrDevices", 1}, {"programs", programs}, {"droppedLeaves", json::array()},
          {"inputs", {Spec("x", {-1, 16}, "float32")}}, {"outputs", {Spec("probs", {-1, 3}, "float32")}},
          {"files", {{{"path", "model.b1.mlirbc"}, {"sizeBytes", "10"}, {"sha256", std::string(64, 'b')}},
                     {{"path", "model.b4.mlirbc"}, {"sizeBytes", "10"}, {"sha256", std::string(64, 'c')}}}},
          {"goldens", json::array()},
          {"batching", {{"batchSizes", {1, 4}}, {"batchedInputs", {"x"}}, {"batchedOutputs", {"probs"}}}},
          {"vjpOrder", 0}, {"allowedCustomCalls", json::array()}, {"exportedAt", "2026-12-01T00:00:00Z"}};
}

json BucketManifest() {
  json programs = json::array();
  programs.push_back({{"mlirbcFile", "model.mlirbc"}, {"batchSize", 0}, {"polymorphic", true},
                      {"arguments", {Arg(0, "ARGUMENT_ROLE_PARAMETER", "params.embed", {32, 8}, "float32"),
                                     Arg(1, "ARGUMENT_ROLE_INPUT", "tokens", {-1, -1}, "int32", {"B", "T"}),
                                     Arg(2, "ARGUMENT_ROLE_INPUT", "mask", {-1, -1}, "bool", {"B", "T"})}},
                      {"results", {Res(0, "pooled", {-1, 8}, {"B", ""}), Res(1, "per_token", {-1, -1, 8}, {"B", "T", ""})}}});
  for (int b : {1, 2}) {
    for (int t : {16, 64}) {
      programs.push_back({{"mlirbcFile", "model.B" + std::to_string(b) + ".T" + std::to_string(t) + ".mlirbc"},
                          {"batchSize", 0}, {"polymorphic", false},
                          {"dims", {{"B", std::to_string(b)}, {"T", std::to_string(t)}}},
                          {"arguments", {Arg(0, "ARGUMENT_ROLE_PARAMETER", "params.embed", {32, 8}, "float32"),
                                         Arg(1, "ARGUMENT_ROLE_INPUT", "tokens", {b, t}, "int32"),
                                         Arg(2, "ARGUMENT_ROLE_INPUT", "mask", {b, t}, "bool")}},
                          {"results", {Res(0, "pooled", {b, 8}), Res(1, "per_token", {b, t, 8})}}});
    }
  }
  return {{"schemaVersion", 2}, {"name", "seq"}, {"versions", {{"stablehloTarget", "1.18.0"}}},
          {"platforms", {"cpu"}}, {"nrDevices", 1}, {"programs", programs},
          {"inputs", {Spec("tokens", {-1, -1}, "int32", {"B", "T"}), Spec("mask", {-1, -1}, "bool", {"B", "T"})}},
          {"outputs", {Spec("pooled", {-1, 8}, "float32", {"B", ""}), Spec("per_token", {-1, -1, 8}, "float32", {"B", "T", ""})}},
          {"dimensions", {{{"name", "B"}, {"min", "1"}, {"max", "4"}, {"multipleOf", "1"}, {"expression", "B"}},
                          {{"name", "T"}, {"min", "8"}, {"max", "64"}, {"multipleOf", "8"}, {"expression", "8*T_8"}}}},
          {"padding", {{{"dim", "T"}, {"maskInput", "mask"}}}}};
}

}  // namespace jaxport::testing
