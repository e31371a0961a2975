// Helpers shared by the C++ tests: temporary directories, files, hex, and the artifact
// format's tolerance rule (docs/artifact-format.md, Tolerances).
#ifndef JAXPORT_TESTS_CPP_TEST_UTIL_H_
#define JAXPORT_TESTS_CPP_TEST_UTIL_H_

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

}  // namespace jaxport::testing

#endif  // JAXPORT_TESTS_CPP_TEST_UTIL_H_
