// The library on real artifacts through the PJRT CPU plugin (golden_env.h): every golden case
// through Model::Run against what JAX computed (the format's tolerances; NaN and infinities
// included), check outputs bit for bit and tripped checks as JAX's messages with the server's
// status, batched and bucket requests padded and cut back, and the refusals of Open.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "golden_env.h"

namespace jaxport {
namespace {

namespace fs = std::filesystem;
using testing::ArtifactDir;
using testing::CaseInputs;
using testing::Mismatch;
using testing::TestRuntime;
using testing::Views;

const char* const kArtifacts[] = {"demo", "batched", "special", "bucketed", "checked", "checked_batched"};

// The fixed-shape program a case belongs to exactly (its batch size, or its bucket's sizes);
// -1 when none (a polymorphic case at sizes no bucket has: Run pads it).
int ExactProgram(const Manifest& m, const GoldenCase& c) {
  for (size_t i = 0; i < m.programs.size(); ++i) {
    const Program& p = m.programs[i];
    if (!p.polymorphic && p.batch_size == c.batch_size && p.dims == c.dims) return static_cast<int>(i);
  }
  return -1;
}

TEST(Goldens, EveryCaseOfEveryArtifactMatchesJax) {
  for (const char* which : kArtifacts) {
    SCOPED_TRACE(which);
    const std::string dir = ArtifactDir(which);
    const Model& model = testing::Opened(which);
    const Manifest& m = model.manifest();
    int outputs = 0, checks = 0, failures = 0, padded = 0;
    for (const GoldenCase& c : m.goldens) {
      SCOPED_TRACE(c.name);
      const auto host = CaseInputs(dir, m, c);
      const Inputs inputs = Views(host);
      const int exact = ExactProgram(m, c);
      padded += exact < 0;
      if (!c.expected_check.empty()) {
        try {
          model.Run(inputs);
          ADD_FAILURE() << "no check fired; JAX's: " << c.expected_error;
        } catch (const CheckFailedError& e) {
          EXPECT_EQ(e.kind(), c.expected_check);
          EXPECT_EQ(std::string(e.what()), c.expected_error);
          EXPECT_EQ(e.code(), *CheckStatus(c.expected_check));
          ++failures;
        }
      } else {
        const Outputs got = model.Run(inputs);
        EXPECT_EQ(got.size(), m.outputs.size());
        for (const auto& [name, rel] : c.outputs) {
          const Tensor want = ReadNpy(ResolveInside(dir, rel, "golden output"));
          ASSERT_TRUE(got.count(name)) << name;
          EXPECT_EQ(Mismatch(got.at(name), want), "") << name;
          ++outputs;
        }
      }
      if (exact >= 0 && !c.check_outputs.empty()) {  // the raw check results, bit for bit
        const std::vector<Tensor> raw = model.RunProgram(static_cast<size_t>(exact), inputs);
        const Program& p = m.programs[exact];
        for (size_t i = 0; i < p.results.size(); ++i) {
          auto rel = c.check_outputs.find(p.results[i].name);
          if (rel == c.check_outputs.end()) continue;
          const Tensor want = ReadNpy(ResolveInside(dir, rel->second, "golden check output"));
          ASSERT_EQ(raw[i].size_bytes(), want.size_bytes());
          EXPECT_EQ(std::memcmp(raw[i].data(), want.data(), want.size_bytes()), 0) << p.results[i].name;
          ++checks;
        }
      }
    }
    EXPECT_GT(outputs + failures, 0) << "no golden compared";
    std::printf("%s: %zu case(s), %d output(s) within tolerance, %d check output(s) bit-exact, "
                "%d check failure(s) as JAX words them, %d case(s) run padded\n",
                which, m.goldens.size(), outputs, checks, failures, padded);
    if (std::string(which) == "bucketed") {
      EXPECT_GT(padded, 0) << "no case ran padded to a bucket";
    }
    if (std::string(which).rfind("checked", 0) == 0) {
      EXPECT_GE(failures, 4) << "every check kind trips";
    }
  }
}

TEST(Goldens, SpecialValuesKeepJaxsNaN) {
  const std::string dir = ArtifactDir("special");
  const Model& model = testing::Opened("special");
  const GoldenCase& c = *std::find_if(model.manifest().goldens.begin(), model.manifest().goldens.end(),
                                      [](const GoldenCase& g) { return g.name == "special"; });
  const Outputs got = model.Run(Views(CaseInputs(dir, model.manifest(), c)));
  const float* lo = got.at("lo").values<float>();
  const float* hi = got.at("hi").values<float>();
  EXPECT_TRUE(std::isnan(lo[0]) && std::isnan(hi[0]));  // a NaN in the row propagates
  EXPECT_EQ(lo[1], -INFINITY);
  EXPECT_EQ(hi[1], INFINITY);
  EXPECT_TRUE(std::isnan(lo[2]));
  // With the plugin's default (fast min/max) the NaN rows come out different: what the
  // compile options' override prevents.
  RuntimeOptions fast;
  fast.fast_min_max = true;
  const Model fast_model = Model::Open(Runtime::Load(TestRuntime().plugin_path(), fast), dir);
  const Outputs dropped = fast_model.Run(Views(CaseInputs(dir, model.manifest(), c)));
  EXPECT_FALSE(std::isnan(dropped.at("lo").values<float>()[0]) && std::isnan(dropped.at("hi").values<float>()[0]));
}

// Rows [0, rows) of a golden case's tensor.
Tensor Prefix(const Tensor& t, int64_t rows) {
  std::vector<int64_t> shape = t.shape();
  const size_t row = t.size_bytes() / static_cast<size_t>(shape[0]);
  shape[0] = rows;
  Tensor out(t.dtype(), shape);
  std::memcpy(out.mutable_data(), t.data(), row * static_cast<size_t>(rows));
  return out;
}

const GoldenCase& Case(const Model& model, const std::string& name) {
  const auto& g = model.manifest().goldens;
  auto it = std::find_if(g.begin(), g.end(), [&](const GoldenCase& c) { return c.name == name; });
  if (it == g.end()) throw std::runtime_error("no golden case " + name);
  return *it;
}

TEST(Batched, AnyRowsUpToTheLargestBatchSizePaddedAndCutBack) {
  const std::string dir = ArtifactDir("batched");
  const Model& model = testing::Opened("batched");
  EXPECT_EQ(model.batch_sizes(), (std::vector<int64_t>{1, 4}));
  ASSERT_EQ(model.inputs().size(), 1u);
  EXPECT_TRUE(model.inputs()[0].batched);
  EXPECT_EQ(model.inputs()[0].shape, (std::vector<int64_t>{-1, 16}));
  const GoldenCase& c = Case(model, "b4_case0");
  const auto host = CaseInputs(dir, model.manifest(), c);
  for (int64_t rows : {1, 2, 3, 4}) {
    SCOPED_TRACE(rows);
    const Tensor x = Prefix(host.at("x"), rows);
    const Outputs got = model.Run({{"x", x.view()}});
    EXPECT_EQ(model.OutputShapes({{"x", x.view()}}).at("probs"), (std::vector<int64_t>{rows, 3}));
    for (const auto& [name, rel] : c.outputs) {
      // Rows are independent in this model: JAX's rows of the batch-4 golden are the answer.
      EXPECT_EQ(Mismatch(got.at(name), Prefix(ReadNpy(ResolveInside(dir, rel, "golden")), rows)), "") << name;
    }
    // The caller's own output buffers: the same values, written in place.
    std::vector<float> probs(static_cast<size_t>(rows) * 3, -1.0f);
    model.RunInto({{"x", x.view()}}, {{"probs", MutableTensorView(probs.data(), {rows, 3})}});
    EXPECT_EQ(std::memcmp(probs.data(), got.at("probs").data(), probs.size() * 4), 0);
  }
  std::vector<float> five(5 * 16, 0.5f);
  try {
    model.Run({{"x", TensorView(five.data(), {5, 16})}});
    FAIL();
  } catch (const InvalidInputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "batch size 5 exceeds max_batch_size 4 of model 'example' (exported batch sizes [1, 4]); split the request");
  }
  std::vector<float> probs(6);
  try {
    model.RunInto({{"x", TensorView(five.data(), {3, 16})}}, {{"probs", MutableTensorView(probs.data(), {2, 3})}});
    FAIL();
  } catch (const InvalidInputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "output 'probs': the caller's buffer is FP32 [2, 3] of 24 bytes; this call gives FP32 [3, 3]");
  }
}

TEST(Batched, ChecksOfAPaddedBatchFailAsTheRowAlone) {
  const std::string dir = ArtifactDir("checked_batched");
  const Model& model = testing::Opened("checked_batched");
  const auto pass = CaseInputs(dir, model.manifest(), Case(model, "b1_check_pass"));
  const GoldenCase& index = Case(model, "b1_check_index");
  const auto bad = CaseInputs(dir, model.manifest(), index);
  // Two rows (padded to the batch-4 program with copies of the last row): a passing row and
  // one whose index is out of bounds. The request fails with the row's own JAX message.
  std::map<std::string, Tensor> two;
  for (const auto& [name, t] : pass) {
    std::vector<int64_t> shape = t.shape();
    shape[0] = 2;
    Tensor both(t.dtype(), shape);
    std::memcpy(both.mutable_data(), t.data(), t.size_bytes());
    std::memcpy(static_cast<char*>(both.mutable_data()) + t.size_bytes(), bad.at(name).data(), t.size_bytes());
    two.emplace(name, std::move(both));
  }
  try {
    model.Run(Views(two));
    FAIL() << "no check fired";
  } catch (const CheckFailedError& e) {
    EXPECT_EQ(e.kind(), "index");
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), index.expected_error);
  }
  // Three passing rows: each row is the passing golden's.
  std::map<std::string, Tensor> three;
  for (const auto& [name, t] : pass) {
    std::vector<int64_t> shape = t.shape();
    shape[0] = 3;
    Tensor rows(t.dtype(), shape);
    for (int r = 0; r < 3; ++r) std::memcpy(static_cast<char*>(rows.mutable_data()) + r * t.size_bytes(), t.data(), t.size_bytes());
    three.emplace(name, std::move(rows));
  }
  const Outputs got = model.Run(Views(three));
  for (const auto& [name, rel] : Case(model, "b1_check_pass").outputs) {
    const Tensor want = ReadNpy(ResolveInside(dir, rel, "golden"));
    for (int r = 0; r < 3; ++r) {
      Tensor row(want.dtype(), want.shape());
      std::memcpy(row.mutable_data(), static_cast<const char*>(got.at(name).data()) + r * want.size_bytes(), want.size_bytes());
      EXPECT_EQ(Mismatch(row, want), "") << name << " row " << r;
    }
  }
}

TEST(Bucketed, MetadataAndSizesNoBucketHolds) {
  const Model& model = testing::Opened("bucketed");
  EXPECT_EQ(model.buckets().size(), 6u);
  EXPECT_EQ(model.padding(), (std::map<std::string, std::string>{{"T", "mask"}}));
  ASSERT_EQ(model.dimensions().size(), 2u);
  EXPECT_EQ(model.dimensions()[1].multiple_of, 8);
  std::vector<int32_t> tokens(3 * 8, 1);
  std::vector<uint8_t> mask(3 * 8, 1);
  const Inputs three = {{"tokens", TensorView(tokens.data(), {3, 8})},
                        {"mask", TensorView(DType::kBool, {3, 8}, mask.data(), mask.size())}};
  try {
    model.Run(three);
    FAIL();
  } catch (const InvalidInputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("sizes B=3, T=8 have no bucket program: model 'bucketed' runs its bucket sizes only (B=1, T=16; ", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(model.OutputShapes({{"tokens", TensorView(tokens.data(), {2, 8})},
                                {"mask", TensorView(DType::kBool, {2, 8}, mask.data(), 16)}}).at("per_token"),
            (std::vector<int64_t>{2, 8, 8}));
}

// A copy of an artifact to damage.
std::string Copy(const testing::TempDir& tmp, const std::string& which) {
  const std::string dest = tmp / which;
  fs::copy(ArtifactDir(which), dest, fs::copy_options::recursive);
  return dest;
}

void EditManifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json doc = nlohmann::json::parse(ReadFile(dir + "/manifest.json"));
  edit(doc);
  testing::WriteFile(dir + "/manifest.json", doc.dump());
}

template <typename E>
std::string OpenError(const std::string& dir) {
  try {
    Model::Open(TestRuntime(), dir);
  } catch (const E& e) {
    return e.what();
  }
  return "(opened)";
}

TEST(Open, RefusesWhatItCannotRunNamingWhy) {
  testing::TempDir tmp;
  const std::string window = Copy(tmp, "demo");
  EditManifest(window, [](nlohmann::json& d) { d["versions"]["stablehloTarget"] = "1.21.0"; });
  EXPECT_EQ(OpenError<ArtifactError>(window),
            "artifact StableHLO target 1.21.0 is outside the plugin's window 0.9.0..1.20.0 (" +
                TestRuntime().plugin_path() + "); re-export for this plugin or use a plugin whose window contains it");

  testing::TempDir tmp2;
  const std::string platform = Copy(tmp2, "demo");
  EditManifest(platform, [](nlohmann::json& d) { d["platforms"] = {"cuda"}; });
  EXPECT_EQ(OpenError<ArtifactError>(platform), "model 'example': lowered for [cuda], the PJRT plugin runs cpu");

  testing::TempDir tmp3;
  const std::string weight = Copy(tmp3, "demo");
  const std::string chunk = weight + "/weights/params.hidden.w/c/0/0";
  std::string data = ReadFile(chunk);
  data[100] ^= 0x40;
  testing::WriteFile(chunk, data);
  const std::string why = OpenError<ArtifactError>(weight);
  EXPECT_NE(why.find("parameter 'params.hidden.w' (weights/params.hidden.w/) sha256 mismatch: expected "), std::string::npos) << why;

  testing::TempDir tmp4;
  const std::string program = Copy(tmp4, "demo");
  testing::WriteFile(program + "/model.mlirbc", "not bytecode");
  const std::string digest = Sha256Hex("not bytecode", 12);
  EditManifest(program, [&](nlohmann::json& d) {
    for (auto& f : d["files"]) {
      if (f["path"] == "model.mlirbc") {
        f["sha256"] = digest;
        f["sizeBytes"] = "12";
      }
    }
  });
  try {
    Model::Open(TestRuntime(), program);
    FAIL();
  } catch (const PjrtError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("model.mlirbc does not compile on " + TestRuntime().plugin_path() +
                                          ": PJRT_Client_Compile: ", 0), 0u) << e.what();
    EXPECT_NE(e.pjrt_code(), 0);
    EXPECT_NE(e.code(), StatusCode::kOk);
  }

  testing::TempDir tmp5;
  const std::string tampered = Copy(tmp5, "demo");
  testing::WriteFile(tampered + "/goldens/case0/outputs/logits.npy", "changed");
  OpenOptions all;
  all.verify_all_files = true;
  try {
    Model::Open(TestRuntime(), tampered, all);
    FAIL();
  } catch (const ArtifactError& e) {
    EXPECT_NE(std::string(e.what()).find("goldens/case0/outputs/logits.npy: size 7 bytes"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(Model::Open(TestRuntime(), tampered));  // Open reads no golden by default
}

TEST(Runtime, DescribesThePlugin) {
  const Runtime& rt = TestRuntime();
  EXPECT_EQ(rt.platform(), "cpu");
  EXPECT_EQ(rt.pjrt_major_version(), 0);
  EXPECT_GE(rt.pjrt_minor_version(), 81);
  EXPECT_TRUE(rt.has_window());
  EXPECT_EQ(rt.window_min(), (StablehloVersion{0, 9, 0}));
  try {
    Runtime::Load("/nonexistent/plugin.so");
    FAIL();
  } catch (const PjrtError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot load PJRT plugin /nonexistent/plugin.so: ", 0), 0u) << e.what();
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace jaxport
