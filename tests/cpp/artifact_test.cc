// The path rule, sha256, listed files and the zarr v3 reader, on files written here.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <numeric>

#include "jaxport/artifact.h"
#include "test_util.h"

namespace jaxport {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

std::string Refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const ArtifactError& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_REFUSED(expr, text)                                  \
  do {                                                              \
    const std::string why = Refusal([&] { expr; });                 \
    EXPECT_NE(why.find(text), std::string::npos) << "got: " << why; \
  } while (0)

TEST(PathRule, AcceptsRelativePathsInside) {
  TempDir dir;
  WriteFile(dir / "weights/w/zarr.json", "{}");
  EXPECT_EQ(ResolveInside(dir.path(), "weights/w/zarr.json", "what"), fs::weakly_canonical(dir / "weights/w/zarr.json").string());
  EXPECT_NO_THROW(CheckRelative("a/b.c", "what"));
  EXPECT_NO_THROW(CheckRelative("a/..b", "what"));  // a name starting with dots is not '..'
}

TEST(PathRule, RefusesEscapes) {
  TempDir dir;
  EXPECT_REFUSED(CheckRelative("", "files[]"), "files[]: path '' is not a relative path inside the artifact");
  EXPECT_REFUSED(CheckRelative("/abs", "f"), "path '/abs' is not a relative path");
  EXPECT_REFUSED(CheckRelative("a\\b", "f"), "path 'a\\b' is not a relative path");
  EXPECT_REFUSED(CheckRelative("a/../../b", "f"), "path 'a/../../b' contains '..'; refused");
  EXPECT_REFUSED(CheckRelative(std::string("a\0b", 3), "f"), "is not a relative path");
  // A symlink that leads outside is refused where it resolves.
  TempDir outside;
  WriteFile(outside / "secret", "x");
  fs::create_symlink(outside.path(), dir / "link");
  EXPECT_REFUSED(ResolveInside(dir.path(), "link/secret", "golden input"),
                 "golden input: path 'link/secret' resolves outside " + fs::path(dir.path()).filename().string() + "/; refused");
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(Sha256Hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Manifest WithFile(const std::string& path, const std::string& data) {
  Manifest m;
  m.files.push_back(FileEntry{path, data.size(), Sha256Hex(data.data(), data.size())});
  Program p;
  p.mlirbc_file = path;
  m.programs.push_back(p);
  return m;
}

TEST(ListedFiles, ChecksSizeAndDigest) {
  TempDir dir;
  WriteFile(dir / "model.mlirbc", "MLIR bytes");
  const Manifest m = WithFile("model.mlirbc", "MLIR bytes");
  EXPECT_EQ(ReadListedFile(dir.path(), m, "model.mlirbc"), "MLIR bytes");
  EXPECT_NO_THROW(VerifyFiles(dir.path(), m));
  EXPECT_REFUSED(ReadListedFile(dir.path(), m, "other.mlirbc"), "other.mlirbc is not in the manifest's files list; refused");
  WriteFile(dir / "model.mlirbc", "MLIR bytez");
  EXPECT_REFUSED(VerifyFiles(dir.path(), m), "/model.mlirbc: sha256 mismatch: expected ");
  WriteFile(dir / "model.mlirbc", "MLIR");
  EXPECT_REFUSED(ReadListedFile(dir.path(), m, "model.mlirbc"), "size 4 bytes, manifest says 10 (truncated or replaced?)");
  fs::remove(dir / "model.mlirbc");
  EXPECT_REFUSED(VerifyFiles(dir.path(), m), "/model.mlirbc: file listed in the manifest is missing");
  Manifest unlisted = m;
  unlisted.files.clear();
  EXPECT_REFUSED(VerifyFiles(dir.path(), unlisted), "model.mlirbc is used by the manifest but not in its file list");
}

// A zarr v3 array as jaxport writes it: regular chunks, one little-endian bytes codec, every
// chunk written whole (edge chunks padded). Values 0, 1, 2, ... as float32.
struct Zarr {
  std::vector<int64_t> shape, chunk;
  std::string dtype = "float32";
  std::string codecs = R"([{"name": "bytes", "configuration": {"endian": "little"}}])";
};

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

std::string Json(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Writes the array under dir/weights/w and returns its Argument (sha256 of the dense bytes).
Argument WriteZarr(const TempDir& dir, const Zarr& z) {
  const std::string root = dir / "weights/w";
  WriteFile(root + "/zarr.json",
            R"({"zarr_format": 3, "node_type": "array", "shape": )" + Json(z.shape) + R"(, "data_type": ")" + z.dtype +
                R"(", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": )" + Json(z.chunk) +
                R"(}}, "chunk_key_encoding": {"name": "default"}, "codecs": )" + z.codecs + R"(, "fill_value": 0.0})");
  const int64_t n = NumElements(z.shape);
  const std::vector<float> dense = Iota(n);
  const size_t rank = z.shape.size();
  std::vector<int64_t> grid(rank);
  for (size_t a = 0; a < rank; ++a) grid[a] = (z.shape[a] + z.chunk[a] - 1) / z.chunk[a];
  std::vector<int64_t> at(rank, 0);
  for (bool more = n > 0; more;) {
    std::vector<float> chunk(static_cast<size_t>(NumElements(z.chunk)), -1.0f);  // padding beyond the edge
    for (int64_t k = 0; k < NumElements(z.chunk); ++k) {
      int64_t rem = k, flat = 0;
      bool inside = true;
      std::vector<int64_t> in(rank);
      for (size_t a = rank; a-- > 0;) {
        in[a] = rem % z.chunk[a];
        rem /= z.chunk[a];
      }
      for (size_t a = 0; a < rank; ++a) {
        const int64_t pos = at[a] * z.chunk[a] + in[a];
        inside = inside && pos < z.shape[a];
        flat = flat * z.shape[a] + pos;
      }
      if (inside) chunk[k] = dense[flat];
    }
    std::string key = "c";
    for (int64_t i : at) key += "/" + std::to_string(i);
    WriteFile(root + "/" + key, std::string(reinterpret_cast<const char*>(chunk.data()), chunk.size() * 4));
    more = false;
    for (size_t a = rank; a-- > 0;) {
      if (++at[a] < grid[a]) {
        more = true;
        break;
      }
      at[a] = 0;
    }
  }
  Argument arg;
  arg.name = "params.w";
  arg.role = ArgumentRole::kParameter;
  arg.shape = z.shape;
  arg.dtype = DType::kFloat32;
  arg.tensorstore_spec_json = R"({"driver": "zarr3", "kvstore": {"driver": "file", "path": "weights/w/"}})";
  arg.sha256 = Sha256Hex(dense.data(), dense.size() * 4);
  return arg;
}

TEST(Zarr3, AssemblesAGridWithPaddedEdgeChunks) {
  TempDir dir;
  const Argument arg = WriteZarr(dir, Zarr{{5, 7}, {2, 3}});  // a 3 x 3 grid, edges partly padding
  ASSERT_TRUE(fs::exists(dir / "weights/w/c/2/2"));
  const Tensor t = ReadParameter(dir.path(), arg);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{5, 7}));
  for (int i = 0; i < 35; ++i) ASSERT_EQ(t.values<float>()[i], static_cast<float>(i)) << i;
}

TEST(Zarr3, ReadsThreeDimensionsAndScalars) {
  TempDir dir;
  const Tensor t = ReadParameter(dir.path(), WriteZarr(dir, Zarr{{3, 4, 5}, {2, 4, 2}}));
  for (int i = 0; i < 60; ++i) ASSERT_EQ(t.values<float>()[i], static_cast<float>(i)) << i;
  TempDir scalar;
  const Tensor s = ReadParameter(scalar.path(), WriteZarr(scalar, Zarr{{}, {}}));
  EXPECT_TRUE(fs::exists(scalar / "weights/w/c"));
  EXPECT_EQ(s.values<float>()[0], 0.0f);
}

TEST(Zarr3, RefusesWhatItCannotReadExactly) {
  {
    TempDir dir;
    Argument arg = WriteZarr(dir, Zarr{{4, 4}, {2, 2}});
    arg.sha256 = std::string(64, '0');
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "parameter 'params.w' (weights/w/) sha256 mismatch: expected 0000");
  }
  {
    TempDir dir;
    Zarr z{{4, 4}, {2, 2}};
    z.codecs = R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip"}])";
    const Argument arg = WriteZarr(dir, z);
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "this reader reads exactly one 'bytes' codec");
  }
  {
    TempDir dir;
    Zarr z{{4, 4}, {2, 2}};
    z.codecs = R"([{"name": "bytes", "configuration": {"endian": "big"}}])";
    EXPECT_REFUSED(ReadParameter(dir.path(), WriteZarr(dir, z)), "codecs");
  }
  {
    TempDir dir;
    const Argument arg = WriteZarr(dir, Zarr{{4, 4}, {2, 2}});
    fs::remove(dir / "weights/w/c/1/0");
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "parameter 'params.w': chunk weights/w/c/1/0 is missing");
  }
  {
    TempDir dir;
    const Argument arg = WriteZarr(dir, Zarr{{4, 4}, {2, 2}});
    WriteFile(dir / "weights/w/c/0/1", "short");
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "chunk weights/w/c/0/1 has 5 bytes, a [2, 2] float32 chunk has 16");
  }
  {
    TempDir dir;
    Argument arg = WriteZarr(dir, Zarr{{4, 4}, {2, 2}});
    arg.shape = {4, 5};
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "parameter 'params.w' on disk is float32[4, 4], manifest says float32[4, 5]");
  }
  {
    TempDir dir;
    Argument arg = WriteZarr(dir, Zarr{{4, 4}, {2, 2}});
    arg.tensorstore_spec_json = R"({"driver": "zarr3", "kvstore": {"driver": "s3", "path": "weights/w/"}})";
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "weights must be a zarr3 array in a local 'file' kvstore");
    arg.tensorstore_spec_json = R"({"driver": "zarr3", "kvstore": {"driver": "file", "path": "../w/"}})";
    EXPECT_REFUSED(ReadParameter(dir.path(), arg), "parameter 'params.w': path '../w' contains '..'; refused");
  }
}

}  // namespace
}  // namespace jaxport
