// Manifests for the parser and binder tests: see test_manifests.h.
#include "test_manifests.h"

#include <map>

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
