#include "test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace jaxport::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "jaxport-cpp-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

double ValueAt(const Tensor& t, size_t i) {
  const char* p = static_cast<const char*>(t.data()) + i * ItemSize(t.dtype());
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype()) {
    case DType::kFloat32: return load(float{});
    case DType::kFloat64: return load(double{});
    case DType::kBFloat16: {
      const uint32_t bits = uint32_t{load(uint16_t{})} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    case DType::kFloat16: {
      const uint16_t h = load(uint16_t{});
      const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      const double s = (h & 0x8000) ? -1.0 : 1.0;
      if (e == 0) return s * std::ldexp(m, -24);
      if (e == 31) return m ? NAN : s * INFINITY;
      return s * std::ldexp(m + 1024, e - 25);
    }
    case DType::kBool: case DType::kUInt8: return load(uint8_t{});
    case DType::kInt8: return load(int8_t{});
    case DType::kInt16: return load(int16_t{});
    case DType::kUInt16: return load(uint16_t{});
    case DType::kInt32: return load(int32_t{});
    case DType::kUInt32: return load(uint32_t{});
    case DType::kInt64: return static_cast<double>(load(int64_t{}));
    case DType::kUInt64: return static_cast<double>(load(uint64_t{}));
  }
  return 0;
}

std::string Mismatch(const Tensor& actual, const Tensor& expected) {
  if (actual.dtype() != expected.dtype() || actual.shape() != expected.shape()) {
    return std::string("got ") + Name(actual.dtype()) + ShapeText(actual.shape()) + ", expected " +
           Name(expected.dtype()) + ShapeText(expected.shape());
  }
  double atol = 0, rtol = 0;
  switch (expected.dtype()) {
    case DType::kFloat64: atol = 1e-12; rtol = 1e-10; break;
    case DType::kFloat32: atol = 1e-5; rtol = 1e-4; break;
    case DType::kFloat16: atol = 2e-3; rtol = 2e-3; break;
    case DType::kBFloat16: atol = 1.6e-2; rtol = 1.6e-2; break;
    default:
      return std::memcmp(actual.data(), expected.data(), expected.size_bytes()) == 0 ? "" : "integer/bool values differ";
  }
  for (size_t i = 0; i < static_cast<size_t>(expected.num_elements()); ++i) {
    const double a = ValueAt(actual, i), e = ValueAt(expected, i);
    const bool same_special = (std::isnan(a) && std::isnan(e)) || (std::isinf(e) && a == e);
    const bool close = std::isfinite(a) && std::isfinite(e) && std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!same_special && !close) {
      return "element " + std::to_string(i) + ": got " + std::to_string(a) + ", expected " + std::to_string(e) +
             " (atol " + std::to_string(atol) + ", rtol " + std::to_string(rtol) + ")";
    }
  }
  return "";
}

}  // namespace jaxport::testing
