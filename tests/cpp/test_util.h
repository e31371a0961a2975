// Helpers shared by the C++ tests: temporary directories, files, hex, and the artifact
// format's tolerance rule (docs/artifact-format.md, Tolerances).
#ifndef JAXPORT_TESTS_CPP_TEST_UTIL_H_
#define JAXPORT_TESTS_CPP_TEST_UTIL_H_

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jaxport/tensor.h"

namespace jaxport::testing {

// A fresh directory under $TMPDIR, removed with everything in it when destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Writes `data` to `path`, creating its parent directories.
void WriteFile(const std::string& path, const std::string& data);

std::string Unhex(const std::string& hex);

// The environment variable `name`; an empty string when unset.
std::string Env(const char* name);

// Element i of a tensor as a double (every dtype of the table).
double ValueAt(const Tensor& t, size_t i);

// "" when `actual` matches `expected` under the dtype's tolerance
// (|a - e| <= atol + rtol*|e|; NaN matches NaN, an infinity only itself; integers and bool
// exact), else a line naming the first element that does not, with both values.
std::string Mismatch(const Tensor& actual, const Tensor& expected);

// Manifests as the exporter writes them (proto3 JSON), for the parser and binder tests:
// "mlp" with x: float32[B, 16] -> probs: float32[B, 3] at batch sizes 1 and 4, one parameter;
// "seq" with tokens: int32[B, T], mask: bool[B, T] -> pooled: float32[B, 8],
// per_token: float32[B, T, 8], dimensions B=1..4, T=8..64:8, buckets B in {1, 2}, T in {16, 64},
// padding T=mask, a polymorphic program first.
nlohmann::json BatchedManifest();
nlohmann::json BucketManifest();

}  // namespace jaxport::testing

#endif  // JAXPORT_TESTS_CPP_TEST_UTIL_H_
