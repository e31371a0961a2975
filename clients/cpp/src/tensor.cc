// The dtype table and host tensors: see jaxport/tensor.h.
#include "jaxport/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

namespace jaxport {
namespace {

constexpr DTypeInfo kTable[] = {
    {DType::kBool, "bool", "i1", "BOOL", 1},
    {DType::kInt8, "int8", "i8", "INT8", 1},
    {DType::kInt16, "int16", "i16", "INT16", 2},
    {DType::kInt32, "int32", "i32", "INT32", 4},
    {DType::kInt64, "int64", "i64", "INT64", 8},
    {DType::kUInt8, "uint8", "ui8", "UINT8", 1},
    {DType::kUInt16, "uint16", "ui16", "UINT16", 2},
    {DType::kUInt32, "uint32", "ui32", "UINT32", 4},
    {DType::kUInt64, "uint64", "ui64", "UINT64", 8},
    {DType::kFloat16, "float16", "f16", "FP16", 2},
    {DType::kBFloat16, "bfloat16", "bf16", "BF16", 2},
    {DType::kFloat32, "float32", "f32", "FP32", 4},
    {DType::kFloat64, "float64", "f64", "FP64", 8},
};

// Host memory is 64-byte aligned: XLA's CPU plugin uses an aligned input in place.
constexpr size_t kAlignment = 64;

void* Allocate(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

}  // namespace

const DTypeInfo& Info(DType dtype) { return kTable[static_cast<size_t>(dtype)]; }

std::optional<DType> DTypeFromNumpy(std::string_view numpy) {
  for (const DTypeInfo& info : kTable) {
    if (numpy == info.numpy) return info.dtype;
  }
  return std::nullopt;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InvalidInputError("shape " + ShapeText(shape) + " has a negative dimension");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      throw InvalidInputError("shape " + ShapeText(shape) + " has too many elements");
    }
    n *= d;
  }
  return n;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

void Tensor::Free::operator()(void* p) const noexcept { std::free(p); }

Tensor::Tensor() : Tensor(DType::kFloat32, {}) {}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  const int64_t n = NumElements(shape_);
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / ItemSize(dtype)) {
    throw InvalidInputError("shape " + ShapeText(shape_) + " is too large");
  }
  size_bytes_ = static_cast<size_t>(n) * ItemSize(dtype);
  data_.reset(Allocate(size_bytes_));
}

Tensor Tensor::CopyOf(const TensorView& view) {
  Tensor t(view.dtype, view.shape);
  if (view.size_bytes != t.size_bytes_) {
    throw InvalidInputError("a " + std::string(Name(view.dtype)) + ShapeText(view.shape) + " view of " +
                            std::to_string(view.size_bytes) + " bytes; the shape needs " +
                            std::to_string(t.size_bytes_));
  }
  if (t.size_bytes_ > 0) std::memcpy(t.mutable_data(), view.data, t.size_bytes_);
  return t;
}

Tensor::Tensor(const Tensor& other) : Tensor(other.dtype_, other.shape_) {
  if (size_bytes_ > 0) std::memcpy(mutable_data(), other.data(), size_bytes_);
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::CheckType(DType wanted) const {
  if (wanted != dtype_) {
    throw InvalidInputError(std::string("a ") + Name(dtype_) + " tensor read as " + Name(wanted));
  }
}

}  // namespace jaxport
