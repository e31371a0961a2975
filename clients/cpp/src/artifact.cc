// The files of an artifact: see jaxport/artifact.h. The zarr v3 reader assembles a parameter
// from its chunk files (docs/cpp.md, "zarr3 chunk layout").
#include "jaxport/artifact.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace jaxport {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Steps the odometer `at` over axes [0, axes) within `limits` (last axis fastest); false once
// every position was visited.
bool Advance(std::vector<int64_t>& at, const std::vector<int64_t>& limits, size_t axes) {
  for (size_t a = axes; a > 0; --a) {
    if (++at[a - 1] < limits[a - 1]) return true;
    at[a - 1] = 0;
  }
  return false;
}

// A path as messages show it: control characters (a NUL) as \xNN.
std::string Shown(const std::string& rel) {
  std::string out;
  for (char c : rel) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void CheckRelative(const std::string& rel, const std::string& what) {
  if (rel.empty() || rel.front() == '/' || rel.find('\\') != std::string::npos ||
      rel.find('\0') != std::string::npos) {
    throw ArtifactError(what + ": path '" + Shown(rel) + "' is not a relative path inside the artifact");
  }
  std::stringstream parts(rel);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part == "..") throw ArtifactError(what + ": path '" + rel + "' contains '..'; refused");
  }
}

std::string ResolveInside(const std::string& dir, const std::string& rel, const std::string& what) {
  CheckRelative(rel, what);
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::path(dir), ec);
  if (ec) throw ArtifactError(what + ": cannot resolve " + dir + ": " + ec.message());
  const fs::path target = fs::weakly_canonical(fs::path(dir) / rel, ec);
  if (ec) throw ArtifactError(what + ": cannot resolve '" + rel + "': " + ec.message());
  auto mismatch = std::mismatch(root.begin(), root.end(), target.begin(), target.end());
  if (mismatch.first != root.end()) {
    throw ArtifactError(what + ": path '" + rel + "' resolves outside " + fs::path(dir).filename().string() +
                        "/; refused");
  }
  return target.string();
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

namespace {

// The file's bytes after its size and sha256 were checked against `entry`.
std::string ReadChecked(const std::string& dir, const FileEntry& entry) {
  const std::string path = ResolveInside(dir, entry.path, "files['" + entry.path + "']");
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw ArtifactError(dir + "/" + entry.path + ": file listed in the manifest is missing");
  }
  std::string data = ReadFile(path);
  if (data.size() != entry.size_bytes) {
    throw ArtifactError(dir + "/" + entry.path + ": size " + std::to_string(data.size()) + " bytes, manifest says " +
                        std::to_string(entry.size_bytes) + " (truncated or replaced?)");
  }
  const std::string actual = Sha256Hex(data.data(), data.size());
  if (actual != entry.sha256) {
    throw ArtifactError(dir + "/" + entry.path + ": sha256 mismatch: expected " + entry.sha256 + ", actual " + actual);
  }
  return data;
}

}  // namespace

std::string ReadListedFile(const std::string& dir, const Manifest& manifest, const std::string& rel) {
  for (const FileEntry& f : manifest.files) {
    if (f.path == rel) return ReadChecked(dir, f);
  }
  throw ArtifactError(dir + ": " + rel + " is not in the manifest's files list; refused");
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
  for (const TensorSpec& t : manifest.outputs) {
    if (!t.labels_file.empty()) needed.insert(t.labels_file);
  }
  for (const std::string& rel : needed) {
    if (!listed.count(rel)) throw ArtifactError(dir + ": " + rel + " is used by the manifest but not in its file list");
  }
  for (const FileEntry& f : manifest.files) ReadChecked(dir, f);
}

Tensor ReadParameter(const std::string& dir, const Argument& argument) {
  const std::string what = "parameter '" + argument.name + "'";
  json spec;
  try {
    spec = json::parse(argument.tensorstore_spec_json);
  } catch (const json::exception& e) {
    throw ArtifactError(what + ": tensorstoreSpecJson is not JSON: " + e.what());
  }
  const json kv = spec.is_object() ? spec.value("kvstore", json::object()) : json();
  if (!spec.is_object() || spec.value("driver", "") != "zarr3" || !kv.is_object() ||
      kv.value("driver", "") != "file" || !kv.contains("path") || !kv["path"].is_string()) {
    throw ArtifactError(what + ": weights must be a zarr3 array in a local 'file' kvstore, got " + spec.dump());
  }
  std::string rel = kv["path"].get<std::string>();
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  const std::string array_dir = ResolveInside(dir, rel, what);

  // zarr.json: the array's metadata (zarr v3 core spec).
  const std::string meta_what = what + " (" + rel + "/zarr.json)";
  json meta;
  try {
    meta = json::parse(ReadFile(array_dir + "/zarr.json"));
  } catch (const json::exception& e) {
    throw ArtifactError(meta_what + ": not JSON: " + e.what());
  }
  try {
    if (!meta.is_object() || meta.value("zarr_format", 0) != 3 || meta.value("node_type", "") != "array") {
      throw ArtifactError(meta_what + ": not a zarr v3 array");
    }
    std::vector<int64_t> shape;
    for (const json& d : meta.value("shape", json::array())) shape.push_back(d.get<int64_t>());
    const std::string data_type = meta.value("data_type", "");
    if (shape != argument.shape || data_type != Name(argument.dtype)) {
      throw ArtifactError(what + " on disk is " + data_type + ShapeText(shape) + ", manifest says " +
                          Name(argument.dtype) + ShapeText(argument.shape));
    }
    const json grid = meta.value("chunk_grid", json::object());
    std::vector<int64_t> chunk;
    if (grid.value("name", "") == "regular" && grid.contains("configuration")) {
      for (const json& d : grid["configuration"].value("chunk_shape", json::array())) chunk.push_back(d.get<int64_t>());
    }
    if (chunk.size() != shape.size() || std::any_of(chunk.begin(), chunk.end(), [](int64_t c) { return c < 1; })) {
      throw ArtifactError(meta_what + ": needs a regular chunk grid of rank " + std::to_string(shape.size()) +
                          ", got " + grid.dump());
    }
    const json keys = meta.value("chunk_key_encoding", json::object());
    const std::string separator =
        keys.contains("configuration") ? keys["configuration"].value("separator", "/") : "/";
    if (keys.value("name", "") != "default" || separator != "/") {
      throw ArtifactError(meta_what + ": chunk key encoding " + keys.dump() +
                          " (this reader reads the default encoding, c/<i>/<j>...)");
    }
    const json codecs = meta.value("codecs", json::array());
    const size_t item = ItemSize(argument.dtype);
    const bool one_byte = item == 1;
    if (codecs.size() != 1 || codecs[0].value("name", "") != "bytes" ||
        (codecs[0].contains("configuration") ? codecs[0]["configuration"].value("endian", one_byte ? "little" : "") != "little"
                                             : !one_byte)) {
      throw ArtifactError(meta_what + ": codecs " + codecs.dump() +
                          " (this reader reads exactly one 'bytes' codec, little-endian: what jaxport writes)");
    }

    // Assemble the chunks (each a full chunk_shape block, also at the edges) row-major.
    const size_t rank = shape.size();
    Tensor array(argument.dtype, shape);
    char* out = static_cast<char*>(array.mutable_data());
    std::vector<int64_t> grid_size(rank);
    for (size_t a = 0; a < rank; ++a) grid_size[a] = (shape[a] + chunk[a] - 1) / chunk[a];
    const uint64_t chunk_bytes = static_cast<uint64_t>(NumElements(chunk)) * item;
    std::vector<int64_t> at(rank, 0);      // chunk grid position
    std::vector<int64_t> extent(rank, 0);  // the chunk's part inside the array
    std::vector<int64_t> in(rank, 0);      // position inside the chunk (last axis stays 0)
    const bool empty = array.num_elements() == 0;
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
        throw ArtifactError(what + ": chunk " + rel + "/" + key + " has " + std::to_string(data.size()) +
                            " bytes, a " + ShapeText(chunk) + " " + Name(argument.dtype) + " chunk has " +
                            std::to_string(chunk_bytes));
      }
      // Copy the chunk's part inside the array, one run along the last axis at a time.
      for (size_t a = 0; a < rank; ++a) extent[a] = std::min(chunk[a], shape[a] - at[a] * chunk[a]);
      std::fill(in.begin(), in.end(), 0);
      for (;;) {
        uint64_t src = 0, dst = 0;
        for (size_t a = 0; a < rank; ++a) {
          src = src * chunk[a] + in[a];
          dst = dst * shape[a] + at[a] * chunk[a] + in[a];
        }
        const size_t run = rank ? static_cast<size_t>(extent[rank - 1]) : 1;
        std::memcpy(out + dst * item, data.data() + src * item, run * item);
        if (!Advance(in, extent, rank > 0 ? rank - 1 : 0)) break;
      }
      if (!Advance(at, grid_size, rank)) break;
    }
    const std::string actual = Sha256Hex(array.data(), array.size_bytes());
    if (actual != argument.sha256) {
      throw ArtifactError(what + " (" + rel + "/) sha256 mismatch: expected " + argument.sha256 + ", actual " + actual);
    }
    return array;
  } catch (const json::exception& e) {
    throw ArtifactError(meta_what + ": unexpected field type: " + e.what());
  }
}

}  // namespace jaxport
