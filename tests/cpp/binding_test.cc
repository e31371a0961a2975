// The request rules (src/binding.h) without a plugin: program choice for batch sizes and
// buckets, padding and cutting back, and the messages for requests that do not fit.
#include <gtest/gtest.h>

#include "binding.h"
#include "jaxport/manifest.h"
#include "test_manifests.h"
#include "test_util.h"

namespace jaxport::internal {
namespace {

using testing::BatchedManifest;
using testing::BucketManifest;

std::string Refusal(const Binder& b, const std::map<std::string, TensorView>& inputs) {
  try {
    b.Choose(inputs);
  } catch (const InvalidInputError& e) {
    EXPECT_EQ(e.code(), StatusCode::kInvalidArgument);
    return e.what();
  }
  return "(accepted)";
}

struct Batched : ::testing::Test {
  Manifest m = ParseManifest(BatchedManifest().dump());
  Binder b{m, "model 'mlp'"};
  std::vector<float> x = std::vector<float>(16 * 9, 1.0f);
  TensorView Rows(int64_t rows) { return TensorView(x.data(), {rows, 16}); }
};

TEST_F(Batched, ChoosesTheSmallestProgramHoldingTheRows) {
  Plan p = b.Choose({{"x", Rows(1)}});
  EXPECT_EQ(p.program, 0u);
  EXPECT_EQ(p.rows, 1);
  EXPECT_FALSE(p.padded);
  p = b.Choose({{"x", Rows(3)}});
  EXPECT_EQ(p.program, 1u);  // model.b4.mlirbc
  EXPECT_EQ(p.rows, 3);
  EXPECT_TRUE(p.padded);
  EXPECT_EQ(b.OutputShape(p, 0), (std::vector<int64_t>{3, 3}));
  EXPECT_TRUE(b.InputPadded(p, 0, {3, 16}));
  const Tensor padded = b.PadInput(p, 0, Rows(3));
  EXPECT_EQ(padded.shape(), (std::vector<int64_t>{4, 16}));
  p = b.Choose({{"x", Rows(4)}});
  EXPECT_FALSE(p.padded);
  EXPECT_EQ(b.OutputShape(p, 0), (std::vector<int64_t>{4, 3}));
}

TEST_F(Batched, RefusesRequestsThatDoNotFit) {
  EXPECT_EQ(Refusal(b, {{"x", Rows(5)}}),
            "batch size 5 exceeds max_batch_size 4 of model 'mlp' (exported batch sizes [1, 4]); split the request");
  EXPECT_EQ(Refusal(b, {{"y", Rows(1)}}), "unexpected input 'y': model 'mlp' has inputs 'x' (FP32 [-1, 16])");
  EXPECT_EQ(Refusal(b, {}), "missing input 'x': model 'mlp' expects FP32 [-1, 16]");
  const int32_t ints[16] = {};
  EXPECT_EQ(Refusal(b, {{"x", TensorView(ints, {1, 16})}}), "input 'x': expected datatype FP32, got INT32");
  EXPECT_EQ(Refusal(b, {{"x", TensorView(x.data(), {2, 15})}}), "input 'x': expected shape [-1, 16], got [2, 15]");
  EXPECT_EQ(Refusal(b, {{"x", TensorView(x.data(), {0, 16})}}), "input 'x': expected shape [-1, 16], got [0, 16]");
  EXPECT_EQ(Refusal(b, {{"x", TensorView(DType::kFloat32, {2, 16}, x.data(), 100)}}),
            "input 'x': the view holds 100 bytes; shape [2, 16] of FP32 needs 128");
  EXPECT_EQ(Refusal(b, {{"x", TensorView(DType::kFloat32, {1, 16}, nullptr, 64)}}), "input 'x': the view has no data");
}

TEST(PadRows, CopiesTheLastRow) {
  const int32_t v[6] = {1, 2, 3, 4, 5, 6};
  const Tensor t = PadRows(TensorView(v, {3, 2}), 5);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{5, 2}));
  const std::vector<int32_t> got(t.values<int32_t>(), t.values<int32_t>() + 10);
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 5, 6, 5, 6}));
}

TEST(PadZeros, PadsEveryAxisAfterItsEndAndCutToUndoesIt) {
  const int32_t v[6] = {1, 2, 3, 4, 5, 6};
  const Tensor t = PadZeros(TensorView(v, {2, 3}), {3, 5});
  const std::vector<int32_t> got(t.values<int32_t>(), t.values<int32_t>() + 15);
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0}));
  int32_t back[6] = {};
  CutTo(t.data(), {3, 5}, 4, back, {2, 3});
  EXPECT_EQ(std::vector<int32_t>(back, back + 6), std::vector<int32_t>(v, v + 6));
  const bool mask[4] = {true, true, false, true};
  const Tensor m = PadZeros(TensorView(mask, {1, 4}), {1, 8});
  const std::vector<bool> bits(m.values<bool>(), m.values<bool>() + 8);
  EXPECT_EQ(bits, (std::vector<bool>{true, true, false, true, false, false, false, false}));
}

struct Buckets : ::testing::Test {
  Manifest m = ParseManifest(BucketManifest().dump());
  Binder b{m, "model 'seq'"};
  std::vector<int32_t> tokens = std::vector<int32_t>(4 * 64, 3);
  std::vector<uint8_t> mask_bytes = std::vector<uint8_t>(4 * 64, 1);
  std::map<std::string, TensorView> At(int64_t batch, int64_t length) {
    return {{"tokens", TensorView(tokens.data(), {batch, length})},
            {"mask", TensorView(DType::kBool, {batch, length}, mask_bytes.data(), static_cast<size_t>(batch * length))}};
  }
};

TEST_F(Buckets, ExactBucketOrTheSmallestHoldingThePaddedDimension) {
  Plan p = b.Choose(At(2, 16));
  EXPECT_EQ(m.programs[p.program].mlirbc_file, "model.B2.T16.mlirbc");
  EXPECT_FALSE(p.padded);
  p = b.Choose(At(1, 8));  // T padded 8 -> 16 (B is not padded: it must match)
  EXPECT_EQ(m.programs[p.program].mlirbc_file, "model.B1.T16.mlirbc");
  EXPECT_TRUE(p.padded);
  EXPECT_EQ(p.sizes, (std::map<std::string, int64_t>{{"B", 1}, {"T", 8}}));
  EXPECT_EQ(b.OutputShape(p, 0), (std::vector<int64_t>{1, 8}));     // pooled: no T axis
  EXPECT_EQ(b.OutputShape(p, 1), (std::vector<int64_t>{1, 8, 8}));  // per_token: T cut back to 8
  EXPECT_EQ(b.ProgramOutputShape(p.program, 1), (std::vector<int64_t>{1, 16, 8}));
  const Tensor padded_mask = b.PadInput(p, 1, At(1, 8).at("mask"));
  EXPECT_EQ(padded_mask.shape(), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(padded_mask.values<bool>()[7], true);
  EXPECT_EQ(padded_mask.values<bool>()[8], false);  // padding is masked out
  p = b.Choose(At(2, 24));
  EXPECT_EQ(m.programs[p.program].mlirbc_file, "model.B2.T64.mlirbc");
}

TEST_F(Buckets, RefusesSizesOutsideTheRulesOrEveryBucket) {
  EXPECT_EQ(Refusal(b, At(1, 12)), "input 'tokens' dimension 1 (T) is 12: T must be a multiple of 8 in 8..64 (model 'seq')");
  EXPECT_EQ(Refusal(b, At(4, 16)),
            "sizes B=4, T=16 have no bucket program: model 'seq' runs its bucket sizes only (B=1, T=16; B=1, T=64; "
            "B=2, T=16; B=2, T=64, T padded up to them); send one of them (only jax runs the polymorphic program, "
            "model.jaxexport, at every admissible size)");
  auto inputs = At(2, 16);
  inputs["mask"] = TensorView(DType::kBool, {2, 24}, mask_bytes.data(), 48);
  EXPECT_EQ(Refusal(b, inputs), "input 'mask' dimension 1 (T) is 24 but input 'tokens' has T = 16: inputs must agree on T (model 'seq')");
}

TEST(Binder, RefusesAPolymorphicOnlyModel) {
  nlohmann::json doc = BucketManifest();
  doc["programs"] = {doc["programs"][0]};
  const Manifest m = ParseManifest(doc.dump());
  try {
    Binder b(m, "model 'seq'");
    FAIL();
  } catch (const ArtifactError& e) {
    EXPECT_EQ(std::string(e.what()), "shape-polymorphic program only (no --buckets): only model.jaxexport runs it, under jax");
  }
}

}  // namespace
}  // namespace jaxport::internal
