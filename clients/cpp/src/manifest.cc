// manifest.json: see jaxport/manifest.h. The checks follow clients/python/artifact/manifest.py
// (validate, _check_dimensions) and the Go engine's reader (schema version).
#include "jaxport/manifest.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>

#include "jaxport/artifact.h"

namespace jaxport {
namespace {

using nlohmann::json;

std::string Snake(const std::string& camel) {
  std::string out;
  for (char c : camel) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

// One JSON object of the schema: its known fields (proto3 JSON: lowerCamelCase or the proto
// names), anything else refused.
class Obj {
 public:
  Obj(const json& j, std::string what, std::initializer_list<const char*> fields, const std::string& source)
      : j_(j), what_(std::move(what)), source_(source) {
    if (!j.is_object()) Fail("is not a JSON object");
    for (auto& [key, value] : j.items()) {
      bool known = false;
      for (const char* f : fields) known = known || key == f || key == Snake(f);
      if (!known) Fail("has an unknown field '" + key + "' (jaxport.v1 schema)");
    }
  }

  [[noreturn]] void Fail(const std::string& why) const {
    throw ArtifactError(source_ + ": " + what_ + " " + why);
  }
  const std::string& what() const { return what_; }
  std::string Sub(const std::string& field) const { return what_.empty() ? field : what_ + "." + field; }

  const json* Find(const char* camel) const {
    auto it = j_.find(camel);
    if (it == j_.end()) it = j_.find(Snake(camel));
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string Str(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return "";
    if (!v->is_string()) Fail("field " + std::string(key) + " is not a string: " + v->dump());
    return v->get<std::string>();
  }

  bool Bool(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) Fail("field " + std::string(key) + " is not a boolean: " + v->dump());
    return v->get<bool>();
  }

  // proto3 JSON integers: numbers, or strings (64-bit ones are written as strings).
  int64_t Int(const char* key, int64_t fallback = 0) const { return IntOf(Find(key), key, fallback); }

  int64_t IntOf(const json* v, const std::string& key, int64_t fallback = 0) const {
    if (v == nullptr) return fallback;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_string()) {
      const std::string& text = v->get_ref<const std::string&>();
      size_t used = 0;
      int64_t parsed = 0;
      try {
        parsed = std::stoll(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == text.size() && used > 0) return parsed;
    }
    Fail("field " + key + " is not an integer: " + v->dump());
  }

  uint32_t U32(const char* key) const {
    const int64_t v = Int(key);
    if (v < 0 || v > 0xFFFFFFFFll) Fail("field " + std::string(key) + " is out of range: " + std::to_string(v));
    return static_cast<uint32_t>(v);
  }

  const json& List(const char* key) const {
    static const json kEmpty = json::array();
    const json* v = Find(key);
    if (v == nullptr) return kEmpty;
    if (!v->is_array()) Fail("field " + std::string(key) + " is not a list");
    return *v;
  }

  std::vector<std::string> Strings(const char* key) const {
    std::vector<std::string> out;
    for (const json& s : List(key)) {
      if (!s.is_string()) Fail("field " + std::string(key) + " holds a non-string: " + s.dump());
      out.push_back(s.get<std::string>());
    }
    return out;
  }

  std::vector<int64_t> Ints(const char* key) const {
    std::vector<int64_t> out;
    for (const json& v : List(key)) out.push_back(IntOf(&v, key));
    return out;
  }

  std::map<std::string, std::string> StringMap(const char* key) const {
    std::map<std::string, std::string> out;
    const json* v = Find(key);
    if (v == nullptr) return out;
    if (!v->is_object()) Fail("field " + std::string(key) + " is not a map");
    for (auto& [name, value] : v->items()) {
      if (!value.is_string()) Fail("field " + std::string(key) + "['" + name + "'] is not a string");
      out[name] = value.get<std::string>();
    }
    return out;
  }

  std::map<std::string, int64_t> IntMap(const char* key) const {
    std::map<std::string, int64_t> out;
    const json* v = Find(key);
    if (v == nullptr) return out;
    if (!v->is_object()) Fail("field " + std::string(key) + " is not a map");
    for (auto& [name, value] : v->items()) out[name] = IntOf(&value, std::string(key) + "['" + name + "']");
    return out;
  }

  // An enum: its name, or its number.
  int Enum(const char* key, std::initializer_list<const char*> names) const {
    const json* v = Find(key);
    if (v == nullptr) return 0;
    if (v->is_number_integer()) {
      const int64_t n = v->get<int64_t>();
      if (n >= 0 && n < static_cast<int64_t>(names.size())) return static_cast<int>(n);
    } else if (v->is_string()) {
      int i = 0;
      for (const char* name : names) {
        if (v->get<std::string>() == name) return i;
        ++i;
      }
    }
    Fail("field " + std::string(key) + " has no value of the schema: " + v->dump());
  }

 private:
  const json& j_;
  std::string what_;
  const std::string& source_;
};

DType ParseDType(const Obj& parent, const std::string& source) {
  const json* d = parent.Find("dtype");
  if (d == nullptr) parent.Fail("has no dtype");
  Obj o(*d, parent.Sub("dtype"), {"numpy", "mlir", "datatype", "itemsize"}, source);
  const std::string numpy = o.Str("numpy");
  const std::optional<DType> dtype = DTypeFromNumpy(numpy);
  if (!dtype) parent.Fail("names an unsupported dtype '" + numpy + "'");
  const DTypeInfo& info = Info(*dtype);
  const std::string mlir = o.Str("mlir");
  const int64_t itemsize = o.Int("itemsize");
  if (mlir != info.mlir || itemsize != static_cast<int64_t>(info.itemsize)) {
    parent.Fail("dtype " + d->dump() + " is inconsistent (" + numpy + " is " + info.mlir + ", " +
                std::to_string(info.itemsize) + " bytes)");
  }
  return *dtype;
}

// Elements of a manifest shape; -1 axes (symbolic) are allowed only where `symbolic`.
uint64_t CheckShape(const Obj& o, const std::vector<int64_t>& shape,
                    const std::vector<std::string>& dim_names, bool symbolic) {
  if (!dim_names.empty() && dim_names.size() != shape.size()) {
    o.Fail("has dim_names of " + std::to_string(dim_names.size()) + " axes for shape " + ShapeText(shape));
  }
  uint64_t n = 1;
  bool any_symbolic = false;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    const bool named = !dim_names.empty() && !dim_names[axis].empty();
    if (shape[axis] == -1 && named && symbolic) {
      any_symbolic = true;
      continue;
    }
    if (shape[axis] < 0 || named) {
      o.Fail("has a non-fixed shape " + ShapeText(shape) + "; only fixed shapes (or named symbolic axes "
             "of a polymorphic program) are allowed");
    }
    n *= static_cast<uint64_t>(shape[axis]);
  }
  return any_symbolic ? 0 : n;
}

TensorSpec ParseTensorSpec(const json& j, const std::string& what, const std::string& source) {
  Obj o(j, what, {"name", "shape", "dtype", "labelsFile", "dimNames"}, source);
  TensorSpec t;
  t.name = o.Str("name");
  t.shape = o.Ints("shape");
  t.dtype = ParseDType(o, source);
  t.labels_file = o.Str("labelsFile");
  if (!t.labels_file.empty()) CheckRelative(t.labels_file, source + ": " + what + ".labelsFile");
  t.dim_names = o.Strings("dimNames");
  if (!t.dim_names.empty() && t.dim_names.size() != t.shape.size()) {
    o.Fail("has dimNames of " + std::to_string(t.dim_names.size()) + " axes for shape " + ShapeText(t.shape));
  }
  for (size_t axis = 0; axis < t.shape.size(); ++axis) {
    const bool named = !t.dim_names.empty() && !t.dim_names[axis].empty();
    if (t.shape[axis] < -1 || (named && t.shape[axis] != -1)) {
      o.Fail("axis " + std::to_string(axis) + " of shape " + ShapeText(t.shape) + " is malformed");
    }
  }
  return t;
}

void ParseSharding(const Obj& parent, const std::string& source) {
  if (const json* s = parent.Find("sharding")) Obj(*s, parent.Sub("sharding"), {"spec", "hloSharding"}, source);
}

Program ParseProgram(const json& j, const std::string& where, const std::string& source) {
  Obj o(j, where, {"mlirbcFile", "mlirFile", "jaxexportFile", "batchSize", "arguments", "results",
                   "customCallTargets", "polymorphic", "dims"}, source);
  Program p;
  p.mlirbc_file = o.Str("mlirbcFile");
  CheckRelative(p.mlirbc_file, source + ": " + where + ".mlirbcFile");
  p.batch_size = o.U32("batchSize");
  p.polymorphic = o.Bool("polymorphic");
  p.dims = o.IntMap("dims");
  p.custom_call_targets = o.Strings("customCallTargets");
  std::set<std::string> names;
  const json& args = o.List("arguments");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string what = where + ".arguments[" + std::to_string(i) + "]";
    Obj a(args[i], what, {"index", "role", "name", "keyPath", "leafIndex", "shape", "dtype", "byteSize",
                          "tensorstoreSpecJson", "sha256", "dimNames", "sharding"}, source);
    Argument arg;
    arg.index = a.U32("index");
    arg.name = a.Str("name");
    const std::string named = what + " ('" + arg.name + "')";
    const int role = a.Enum("role", {"ARGUMENT_ROLE_UNSPECIFIED", "ARGUMENT_ROLE_PARAMETER",
                                     "ARGUMENT_ROLE_INPUT", "ARGUMENT_ROLE_PLATFORM_INDEX",
                                     "ARGUMENT_ROLE_TOKEN"});
    if (role == 0) throw ArtifactError(source + ": " + named + " has no role");
    arg.role = static_cast<ArgumentRole>(role - 1);
    if (arg.index != i) {
      throw ArtifactError(source + ": " + named + " has index " + std::to_string(arg.index));
    }
    if (!names.insert(arg.name).second) throw ArtifactError(source + ": " + named + ": duplicate argument name");
    arg.leaf_index = static_cast<int32_t>(a.Int("leafIndex"));
    arg.tensorstore_spec_json = a.Str("tensorstoreSpecJson");
    arg.sha256 = a.Str("sha256");
    arg.dim_names = a.Strings("dimNames");
    ParseSharding(a, source);
    if (arg.role != ArgumentRole::kToken) {
      arg.shape = a.Ints("shape");
      arg.dtype = ParseDType(a, source);
      arg.byte_size = static_cast<uint64_t>(a.Int("byteSize"));
      const uint64_t n = CheckShape(a, arg.shape, arg.dim_names, p.polymorphic);
      if (arg.byte_size != n * ItemSize(arg.dtype)) {
        throw ArtifactError(source + ": " + named + " byte_size " + std::to_string(arg.byte_size) +
                            " != " + std::to_string(n) + " elements x " + std::to_string(ItemSize(arg.dtype)));
      }
    }
    if (arg.role == ArgumentRole::kParameter && (arg.tensorstore_spec_json.empty() || arg.sha256.size() != 64)) {
      throw ArtifactError(source + ": " + named + " lacks its tensorstore spec or sha256");
    }
    if (arg.role == ArgumentRole::kPlatformIndex) {
      if (i != 0) throw ArtifactError(source + ": " + named + ": the platform index must be argument 0");
      if (!arg.shape.empty() || (arg.dtype != DType::kInt32 && arg.dtype != DType::kInt64)) {
        throw ArtifactError(source + ": " + named + ": the platform index must be an int32 or int64 scalar, got " +
                            Name(arg.dtype) + ShapeText(arg.shape));
      }
    }
    p.arguments.push_back(std::move(arg));
  }
  const json& results = o.List("results");
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string what = where + ".results[" + std::to_string(i) + "]";
    Obj r(results[i], what, {"index", "role", "name", "shape", "dtype", "byteSize", "check", "dimNames",
                             "sharding"}, source);
    Result res;
    res.index = r.U32("index");
    res.name = r.Str("name");
    const std::string named = what + " ('" + res.name + "')";
    const int role = r.Enum("role", {"RESULT_ROLE_UNSPECIFIED", "RESULT_ROLE_OUTPUT", "RESULT_ROLE_CHECK",
                                     "RESULT_ROLE_TOKEN"});
    if (role == 0) throw ArtifactError(source + ": " + named + " has no role");
    res.role = static_cast<ResultRole>(role - 1);
    if (res.index != i) throw ArtifactError(source + ": " + named + " has index " + std::to_string(res.index));
    res.dim_names = r.Strings("dimNames");
    ParseSharding(r, source);
    if (const json* c = r.Find("check")) {
      Obj leaf(*c, r.Sub("check"), {"part", "effect"}, source);
      res.check.part = leaf.Str("part");
      res.check.effect = leaf.U32("effect");
    }
    if (res.role == ResultRole::kCheck && res.check.part.empty()) {
      throw ArtifactError(source + ": " + named + " is a check result without its check leaf");
    }
    if (res.role != ResultRole::kToken) {
      res.shape = r.Ints("shape");
      res.dtype = ParseDType(r, source);
      res.byte_size = static_cast<uint64_t>(r.Int("byteSize"));
      const uint64_t n = CheckShape(r, res.shape, res.dim_names, p.polymorphic);
      if (res.byte_size != n * ItemSize(res.dtype)) {
        throw ArtifactError(source + ": " + named + " byte_size " + std::to_string(res.byte_size) +
                            " is inconsistent");
      }
    }
    p.results.push_back(std::move(res));
  }
  return p;
}

void CheckDimensions(const Manifest& m, const std::string& source) {
  std::set<std::string> declared;
  for (const Dimension& d : m.dimensions) {
    if (d.name.empty() || declared.count(d.name) || !(1 <= d.min && d.min <= d.max) || d.multiple_of < 1 ||
        d.min % d.multiple_of != 0 || d.max % d.multiple_of != 0) {
      throw ArtifactError(source + ": dimensions entry '" + d.name + "' is malformed (" + std::to_string(d.min) +
                          ".." + std::to_string(d.max) + ", multiple of " + std::to_string(d.multiple_of) + ")");
    }
    declared.insert(d.name);
  }
  for (const auto* specs : {&m.inputs, &m.outputs}) {
    for (const TensorSpec& t : *specs) {
      for (const std::string& n : t.dim_names) {
        if (!n.empty() && !declared.count(n)) {
          throw ArtifactError(source + ": " + (specs == &m.inputs ? "inputs" : "outputs") + "['" + t.name +
                              "'] names dimension '" + n + "', which manifest.dimensions does not declare");
        }
      }
    }
  }
  for (const Padding& pad : m.padding) {
    const bool input = std::any_of(m.inputs.begin(), m.inputs.end(),
                                   [&](const TensorSpec& t) { return t.name == pad.mask_input; });
    if (!declared.count(pad.dim) || !input) {
      throw ArtifactError(source + ": padding entry " + pad.dim + "=" + pad.mask_input +
                          " names an undeclared dimension or an input the model does not have");
    }
  }
  if (std::any_of(m.programs.begin(), m.programs.end(), [](const Program& p) { return p.polymorphic; }) &&
      declared.empty()) {
    throw ArtifactError(source + ": a polymorphic program but no manifest.dimensions");
  }
  for (const Program& p : m.programs) {
    for (const auto& [name, size] : p.dims) {
      if (!declared.count(name) || size < 1) {
        throw ArtifactError(source + ": program " + p.mlirbc_file + " dims " + name + "=" +
                            std::to_string(size) + " names no declared dimension");
      }
    }
  }
}

void CheckBatching(const Manifest& m, const std::string& source) {
  if (!m.has_batching) return;
  std::vector<uint32_t> sizes;
  for (const Program& p : m.programs) sizes.push_back(p.batch_size);
  std::sort(sizes.begin(), sizes.end());
  if (sizes != m.batching.batch_sizes || sizes.empty() || sizes.front() < 1 ||
      std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    throw ArtifactError(source + ": batching.batchSizes do not match the programs' batch sizes, ascending");
  }
  auto check = [&](const std::vector<std::string>& names, const std::vector<TensorSpec>& specs, const char* what) {
    for (const std::string& n : names) {
      auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == n; });
      if (it == specs.end() || it->shape.empty() || it->shape[0] != -1) {
        throw ArtifactError(source + ": batching lists " + what + " '" + n +
                            "', which is not one with a leading batch dimension (-1)");
      }
    }
  };
  check(m.batching.batched_inputs, m.inputs, "input");
  check(m.batching.batched_outputs, m.outputs, "output");
}

}  // namespace

Manifest ParseManifest(const std::string& json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    throw ArtifactError(source + " is not valid JSON: " + e.what());
  }
  if (!doc.is_object()) throw ArtifactError(source + " must hold a JSON object");
  Obj o(doc, "", {"schemaVersion", "name", "sourceFunction", "versions", "platforms", "nrDevices", "programs",
                  "droppedLeaves", "inputs", "outputs", "files", "goldens", "checks", "batching", "vjpOrder",
                  "allowedCustomCalls", "exportedAt", "dimensions", "padding", "mesh", "droppedState"},
        source);
  Manifest m;
  m.schema_version = o.U32("schemaVersion");
  if (m.schema_version < kMinSchemaVersion || m.schema_version > kMaxSchemaVersion) {
    throw ArtifactError(source + ": manifest schemaVersion " + std::to_string(m.schema_version) +
                        "; this reader accepts " + std::to_string(kMinSchemaVersion) + ".." +
                        std::to_string(kMaxSchemaVersion));
  }
  m.name = o.Str("name");
  o.Str("sourceFunction");
  o.Str("exportedAt");
  o.Strings("allowedCustomCalls");
  if (const json* v = o.Find("versions")) {
    Obj versions(*v, "versions", {"jaxport", "jax", "jaxlib", "stablehloTarget", "callingConvention", "serialization"},
                 source);
    m.stablehlo_target = versions.Str("stablehloTarget");
  }
  m.platforms = o.Strings("platforms");
  m.nr_devices = std::max<uint32_t>(1, o.U32("nrDevices"));
  m.vjp_order = o.U32("vjpOrder");
  if (const json* v = o.Find("mesh")) {
    Obj mesh(*v, "mesh", {"axes"}, source);
    for (const json& axis : mesh.List("axes")) {
      Obj a(axis, "mesh.axes[]", {"name", "size"}, source);
      m.mesh += (m.mesh.empty() ? "" : ",") + a.Str("name") + "=" + std::to_string(a.U32("size"));
    }
  }
  for (const json& d : o.List("droppedLeaves")) Obj(d, "droppedLeaves[]", {"leafIndex", "keyPath", "name", "kind"}, source);
  for (const json& d : o.List("droppedState")) Obj(d, "droppedState[]", {"layer", "kind", "leaves", "reason"}, source);
  const json& inputs = o.List("inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    m.inputs.push_back(ParseTensorSpec(inputs[i], "inputs[" + std::to_string(i) + "]", source));
  }
  const json& outputs = o.List("outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    m.outputs.push_back(ParseTensorSpec(outputs[i], "outputs[" + std::to_string(i) + "]", source));
  }
  for (const json& f : o.List("files")) {
    Obj e(f, "files[]", {"path", "sizeBytes", "sha256"}, source);
    FileEntry entry{e.Str("path"), static_cast<uint64_t>(e.Int("sizeBytes")), e.Str("sha256")};
    CheckRelative(entry.path, source + ": files[]");
    if (entry.sha256.size() != 64) throw ArtifactError(source + ": files entry '" + entry.path + "' has no sha256");
    m.files.push_back(entry);
  }
  const json& programs = o.List("programs");
  if (programs.empty()) throw ArtifactError(source + ": no programs");
  for (size_t p = 0; p < programs.size(); ++p) {
    m.programs.push_back(ParseProgram(programs[p], "programs[" + std::to_string(p) + "]", source));
  }
  if (m.platforms.size() > 1) {
    for (const Program& p : m.programs) {
      if (p.arguments.empty() || p.arguments[0].role != ArgumentRole::kPlatformIndex) {
        throw ArtifactError(source + ": " + p.mlirbc_file + ": several platforms but argument 0 is not the platform index");
      }
    }
  }
  for (const json& g : o.List("goldens")) {
    Obj c(g, "goldens[]", {"name", "inputs", "outputs", "checkOutputs", "expectedError", "expectedCheck", "batchSize",
                           "outputCotangents", "gradients", "dims"}, source);
    GoldenCase golden;
    golden.name = c.Str("name");
    golden.batch_size = c.U32("batchSize");
    golden.dims = c.IntMap("dims");
    golden.inputs = c.StringMap("inputs");
    golden.outputs = c.StringMap("outputs");
    golden.check_outputs = c.StringMap("checkOutputs");
    golden.expected_error = c.Str("expectedError");
    golden.expected_check = c.Str("expectedCheck");
    c.StringMap("outputCotangents");
    c.StringMap("gradients");
    for (const auto* paths : {&golden.inputs, &golden.outputs, &golden.check_outputs}) {
      for (const auto& [name, rel] : *paths) CheckRelative(rel, source + ": goldens['" + golden.name + "']");
    }
    m.goldens.push_back(std::move(golden));
  }
  if (const json* v = o.Find("checks")) {
    Obj c(*v, "checks", {"enabled", "codes", "goldenKinds"}, source);
    m.has_checks = true;
    m.checks.enabled = c.Strings("enabled");
    m.checks.golden_kinds = c.Strings("goldenKinds");
    for (const json& e : c.List("codes")) {
      Obj code(e, "checks.codes[]", {"code", "kind", "effect", "messageTemplate", "payloadSize", "location"}, source);
      ErrorCode ec;
      ec.code = static_cast<int32_t>(code.Int("code"));
      ec.kind = code.Str("kind");
      ec.effect = code.U32("effect");
      ec.message_template = code.Str("messageTemplate");
      ec.payload_size = code.U32("payloadSize");
      ec.location = code.Str("location");
      m.checks.codes.push_back(std::move(ec));
    }
  }
  if (const json* v = o.Find("batching")) {
    Obj b(*v, "batching", {"batchSizes", "batchedInputs", "batchedOutputs"}, source);
    m.has_batching = true;
    for (int64_t s : b.Ints("batchSizes")) m.batching.batch_sizes.push_back(static_cast<uint32_t>(s));
    m.batching.batched_inputs = b.Strings("batchedInputs");
    m.batching.batched_outputs = b.Strings("batchedOutputs");
  }
  for (const json& d : o.List("dimensions")) {
    Obj dim(d, "dimensions[]", {"name", "min", "max", "multipleOf", "expression"}, source);
    m.dimensions.push_back(Dimension{dim.Str("name"), dim.Int("min"), dim.Int("max"), dim.Int("multipleOf", 1),
                                     dim.Str("expression")});
  }
  for (const json& d : o.List("padding")) {
    Obj pad(d, "padding[]", {"dim", "maskInput"}, source);
    m.padding.push_back(Padding{pad.Str("dim"), pad.Str("maskInput")});
  }
  const bool schema2 = !m.dimensions.empty() || !m.padding.empty() || !m.mesh.empty();
  if (schema2 && m.schema_version < 2) {
    throw ArtifactError(source + ": manifest schema_version " + std::to_string(m.schema_version) +
                        " cannot carry symbolic dimensions or a device mesh; they need schema_version 2");
  }
  if (m.nr_devices > 1 && m.mesh.empty()) {
    throw ArtifactError(source + ": nr_devices " + std::to_string(m.nr_devices) + " without a mesh");
  }
  CheckDimensions(m, source);
  CheckBatching(m, source);
  return m;
}

Manifest LoadManifest(const std::string& dir) {
  const std::string source = dir + "/manifest.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source, ec)) {
    throw ArtifactError(dir + ": no manifest.json; is this a jaxport artifact directory?");
  }
  return ParseManifest(ReadFile(source), source);
}

}  // namespace jaxport
