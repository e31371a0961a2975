// What the golden and concurrency tests run on: the PJRT plugin JAXPORT_TEST_PLUGIN and the
// artifacts under JAXPORT_TEST_ARTIFACTS (demo, batched, special, bucketed, checked,
// checked_batched; exported once per run by tests/cpp/conftest.py). Unset: the test fails
// saying how to run it (`pytest tests/cpp`), it is never skipped.
#ifndef JAXPORT_TESTS_CPP_GOLDEN_ENV_H_
#define JAXPORT_TESTS_CPP_GOLDEN_ENV_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "jaxport/jaxport.h"
#include "test_util.h"

namespace jaxport::testing {

inline std::string ArtifactDir(const std::string& which) {
  const std::string root = Env("JAXPORT_TEST_ARTIFACTS");
  if (root.empty()) {
    ADD_FAILURE() << "JAXPORT_TEST_ARTIFACTS is not set: run the golden tests through `pytest tests/cpp` "
                     "(it exports the artifacts and sets it with JAXPORT_TEST_PLUGIN)";
    return "/nonexistent";
  }
  return root + "/" + which;
}

inline const Runtime& TestRuntime() {
  static const Runtime* runtime = [] {
    const std::string plugin = Env("JAXPORT_TEST_PLUGIN");
    if (plugin.empty()) {
      std::fprintf(stderr, "JAXPORT_TEST_PLUGIN is not set: run the golden tests through `pytest tests/cpp`\n");
      std::abort();
    }
    return new Runtime(Runtime::Load(plugin));
  }();
  return *runtime;
}

// The artifact `which` opened once per process on TestRuntime() (every program compiled once;
// a Model is safe to share between tests and threads).
inline const Model& Opened(const std::string& which) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Model>>* models = new std::map<std::string, std::unique_ptr<Model>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*models)[which];
  if (!slot) {
    OpenOptions options;
    options.verify_all_files = true;
    slot = std::make_unique<Model>(Model::Open(TestRuntime(), ArtifactDir(which), options));
  }
  return *slot;
}

// The case's inputs read from its .npy files, typed by the manifest's inputs.
inline std::map<std::string, Tensor> CaseInputs(const std::string& dir, const Manifest& m, const GoldenCase& c) {
  std::map<std::string, Tensor> out;
  for (const TensorSpec& spec : m.inputs) {
    auto path = c.inputs.find(spec.name);
    if (path == c.inputs.end()) continue;
    Tensor t = ReadNpy(ResolveInside(dir, path->second, "golden input"));
    EXPECT_EQ(t.dtype(), spec.dtype) << c.name << " " << spec.name;
    out.emplace(spec.name, std::move(t));
  }
  return out;
}

inline Inputs Views(const std::map<std::string, Tensor>& tensors) {
  Inputs out;
  for (const auto& [name, t] : tensors) out.emplace(name, t.view());
  return out;
}

}  // namespace jaxport::testing

#endif  // JAXPORT_TESTS_CPP_GOLDEN_ENV_H_
