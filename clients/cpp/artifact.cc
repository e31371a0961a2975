// Artifact reading: see artifact.h.
#include "artifact.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace jaxport::artifact {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// proto3 JSON writes 64-bit integers as strings and 32-bit ones as numbers: accept both.
int64_t Int(const json& value, const std::string& what) {
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    size_t used = 0;
    int64_t parsed = 0;
    try {
      parsed = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == text.size() && used > 0) return parsed;
  }
  throw ArtifactError("manifest.json: " + what + " is not an integer: " + value.dump());
}

// A field with its proto3 default when absent.
int64_t IntOr(const json& object, const char* key, int64_t fallback, const std::string& what) {
  auto it = object.find(key);
  return it == object.end() ? fallback : Int(*it, what + "." + key);
}

std::string StrOr(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  if (!it->is_string()) throw ArtifactError(std::string("manifest.json: ") + key + " is not a string");
  return it->get<std::string>();
}

const json& ListOr(const json& object, const char* key) {
  static const json kEmpty = json::array();
  auto it = object.find(key);
  return it == object.end() ? kEmpty : *it;
}

std::vector<int64_t> Shape(const json& object, const std::string& what) {
  std::vector<int64_t> shape;
  for (const json& d : ListOr(object, "shape")) shape.push_back(Int(d, what + ".shape"));
  return shape;
}

DType ParseDType(const json& object, const std::string& what) {
  auto it = object.find("dtype");
  if (it == object.end()) throw ArtifactError("manifest.json: " + what + " has no dtype");
  DType dtype{StrOr(*it, "numpy"), StrOr(*it, "mlir"),
              static_cast<uint32_t>(IntOr(*it, "itemsize", 0, what + ".dtype"))};
  if (dtype.numpy.empty() || dtype.mlir.empty() || dtype.itemsize == 0) {
    throw ArtifactError("manifest.json: " + what + " has an incomplete dtype: " + it->dump());
  }
  return dtype;
}

std::map<std::string, std::string> StringMap(const json& object, const char* key) {
  std::map<std::string, std::string> out;
  auto it = object.find(key);
  if (it == object.end()) return out;
  for (auto& [name, value] : it->items()) out[name] = value.get<std::string>();
  return out;
}

std::map<std::string, int64_t> IntMap(const json& object, const char* key,
                                      const std::string& what) {
  std::map<std::string, int64_t> out;
  auto it = object.find(key);
  if (it == object.end()) return out;
  for (auto& [name, value] : it->items()) out[name] = Int(value, what + "." + key);
  return out;
}

// The path rule's textual half (paths.check_relative).
void CheckRelative(const std::string& rel, const std::string& what) {
  if (rel.empty() || rel.front() == '/' || rel.find('\\') != std::string::npos ||
      rel.find('\0') != std::string::npos) {
    throw ArtifactError(what + ": path '" + rel + "' is not a relative path inside the artifact");
  }
  std::stringstream parts(rel);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part == "..") throw ArtifactError(what + ": path '" + rel + "' contains '..'; refused");
  }
}

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

// Steps the odometer `at` over axes [0, axes) within `limits` (last axis fastest); false once
// every position was visited.
bool Advance(std::vector<int64_t>& at, const std::vector<int64_t>& limits, size_t axes) {
  while (axes-- > 0) {
    if (++at[axes] < limits[axes]) return true;
    at[axes] = 0;
  }
  return false;
}

// numpy's descr of an array of `dtype` as np.save writes it ('<f4', '|b1'; bfloat16 is raw V2).
std::vector<std::string> NpyDescrs(const DType& dtype) {
  static const std::map<std::string, std::string> kKinds = {
      {"bool", "b"},    {"int8", "i"},    {"int16", "i"},   {"int32", "i"},    {"int64", "i"},
      {"uint8", "u"},   {"uint16", "u"},  {"uint32", "u"},  {"uint64", "u"},   {"float16", "f"},
      {"float32", "f"}, {"float64", "f"}, {"bfloat16", "V"}};
  auto it = kKinds.find(dtype.numpy);
  if (it == kKinds.end()) throw ArtifactError("unsupported dtype " + dtype.numpy);
  std::string code = it->second + std::to_string(dtype.itemsize);
  if (dtype.itemsize == 1 || it->second == "V") return {"|" + code, "<" + code};
  return {"<" + code};
}

// The value of key `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False,
// 'shape': (4, 16), }").
std::string HeaderValue(const std::string& header, const std::string& key,
                        const std::string& what) {
  size_t at = header.find("'" + key + "'");
  size_t colon = at == std::string::npos ? at : header.find(':', at);
  if (colon == std::string::npos) throw ArtifactError(what + ": .npy header has no " + key);
  size_t start = header.find_first_not_of(' ', colon + 1);
  size_t end = header[start] == '(' ? header.find(')', start) + 1
               : header[start] == '\'' ? header.find('\'', start + 1) + 1
                                       : header.find_first_of(",}", start);
  return header.substr(start, end - start);
}

}  // namespace

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ArtifactError(path + ": cannot open");
  std::ostringstream data;
  data << in.rdbuf();
  if (in.bad()) throw ArtifactError(path + ": read error");
  return data.str();
}

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) != 1) {
    throw ArtifactError("sha256 failed (OpenSSL EVP_Digest)");
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

std::string ResolveInside(const std::string& dir, const std::string& rel,
                          const std::string& what) {
  CheckRelative(rel, what);
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::path(dir), ec);
  fs::path target = fs::weakly_canonical(fs::path(dir) / rel, ec);
  if (ec) throw ArtifactError(what + ": cannot resolve '" + rel + "': " + ec.message());
  auto mismatch = std::mismatch(root.begin(), root.end(), target.begin(), target.end());
  if (mismatch.first != root.end()) {
    throw ArtifactError(what + ": path '" + rel + "' resolves outside " +
                        root.filename().string() + "/; refused");
  }
  return target.string();
}

Manifest LoadManifest(const std::string& dir) {
  const std::string source = dir + "/manifest.json";
  json doc;
  try {
    doc = json::parse(ReadFile(source));
  } catch (const json::exception& e) {
    throw ArtifactError(source + ": not JSON: " + e.what());
  }
  try {
    Manifest m;
    m.schema_version = static_cast<uint32_t>(IntOr(doc, "schemaVersion", 0, "schemaVersion"));
    if (m.schema_version < kMinSchemaVersion || m.schema_version > kMaxSchemaVersion) {
      throw ArtifactError(source + ": manifest schemaVersion " + std::to_string(m.schema_version) +
                          "; this reader accepts " + std::to_string(kMinSchemaVersion) + ".." +
                          std::to_string(kMaxSchemaVersion));
    }
    m.name = StrOr(doc, "name");
    if (auto v = doc.find("versions"); v != doc.end()) m.stablehlo_target = StrOr(*v, "stablehloTarget");
    for (const json& p : ListOr(doc, "platforms")) m.platforms.push_back(p.get<std::string>());
    m.nr_devices = static_cast<uint32_t>(IntOr(doc, "nrDevices", 1, "nrDevices"));
    for (const json& f : ListOr(doc, "files")) {
      FileEntry entry{StrOr(f, "path"), static_cast<uint64_t>(IntOr(f, "sizeBytes", 0, "files[]")),
                      StrOr(f, "sha256")};
      CheckRelative(entry.path, source + ": files[]");
      if (entry.sha256.size() != 64) {
        throw ArtifactError(source + ": files entry '" + entry.path + "' has no sha256");
      }
      m.files.push_back(entry);
    }
    const json& programs = ListOr(doc, "programs");
    if (programs.empty()) throw ArtifactError(source + ": no programs");
    for (size_t p = 0; p < programs.size(); ++p) {
      const json& pj = programs[p];
      const std::string where = "programs[" + std::to_string(p) + "]";
      Program program;
      program.mlirbc_file = StrOr(pj, "mlirbcFile");
      CheckRelative(program.mlirbc_file, source + ": " + where + ".mlirbcFile");
      program.batch_size = static_cast<uint32_t>(IntOr(pj, "batchSize", 0, where));
      program.polymorphic = pj.value("polymorphic", false);
      program.dims = IntMap(pj, "dims", where);
      const json& args = ListOr(pj, "arguments");
      for (size_t i = 0; i < args.size(); ++i) {
        const std::string what = where + ".arguments[" + std::to_string(i) + "]";
        Argument a;
        a.index = static_cast<uint32_t>(IntOr(args[i], "index", 0, what));
        a.role = StrOr(args[i], "role");
        a.name = StrOr(args[i], "name");
        if (a.index != i) {
          throw ArtifactError(source + ": " + what + " ('" + a.name + "') has index " +
                              std::to_string(a.index));
        }
        if (a.role != "ARGUMENT_ROLE_TOKEN") {
          a.shape = Shape(args[i], what);
          a.dtype = ParseDType(args[i], what);
        }
        a.tensorstore_spec_json = StrOr(args[i], "tensorstoreSpecJson");
        a.sha256 = StrOr(args[i], "sha256");
        if (a.role == "ARGUMENT_ROLE_PARAMETER" &&
            (a.tensorstore_spec_json.empty() || a.sha256.size() != 64)) {
          throw ArtifactError(source + ": " + what + " ('" + a.name +
                              "') lacks its tensorstore spec or sha256");
        }
        program.arguments.push_back(a);
      }
      const json& results = ListOr(pj, "results");
      for (size_t i = 0; i < results.size(); ++i) {
        const std::string what = where + ".results[" + std::to_string(i) + "]";
        Result r;
        r.role = StrOr(results[i], "role");
        r.name = StrOr(results[i], "name");
        if (IntOr(results[i], "index", 0, what) != static_cast<int64_t>(i)) {
          throw ArtifactError(source + ": " + what + " ('" + r.name + "') is out of order");
        }
        if (r.role != "RESULT_ROLE_TOKEN") {
          r.shape = Shape(results[i], what);
          r.dtype = ParseDType(results[i], what);
        }
        program.results.push_back(r);
      }
      m.programs.push_back(program);
    }
    for (const json& g : ListOr(doc, "goldens")) {
      GoldenCase c;
      c.name = StrOr(g, "name");
      c.batch_size = static_cast<uint32_t>(IntOr(g, "batchSize", 0, "goldens[]"));
      c.dims = IntMap(g, "dims", "goldens[]");
      c.inputs = StringMap(g, "inputs");
      c.outputs = StringMap(g, "outputs");
      c.check_outputs = StringMap(g, "checkOutputs");
      c.expected_check = StrOr(g, "expectedCheck");
      m.goldens.push_back(c);
    }
    return m;
  } catch (const json::exception& e) {
    throw ArtifactError(source + ": unexpected field type: " + e.what());
  }
}

void VerifyFiles(const std::string& dir, const Manifest& manifest) {
  std::set<std::string> listed;
  for (const FileEntry& f : manifest.files) listed.insert(f.path);
  std::set<std::string> needed;
  for (const Program& p : manifest.programs) needed.insert(p.mlirbc_file);
  for (const GoldenCase& c : manifest.goldens) {
    for (const auto* paths : {&c.inputs, &c.outputs, &c.check_outputs}) {
      for (const auto& [name, rel] : *paths) needed.insert(rel);
    }
  }
  for (const std::string& rel : needed) {
    if (!listed.count(rel)) {
      throw ArtifactError(dir + ": " + rel + " is used by the manifest but not in its file list");
    }
  }
  for (const FileEntry& f : manifest.files) {
    const std::string path = ResolveInside(dir, f.path, "files['" + f.path + "']");
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      throw ArtifactError(dir + "/" + f.path + ": file listed in the manifest is missing");
    }
    const std::string data = ReadFile(path);
    if (data.size() != f.size_bytes) {
      throw ArtifactError(dir + "/" + f.path + ": size " + std::to_string(data.size()) +
                          " bytes, manifest says " + std::to_string(f.size_bytes) +
                          " (truncated or replaced?)");
    }
    const std::string actual = Sha256Hex(data.data(), data.size());
    if (actual != f.sha256) {
      throw ArtifactError(dir + "/" + f.path + ": sha256 mismatch: expected " + f.sha256 +
                          ", actual " + actual);
    }
  }
}

Array ReadParameter(const std::string& dir, const Argument& argument) {
  const std::string what = "parameter '" + argument.name + "'";
  json spec;
  try {
    spec = json::parse(argument.tensorstore_spec_json);
  } catch (const json::exception& e) {
    throw ArtifactError(what + ": tensorstoreSpecJson is not JSON: " + e.what());
  }
  const json kv = spec.value("kvstore", json::object());
  if (spec.value("driver", "") != "zarr3" || !kv.is_object() || kv.value("driver", "") != "file" ||
      !kv.contains("path") || !kv["path"].is_string()) {
    throw ArtifactError(what + ": weights must be a zarr3 array in a local 'file' kvstore, got " +
                        spec.dump());
  }
  std::string rel = kv["path"].get<std::string>();
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  const std::string array_dir = ResolveInside(dir, rel, what);

  // zarr.json: the array's metadata (zarr v3 core spec).
  json meta;
  try {
    meta = json::parse(ReadFile(array_dir + "/zarr.json"));
  } catch (const json::exception& e) {
    throw ArtifactError(what + ": " + rel + "/zarr.json is not JSON: " + e.what());
  }
  const std::string meta_what = what + " (" + rel + "/zarr.json)";
  if (meta.value("zarr_format", 0) != 3 || meta.value("node_type", "") != "array") {
    throw ArtifactError(meta_what + ": not a zarr v3 array");
  }
  std::vector<int64_t> shape;
  for (const json& d : meta.value("shape", json::array())) shape.push_back(d.get<int64_t>());
  const std::string data_type = meta.value("data_type", "");
  if (shape != argument.shape || data_type != argument.dtype.numpy) {
    throw ArtifactError(what + " on disk is " + data_type + ShapeText(shape) + ", manifest says " +
                        argument.dtype.numpy + ShapeText(argument.shape));
  }
  const json grid = meta.value("chunk_grid", json::object());
  std::vector<int64_t> chunk;
  if (grid.value("name", "") == "regular") {
    for (const json& d : grid["configuration"].value("chunk_shape", json::array())) {
      chunk.push_back(d.get<int64_t>());
    }
  }
  if (chunk.size() != shape.size() ||
      std::any_of(chunk.begin(), chunk.end(), [](int64_t c) { return c < 1; })) {
    throw ArtifactError(meta_what + ": needs a regular chunk grid of rank " +
                        std::to_string(shape.size()) + ", got " + grid.dump());
  }
  const json keys = meta.value("chunk_key_encoding", json::object());
  const std::string separator =
      keys.contains("configuration") ? keys["configuration"].value("separator", "/") : "/";
  if (keys.value("name", "") != "default" || separator != "/") {
    throw ArtifactError(meta_what + ": chunk key encoding " + keys.dump() +
                        " (this reader reads the default encoding, c/<i>/<j>...)");
  }
  const json codecs = meta.value("codecs", json::array());
  const bool one_byte = argument.dtype.itemsize == 1;
  if (codecs.size() != 1 || codecs[0].value("name", "") != "bytes" ||
      (codecs[0].contains("configuration")
           ? codecs[0]["configuration"].value("endian", one_byte ? "little" : "") != "little"
           : !one_byte)) {
    throw ArtifactError(meta_what + ": codecs " + codecs.dump() + " (this reader reads exactly " +
                        "one 'bytes' codec, little-endian: what jaxport writes)");
  }

  // Assemble the chunks (each a full chunk_shape block, also at the edges) row-major.
  const size_t item = argument.dtype.itemsize;
  const size_t rank = shape.size();
  Array array{shape, argument.dtype, std::vector<char>(Elements(shape) * item)};
  std::vector<int64_t> grid_size(rank);
  for (size_t a = 0; a < rank; ++a) grid_size[a] = (shape[a] + chunk[a] - 1) / chunk[a];
  const uint64_t chunk_bytes = Elements(chunk) * item;
  std::vector<int64_t> at(rank, 0);  // chunk grid position
  const bool empty = Elements(shape) == 0;
  while (!empty) {
    std::string key = "c";
    for (int64_t i : at) key += "/" + std::to_string(i);
    const std::string path = ResolveInside(array_dir, key, what);
    std::string data;
    try {
      data = ReadFile(path);
    } catch (const ArtifactError&) {
      throw ArtifactError(what + ": chunk " + rel + "/" + key + " is missing");
    }
    if (data.size() != chunk_bytes) {
      throw ArtifactError(what + ": chunk " + rel + "/" + key + " has " +
                          std::to_string(data.size()) + " bytes, a " + ShapeText(chunk) + " " +
                          argument.dtype.numpy + " chunk has " + std::to_string(chunk_bytes));
    }
    // Copy the chunk's part inside the array, one run along the last axis at a time.
    std::vector<int64_t> extent(rank);
    for (size_t a = 0; a < rank; ++a) {
      extent[a] = std::min(chunk[a], shape[a] - at[a] * chunk[a]);
    }
    std::vector<int64_t> in(rank, 0);  // position inside the chunk (last axis stays 0)
    for (;;) {
      uint64_t src = 0, dst = 0;
      for (size_t a = 0; a < rank; ++a) {
        src = src * chunk[a] + in[a];
        dst = dst * shape[a] + at[a] * chunk[a] + in[a];
      }
      const size_t run = rank ? static_cast<size_t>(extent[rank - 1]) : 1;
      std::memcpy(array.bytes.data() + dst * item, data.data() + src * item, run * item);
      if (!Advance(in, extent, rank > 0 ? rank - 1 : 0)) break;
    }
    if (!Advance(at, grid_size, rank)) break;
  }

  const std::string actual = Sha256Hex(array.bytes.data(), array.bytes.size());
  if (actual != argument.sha256) {
    throw ArtifactError(what + " (" + rel + "/) sha256 mismatch: expected " + argument.sha256 +
                        ", actual " + actual);
  }
  return array;
}

Array ReadNpy(const std::string& path, const DType& dtype, const std::vector<int64_t>& shape,
              const std::string& what) {
  const std::string data = ReadFile(path);
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) {
    throw ArtifactError(what + ": " + path + " is not a .npy file");
  }
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) throw ArtifactError(what + ": " + path + " is truncated");
    for (int i = 3; i >= 0; --i) {
      header_len = (header_len << 8) | static_cast<unsigned char>(data[8 + i]);
    }
    header_start = 12;
  } else {
    throw ArtifactError(what + ": " + path + ": .npy version " + std::to_string(major));
  }
  if (header_start + header_len > data.size()) {
    throw ArtifactError(what + ": " + path + " is truncated");
  }
  const std::string header = data.substr(header_start, header_len);
  std::string descr = HeaderValue(header, "descr", what);
  descr = descr.size() >= 2 ? descr.substr(1, descr.size() - 2) : descr;  // strip quotes
  const std::vector<std::string> accepted = NpyDescrs(dtype);
  if (std::find(accepted.begin(), accepted.end(), descr) == accepted.end()) {
    throw ArtifactError(what + ": " + path + " holds '" + descr + "', the manifest says " +
                        dtype.numpy);
  }
  if (HeaderValue(header, "fortran_order", what) != "False") {
    throw ArtifactError(what + ": " + path + " is in Fortran order");
  }
  std::vector<int64_t> found;
  std::string dims = HeaderValue(header, "shape", what);
  std::stringstream numbers(dims.substr(1, dims.size() - 2));
  for (std::string n; std::getline(numbers, n, ',');) {
    if (n.find_first_not_of(' ') != std::string::npos) found.push_back(std::stoll(n));
  }
  if (found != shape) {
    throw ArtifactError(what + ": " + path + " has shape " + ShapeText(found) +
                        ", the manifest says " + ShapeText(shape));
  }
  const size_t body = header_start + header_len;
  const uint64_t bytes = Elements(shape) * dtype.itemsize;
  if (data.size() - body != bytes) {
    throw ArtifactError(what + ": " + path + " has " + std::to_string(data.size() - body) +
                        " data bytes, expected " + std::to_string(bytes));
  }
  return Array{shape, dtype, std::vector<char>(data.begin() + body, data.end())};
}

}  // namespace jaxport::artifact
