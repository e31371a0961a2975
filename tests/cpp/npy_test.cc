// .npy: written and read back for every dtype; what numpy's format does not promise to this
// reader is refused naming the file. (The golden tests read files numpy itself wrote.)
#include <gtest/gtest.h>

#include "jaxport/artifact.h"
#include "jaxport/npy.h"
#include "test_util.h"

namespace jaxport {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(Npy, RoundTripsEveryDType) {
  TempDir dir;
  for (int d = 0; d <= static_cast<int>(DType::kFloat64); ++d) {
    const auto dtype = static_cast<DType>(d);
    Tensor t(dtype, {2, 3});
    auto* bytes = static_cast<unsigned char*>(t.mutable_data());
    for (size_t i = 0; i < t.size_bytes(); ++i) bytes[i] = static_cast<unsigned char>(dtype == DType::kBool ? i % 2 : i * 7 + 1);
    const std::string path = dir / (std::string(Name(dtype)) + ".npy");
    WriteNpy(path, t.view());
    const std::string raw = ReadFile(path);
    EXPECT_EQ(raw.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ((raw.size() - t.size_bytes()) % 64, 0u) << "header padded to 64 bytes";
    const Tensor back = ReadNpy(path);
    EXPECT_EQ(back.dtype(), dtype) << Name(dtype);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(std::string(static_cast<const char*>(back.data()), back.size_bytes()),
              std::string(static_cast<const char*>(t.data()), t.size_bytes()));
  }
}

TEST(Npy, ScalarsAndOneDimension) {
  TempDir dir;
  const float one = 1.5f;
  WriteNpy(dir / "s.npy", TensorView(&one, {}));
  EXPECT_NE(ReadFile(dir / "s.npy").find("'shape': (), }"), std::string::npos);
  EXPECT_EQ(ReadNpy(dir / "s.npy").values<float>()[0], 1.5f);
  const int32_t v[3] = {1, 2, 3};
  WriteNpy(dir / "v.npy", TensorView(v, {3}));
  EXPECT_NE(ReadFile(dir / "v.npy").find("'descr': '<i4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
}

std::string Npy(const std::string& header, const std::string& body) {
  std::string h = header;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xFF) + static_cast<char>(h.size() >> 8) + h + body;
}

std::string Refusal(const std::string& path) {
  try {
    ReadNpy(path);
  } catch (const ArtifactError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Npy, Refuses) {
  TempDir dir;
  WriteFile(dir / "be.npy", Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"));
  EXPECT_NE(Refusal(dir / "be.npy").find("holds '>f4': not a little-endian dtype of the table"), std::string::npos);
  WriteFile(dir / "f.npy", Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "abcd"));
  EXPECT_NE(Refusal(dir / "f.npy").find("is in Fortran order"), std::string::npos);
  WriteFile(dir / "t.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", "abcd"));
  EXPECT_NE(Refusal(dir / "t.npy").find("has 4 data bytes, a float32[2] needs 8"), std::string::npos);
  WriteFile(dir / "x.npy", "not numpy");
  EXPECT_NE(Refusal(dir / "x.npy").find("is not a .npy file"), std::string::npos);
  WriteFile(dir / "ok.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "abcd"));
  try {
    ReadNpy(dir / "ok.npy", DType::kInt32, {1}, "case c input x");
    FAIL();
  } catch (const ArtifactError& e) {
    EXPECT_NE(std::string(e.what()).find("case c input x: " + (dir / "ok.npy") + " holds float32, the manifest says int32"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace jaxport
