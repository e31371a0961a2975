// ParseManifest: what the exporter writes is read field by field; what the schema or its
// invariants forbid is refused in one line naming the field.
#include <gtest/gtest.h>

#include "jaxport/manifest.h"
#include "test_manifests.h"
#include "test_util.h"

namespace jaxport {
namespace {

using nlohmann::json;
using testing::BatchedManifest;
using testing::BucketManifest;

std::string Refusal(const json& doc) {
  try {
    ParseManifest(doc.dump(), "m.json");
  } catch (const ArtifactError& e) {
    EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition);
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_REFUSED(doc, text)                                   \
  do {                                                              \
    const std::string why = Refusal(doc);                           \
    EXPECT_NE(why.find(text), std::string::npos) << "got: " << why; \
  } while (0)

TEST(Manifest, ReadsABatchedManifest) {
  const Manifest m = ParseManifest(BatchedManifest().dump());
  EXPECT_EQ(m.schema_version, 1u);
  EXPECT_EQ(m.name, "mlp");
  EXPECT_EQ(m.stablehlo_target, "1.18.0");
  ASSERT_EQ(m.programs.size(), 2u);
  const Program& p = m.programs[1];
  EXPECT_EQ(p.mlirbc_file, "model.b4.mlirbc");
  EXPECT_EQ(p.batch_size, 4u);
  ASSERT_EQ(p.arguments.size(), 2u);
  EXPECT_EQ(p.arguments[0].role, ArgumentRole::kParameter);
  EXPECT_EQ(p.arguments[1].role, ArgumentRole::kInput);
  EXPECT_EQ(p.arguments[1].shape, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(p.arguments[1].byte_size, 256u);
  EXPECT_EQ(p.results[0].dtype, DType::kFloat32);
  EXPECT_TRUE(m.has_batching);
  EXPECT_EQ(m.batching.batch_sizes, (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{-1, 16}));
  EXPECT_EQ(m.files.size(), 2u);
}

TEST(Manifest, ReadsABucketManifest) {
  const Manifest m = ParseManifest(BucketManifest().dump());
  EXPECT_EQ(m.schema_version, 2u);
  ASSERT_EQ(m.dimensions.size(), 2u);
  EXPECT_EQ(m.dimensions[1].multiple_of, 8);
  EXPECT_TRUE(m.programs[0].polymorphic);
  EXPECT_EQ(m.programs[0].arguments[1].byte_size, 0u);
  EXPECT_EQ(m.programs[3].dims, (std::map<std::string, int64_t>{{"B", 2}, {"T", 16}}));
  ASSERT_EQ(m.padding.size(), 1u);
  EXPECT_EQ(m.padding[0].mask_input, "mask");
}

TEST(Manifest, AcceptsProtoNamesNumbersAndEnumValues) {
  json doc = BatchedManifest();
  doc["schema_version"] = doc["schemaVersion"];
  doc.erase("schemaVersion");
  doc["programs"][0]["arguments"][1]["byteSize"] = 64;      // a number, not a string
  doc["programs"][0]["arguments"][1]["role"] = 2;           // ARGUMENT_ROLE_INPUT by value
  const Manifest m = ParseManifest(doc.dump());
  EXPECT_EQ(m.schema_version, 1u);
  EXPECT_EQ(m.programs[0].arguments[1].role, ArgumentRole::kInput);
}

TEST(Manifest, RefusesSchemaVersionsOutsideTheRange) {
  json doc = BatchedManifest();
  doc["schemaVersion"] = 3;
  EXPECT_REFUSED(doc, "m.json: manifest schemaVersion 3; this reader accepts 1..2");
  doc["schemaVersion"] = 0;
  EXPECT_REFUSED(doc, "schemaVersion 0");
}

TEST(Manifest, RefusesSchema2FieldsInASchema1Manifest) {
  json doc = BucketManifest();
  doc["schemaVersion"] = 1;
  EXPECT_REFUSED(doc, "cannot carry symbolic dimensions or a device mesh; they need schema_version 2");
}

TEST(Manifest, RefusesUnknownFields) {
  json doc = BatchedManifest();
  doc["programs"][1]["arguments"][0]["futureField"] = 1;
  EXPECT_REFUSED(doc, "programs[1].arguments[0] has an unknown field 'futureField'");
  doc = BatchedManifest();
  doc["novel"] = true;
  EXPECT_REFUSED(doc, "has an unknown field 'novel'");
}

TEST(Manifest, RefusesBrokenArguments) {
  json doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["index"] = 5;
  EXPECT_REFUSED(doc, "programs[0].arguments[1] ('x') has index 5");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["name"] = "params.w";
  EXPECT_REFUSED(doc, "duplicate argument name");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["byteSize"] = "65";
  EXPECT_REFUSED(doc, "programs[0].arguments[1] ('x') byte_size 65 != 16 elements x 4");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][0].erase("sha256");
  EXPECT_REFUSED(doc, "('params.w') lacks its tensorstore spec or sha256");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["dtype"]["numpy"] = "complex64";
  EXPECT_REFUSED(doc, "names an unsupported dtype 'complex64'");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["dtype"]["itemsize"] = 8;
  EXPECT_REFUSED(doc, "is inconsistent (float32 is f32, 4 bytes)");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["shape"] = {"-1", "16"};
  EXPECT_REFUSED(doc, "has a non-fixed shape [-1, 16]");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["role"] = "ARGUMENT_ROLE_GUESS";
  EXPECT_REFUSED(doc, "field role has no value of the schema");
  doc = BatchedManifest();
  doc["programs"][0]["arguments"][1]["byteSize"] = "sixty-four";
  EXPECT_REFUSED(doc, "field byteSize is not an integer: \"sixty-four\"");
}

TEST(Manifest, RefusesPathsOutsideTheArtifact) {
  json doc = BatchedManifest();
  doc["programs"][0]["mlirbcFile"] = "../elsewhere/model.mlirbc";
  EXPECT_REFUSED(doc, "path '../elsewhere/model.mlirbc' contains '..'; refused");
  doc = BatchedManifest();
  doc["files"][0]["path"] = "/etc/passwd";
  EXPECT_REFUSED(doc, "path '/etc/passwd' is not a relative path inside the artifact");
  doc = BatchedManifest();
  doc["goldens"] = {{{"name", "c"}, {"inputs", {{"x", "goldens\\c\\x.npy"}}}}};
  EXPECT_REFUSED(doc, "is not a relative path inside the artifact");
  doc = BatchedManifest();
  doc["files"][0]["sha256"] = "abc";
  EXPECT_REFUSED(doc, "files entry 'model.b1.mlirbc' has no sha256");
}

TEST(Manifest, RefusesInconsistentBatchingAndDimensions) {
  json doc = BatchedManifest();
  doc["batching"]["batchSizes"] = {1, 8};
  EXPECT_REFUSED(doc, "batching.batchSizes do not match the programs' batch sizes");
  doc = BatchedManifest();
  doc["batching"]["batchedInputs"] = {"y"};
  EXPECT_REFUSED(doc, "batching lists input 'y', which is not one with a leading batch dimension");
  doc = BucketManifest();
  doc["padding"][0]["maskInput"] = "attention";
  EXPECT_REFUSED(doc, "padding entry T=attention names an undeclared dimension or an input the model does not have");
  doc = BucketManifest();
  doc["dimensions"][1]["min"] = "12";
  EXPECT_REFUSED(doc, "dimensions entry 'T' is malformed (12..64, multiple of 8)");
  doc = BucketManifest();
  doc["inputs"][0]["dimNames"] = {"B", "L"};
  EXPECT_REFUSED(doc, "inputs['tokens'] names dimension 'L', which manifest.dimensions does not declare");
  doc = BucketManifest();
  doc.erase("dimensions");
  doc.erase("padding");
  EXPECT_REFUSED(doc, "names dimension 'B', which manifest.dimensions does not declare");
}

TEST(Manifest, RefusesNonJson) {
  try {
    ParseManifest("{not json", "broken/manifest.json");
    FAIL();
  } catch (const ArtifactError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("broken/manifest.json is not valid JSON", 0), 0u) << e.what();
  }
  EXPECT_REFUSED(json::array(), "must hold a JSON object");
}

TEST(Manifest, LoadNamesAMissingManifest) {
  testing::TempDir dir;
  try {
    LoadManifest(dir.path());
    FAIL();
  } catch (const ArtifactError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path() + ": no manifest.json; is this a jaxport artifact directory?");
  }
}

}  // namespace
}  // namespace jaxport
