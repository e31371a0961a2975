// .npy reading and writing: see jaxport/npy.h.
#include "jaxport/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "jaxport/artifact.h"

namespace jaxport {
namespace {

// The numpy descr of a dtype as np.save writes it ('<f4', '|b1'; bfloat16 as raw '<V2').
std::string Descr(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "|b1";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kBFloat16: return "<V2";
    default: break;
  }
  const char kind = dtype == DType::kFloat16 || dtype == DType::kFloat32 || dtype == DType::kFloat64 ? 'f'
                    : (dtype == DType::kUInt16 || dtype == DType::kUInt32 || dtype == DType::kUInt64) ? 'u'
                                                                                                       : 'i';
  return std::string("<") + kind + std::to_string(ItemSize(dtype));
}

std::optional<DType> FromDescr(const std::string& descr) {
  if (descr == "|V2" || descr == "<V2" || descr == "V2") return DType::kBFloat16;
  for (int i = 0; i <= static_cast<int>(DType::kFloat64); ++i) {
    const auto d = static_cast<DType>(i);
    if (d == DType::kBFloat16) continue;
    std::string want = Descr(d);
    if (descr == want) return d;
    if (ItemSize(d) == 1 && descr == "<" + want.substr(1)) return d;  // '<b1' is '|b1'
    if (ItemSize(d) == 1 && descr == "=" + want.substr(1)) return d;
  }
  return std::nullopt;
}

// The value of `key` in a .npy header dict ("{'descr': '<f4', 'fortran_order': False,
// 'shape': (4, 16), }").
std::string HeaderValue(const std::string& header, const std::string& key, const std::string& what) {
  const size_t at = header.find("'" + key + "'");
  const size_t colon = at == std::string::npos ? at : header.find(':', at);
  if (colon == std::string::npos) throw ArtifactError(what + ": .npy header has no " + key);
  const size_t start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) throw ArtifactError(what + ": .npy header is malformed");
  size_t end;
  if (header[start] == '(') {
    end = header.find(')', start);
  } else if (header[start] == '\'') {
    end = header.find('\'', start + 1);
  } else {
    end = header.find_first_of(",}", start);
    if (end != std::string::npos) --end;
  }
  if (end == std::string::npos) throw ArtifactError(what + ": .npy header is malformed");
  return header.substr(start, end + 1 - start);
}

}  // namespace

Tensor ReadNpy(const std::string& path) {
  const std::string what = path;
  const std::string data = ReadFile(path);
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) throw ArtifactError(what + " is not a .npy file");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) | (static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (data.size() < 12) throw ArtifactError(what + " is truncated");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(data[8 + i]);
    header_start = 12;
  } else {
    throw ArtifactError(what + ": .npy version " + std::to_string(major) + " (this reader reads 1..3)");
  }
  if (header_start + header_len > data.size()) throw ArtifactError(what + " is truncated");
  const std::string header = data.substr(header_start, header_len);
  std::string descr = HeaderValue(header, "descr", what);
  if (descr.size() >= 2 && descr.front() == '\'') descr = descr.substr(1, descr.size() - 2);
  const std::optional<DType> dtype = FromDescr(descr);
  if (!dtype) {
    throw ArtifactError(what + " holds '" + descr + "': not a little-endian dtype of the table (bool, "
                        "int8..uint64, float16/32/64, V2 for bfloat16)");
  }
  if (HeaderValue(header, "fortran_order", what) != "False") throw ArtifactError(what + " is in Fortran order");
  std::vector<int64_t> shape;
  const std::string dims = HeaderValue(header, "shape", what);
  std::stringstream numbers(dims.substr(1, dims.size() - 2));
  for (std::string n; std::getline(numbers, n, ',');) {
    if (n.find_first_not_of(' ') == std::string::npos) continue;
    try {
      shape.push_back(std::stoll(n));
    } catch (const std::exception&) {
      throw ArtifactError(what + ": .npy shape " + dims + " is malformed");
    }
  }
  const size_t body = header_start + header_len;
  Tensor t(*dtype, shape);
  if (data.size() - body != t.size_bytes()) {
    throw ArtifactError(what + " has " + std::to_string(data.size() - body) + " data bytes, a " + Name(*dtype) +
                        ShapeText(shape) + " needs " + std::to_string(t.size_bytes()));
  }
  if (t.size_bytes() > 0) std::memcpy(t.mutable_data(), data.data() + body, t.size_bytes());
  return t;
}

Tensor ReadNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape, const std::string& what) {
  Tensor t = ReadNpy(path);
  if (t.dtype() != dtype) {
    throw ArtifactError(what + ": " + path + " holds " + Name(t.dtype()) + ", the manifest says " + Name(dtype));
  }
  if (t.shape() != shape) {
    throw ArtifactError(what + ": " + path + " has shape " + ShapeText(t.shape()) + ", the manifest says " +
                        ShapeText(shape));
  }
  return t;
}

void WriteNpy(const std::string& path, const TensorView& tensor) {
  if (static_cast<size_t>(NumElements(tensor.shape)) * ItemSize(tensor.dtype) != tensor.size_bytes) {
    throw InvalidInputError(path + ": a " + std::string(Name(tensor.dtype)) + ShapeText(tensor.shape) +
                            " tensor of " + std::to_string(tensor.size_bytes) + " bytes");
  }
  std::string dims = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i) dims += std::to_string(tensor.shape[i]) + (tensor.shape.size() == 1 ? "," : i + 1 < tensor.shape.size() ? ", " : "");
  dims += ")";
  std::string header = "{'descr': '" + Descr(tensor.dtype) + "', 'fortran_order': False, 'shape': " + dims + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded with spaces to 64 bytes.
  const size_t total = ((10 + header.size() + 1 + 63) / 64) * 64;
  header += std::string(total - 10 - header.size() - 1, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw ArtifactError(path + ": cannot create");
  file.write(out.data(), static_cast<std::streamsize>(out.size()));
  file.write(static_cast<const char*>(tensor.data), static_cast<std::streamsize>(tensor.size_bytes));
  if (!file.flush()) throw ArtifactError(path + ": write error");
}

}  // namespace jaxport
