// A C++ service's view of jaxport, built outside the jaxport tree against the installed
// package (or add_subdirectory / FetchContent): open the model once, score requests with
// score.h (the example of docs/cpp.md), here three rows of its own, written as .npy for
// tests/cpp/test_cmake_package.py to compare with JAX.
//
//   score PLUGIN ARTIFACT_DIR OUT_DIR
#include <cmath>
#include <cstdio>

#include "score.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: score PLUGIN ARTIFACT_DIR OUT_DIR\n");
    return 2;
  }
  try {
    const jaxport::Runtime runtime = jaxport::Runtime::Load(argv[1]);
    const jaxport::Model model = jaxport::Model::Open(runtime, argv[2]);
    std::vector<float> features(3 * 16);
    for (size_t i = 0; i < features.size(); ++i) features[i] = std::sin(0.37f * static_cast<float>(i));
    const std::vector<float> probs = Score(model, features);
    const std::string out = argv[3];
    jaxport::WriteNpy(out + "/x.npy", jaxport::TensorView(features.data(), {3, 16}));
    jaxport::WriteNpy(out + "/probs.npy", jaxport::TensorView(probs.data(), {3, static_cast<int64_t>(probs.size() / 3)}));
    std::printf("scored 3 rows with %s (batch sizes %zu..%zu)\n", model.name().c_str(),
                static_cast<size_t>(model.batch_sizes().front()), static_cast<size_t>(model.batch_sizes().back()));
    return 0;
  } catch (const jaxport::Error& e) {
    std::fprintf(stderr, "score: %s (%s)\n", e.what(), jaxport::StatusCodeName(e.code()));
    return 1;
  }
}
