// manifest.json (docs/artifact-format.md, "Manifest fields"): the jaxport.v1.Manifest message
// as C++ structs, read with nlohmann/json. The reader accepts exactly what the schema allows
// (proto3 JSON names, lowerCamelCase or the proto's own names; 64-bit integers as strings or
// numbers; unknown fields refused, as jaxport's Python and Go readers refuse them) and checks
// the invariants a consumer relies on: schema version, argument and result positions, byte
// sizes, paths under the path rule, sha256 fields, dimensions, padding, batching.
#ifndef JAXPORT_MANIFEST_H_
#define JAXPORT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "jaxport/error.h"
#include "jaxport/tensor.h"

namespace jaxport {

// Manifest schema versions this reader accepts (jaxport's MIN..MAX).
constexpr uint32_t kMinSchemaVersion = 1;
constexpr uint32_t kMaxSchemaVersion = 2;

enum class ArgumentRole { kParameter, kInput, kPlatformIndex, kToken };
enum class ResultRole { kOutput, kCheck, kToken };

struct Argument {
  uint32_t index = 0;
  ArgumentRole role = ArgumentRole::kInput;
  std::string name;
  int32_t leaf_index = -1;
  std::vector<int64_t> shape;  // -1: a symbolic axis (polymorphic program only)
  DType dtype = DType::kFloat32;
  uint64_t byte_size = 0;
  std::string tensorstore_spec_json;  // parameters: the zarr3 array's TensorStore spec
  std::string sha256;                 // parameters: of the array's raw bytes
  std::vector<std::string> dim_names;
};

struct CheckLeaf {
  std::string part;  // "predicate", "code" or "payload"
  uint32_t effect = 0;
};

struct Result {
  uint32_t index = 0;
  ResultRole role = ResultRole::kOutput;
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  uint64_t byte_size = 0;
  CheckLeaf check;  // role kCheck
  std::vector<std::string> dim_names;
};

struct Program {
  std::string mlirbc_file;
  uint32_t batch_size = 0;
  bool polymorphic = false;
  std::map<std::string, int64_t> dims;  // a bucket program's sizes
  std::vector<Argument> arguments;      // @main order
  std::vector<Result> results;          // @main order
  std::vector<std::string> custom_call_targets;
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // -1: the batch axis of a batched model, or a symbolic axis
  DType dtype = DType::kFloat32;
  std::string labels_file;
  std::vector<std::string> dim_names;  // per axis: the symbolic dimension's name or ""
};

struct Dimension {
  std::string name;
  int64_t min = 0;
  int64_t max = 0;
  int64_t multiple_of = 1;
  std::string expression;
};

struct Padding {
  std::string dim;
  std::string mask_input;
};

struct Batching {
  std::vector<uint32_t> batch_sizes;  // ascending
  std::vector<std::string> batched_inputs;
  std::vector<std::string> batched_outputs;
};

struct ErrorCode {
  int32_t code = 0;
  std::string kind;  // "user", "index", "nan", "div"
  uint32_t effect = 0;
  std::string message_template;
  uint32_t payload_size = 0;
  std::string location;
};

struct Checks {
  std::vector<std::string> enabled;
  std::vector<ErrorCode> codes;
  std::vector<std::string> golden_kinds;
};

struct GoldenCase {
  std::string name;
  uint32_t batch_size = 0;
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> inputs;         // input name -> .npy path
  std::map<std::string, std::string> outputs;        // output name -> .npy path
  std::map<std::string, std::string> check_outputs;  // check result name -> .npy path
  std::string expected_error;
  std::string expected_check;
};

struct FileEntry {
  std::string path;
  uint64_t size_bytes = 0;
  std::string sha256;
};

struct Manifest {
  uint32_t schema_version = 0;
  std::string name;
  std::string stablehlo_target;  // versions.stablehloTarget, e.g. "1.18.0"
  std::vector<std::string> platforms;
  uint32_t nr_devices = 1;
  std::vector<Program> programs;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<FileEntry> files;
  std::vector<GoldenCase> goldens;
  bool has_checks = false;
  Checks checks;
  bool has_batching = false;
  Batching batching;
  uint32_t vjp_order = 0;
  std::vector<Dimension> dimensions;
  std::vector<Padding> padding;
  std::string mesh;  // "data=2,model=2" when sharded (nr_devices > 1), else empty
};

// Parses and validates manifest JSON text; `source` names it in errors. ArtifactError names
// the field.
Manifest ParseManifest(const std::string& json_text, const std::string& source = "manifest.json");

// Reads and validates <dir>/manifest.json.
Manifest LoadManifest(const std::string& dir);

}  // namespace jaxport

#endif  // JAXPORT_MANIFEST_H_
