// Model::Run from several threads at once on one Model gives what a sequential run gives:
// the same outputs (compared under the format's tolerances, never to the bit) and the same
// check failures, with batched requests of every size padded concurrently.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "golden_env.h"

namespace jaxport {
namespace {

using testing::ArtifactDir;
using testing::Mismatch;
using testing::TestRuntime;

constexpr int kThreads = 4;
constexpr int kIterations = 25;

// Deterministic inputs of 1..4 rows (an LCG over [-2, 2)).
std::vector<Tensor> BatchedInputs(int count) {
  std::vector<Tensor> out;
  uint32_t state = 12345;
  for (int i = 0; i < count; ++i) {
    Tensor x(DType::kFloat32, {1 + i % 4, 16});
    float* v = x.mutable_values<float>();
    for (int64_t k = 0; k < x.num_elements(); ++k) {
      state = state * 1664525u + 1013904223u;
      v[k] = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 4.0f - 2.0f;
    }
    out.push_back(std::move(x));
  }
  return out;
}

TEST(Concurrency, RunFromSeveralThreadsMatchesASequentialRun) {
  const Model& model = testing::Opened("batched");
  const std::vector<Tensor> inputs = BatchedInputs(8);
  std::vector<Outputs> sequential;
  for (const Tensor& x : inputs) sequential.push_back(model.Run({{"x", x.view()}}));

  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<int> runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const size_t k = static_cast<size_t>(t * 7 + i) % inputs.size();
        try {
          std::string why;
          if (i % 2 == 0) {
            const Outputs got = model.Run({{"x", inputs[k].view()}});
            for (const auto& [name, want] : sequential[k]) {
              if (std::string m = Mismatch(got.at(name), want); !m.empty()) why += name + ": " + m;
            }
          } else {  // RunInto the caller's buffers
            Tensor probs(DType::kFloat32, sequential[k].at("probs").shape());
            Tensor logits(DType::kFloat32, sequential[k].at("logits").shape());
            model.RunInto({{"x", inputs[k].view()}}, {{"probs", probs.mutable_view()}, {"logits", logits.mutable_view()}});
            why += Mismatch(probs, sequential[k].at("probs")) + Mismatch(logits, sequential[k].at("logits"));
          }
          if (!why.empty()) {
            std::lock_guard<std::mutex> lock(mu);
            failures.push_back("thread " + std::to_string(t) + " input " + std::to_string(k) + ": " + why);
          }
          ++runs;
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("thread " + std::to_string(t) + ": " + e.what());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(runs.load(), kThreads * kIterations);
}

TEST(Concurrency, CheckFailuresFromSeveralThreadsAreTheSequentialOnes) {
  const std::string dir = ArtifactDir("checked");
  const Model& model = testing::Opened("checked");
  std::vector<std::map<std::string, Tensor>> cases;
  std::vector<std::string> sequential;  // "" passed, else kind: message
  for (const GoldenCase& c : model.manifest().goldens) {
    cases.push_back(testing::CaseInputs(dir, model.manifest(), c));
    try {
      model.Run(testing::Views(cases.back()));
      sequential.push_back("");
    } catch (const CheckFailedError& e) {
      sequential.push_back(e.kind() + ": " + e.what());
    }
  }
  ASSERT_GE(cases.size(), 5u);
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const size_t k = static_cast<size_t>(t * 3 + i) % cases.size();
        std::string got;
        try {
          model.Run(testing::Views(cases[k]));
        } catch (const CheckFailedError& e) {
          got = e.kind() + ": " + e.what();
        } catch (const std::exception& e) {
          got = std::string("unexpected: ") + e.what();
        }
        if (got != sequential[k]) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("case " + std::to_string(k) + ": got '" + got + "', sequentially '" + sequential[k] + "'");
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

}  // namespace
}  // namespace jaxport
