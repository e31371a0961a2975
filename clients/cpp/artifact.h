// A jaxport artifact directory read without Python (docs/artifact-format.md, docs/cpp.md):
// manifest.json (nlohmann/json), the path rule, sha256 of files and parameters (OpenSSL
// libcrypto), parameters as zarr v3 arrays (regular chunk grid, `bytes` codec, little-endian;
// chunk files assembled into one dense row-major array) and golden `.npy` files.
//
// The rules follow the Python consumer (clients/python/artifact: manifest.py, weights.py,
// goldens.py, paths.py): paths relative and inside the artifact, every listed file and every
// parameter checked against its sha256 before anything runs.
#ifndef JAXPORT_CPP_ARTIFACT_H_
#define JAXPORT_CPP_ARTIFACT_H_

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace jaxport::artifact {

// Anything wrong with the artifact; the message names the file, field or parameter.
class ArtifactError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Manifest schema versions this reader accepts (jaxport's MIN..MAX).
constexpr uint32_t kMinSchemaVersion = 1;
constexpr uint32_t kMaxSchemaVersion = 2;

struct DType {
  std::string numpy;  // "float32", "bfloat16", "bool", ...
  std::string mlir;   // "f32", "bf16", "i1", ...
  uint32_t itemsize = 0;
};

// A host array: dense, row-major (C order), little-endian.
struct Array {
  std::vector<int64_t> shape;
  DType dtype;
  std::vector<char> bytes;
};

struct Argument {
  uint32_t index = 0;
  std::string role;  // ARGUMENT_ROLE_PARAMETER, _INPUT, _PLATFORM_INDEX, _TOKEN
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  std::string tensorstore_spec_json;  // parameters: the zarr3 array's spec
  std::string sha256;                 // parameters: of the array's raw bytes
};

struct Result {
  std::string role;  // RESULT_ROLE_OUTPUT, _CHECK, _TOKEN
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
};

struct Program {
  std::string mlirbc_file;
  uint32_t batch_size = 0;
  bool polymorphic = false;
  std::map<std::string, int64_t> dims;  // a bucket program's sizes
  std::vector<Argument> arguments;      // @main order
  std::vector<Result> results;          // @main order
};

struct GoldenCase {
  std::string name;
  uint32_t batch_size = 0;
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> inputs;         // input name -> .npy path
  std::map<std::string, std::string> outputs;        // output name -> .npy path
  std::map<std::string, std::string> check_outputs;  // check result name -> .npy path
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
  std::vector<GoldenCase> goldens;
  std::vector<FileEntry> files;
};

// Reads and validates <dir>/manifest.json (schema version, argument/result positions, paths
// relative and without "..").
Manifest LoadManifest(const std::string& dir);

// <dir>/<rel> after the path rule: `rel` relative, no "..", no backslash, and the resolved
// path (symlinks followed) inside `dir`. `what` names the field for the error.
std::string ResolveInside(const std::string& dir, const std::string& rel, const std::string& what);

std::string ReadFile(const std::string& path);

std::string Sha256Hex(const void* data, size_t size);

// Checks every listed file's size and sha256, and that every file a program or golden case
// uses is listed. Throws ArtifactError naming the file.
void VerifyFiles(const std::string& dir, const Manifest& manifest);

// One parameter read from its zarr3 array (shape and dtype checked against the manifest) and
// checked against the argument's sha256. Throws ArtifactError naming the parameter.
Array ReadParameter(const std::string& dir, const Argument& argument);

// A golden `.npy` (C order; bfloat16 stored as raw 2-byte `V2` values) checked to hold
// `dtype` and `shape`. `what` names the case and tensor for the error.
Array ReadNpy(const std::string& path, const DType& dtype, const std::vector<int64_t>& shape,
              const std::string& what);

std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace jaxport::artifact

#endif  // JAXPORT_CPP_ARTIFACT_H_
