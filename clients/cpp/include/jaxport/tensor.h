// Element types and host tensors: dense, row-major (C order), little-endian, as the artifact
// format stores them (docs/artifact-format.md).
//
//   TensorView         the caller's memory, not owned (Run's inputs): kept as is, never copied
//                      unless the request must be padded (docs/cpp.md, "Inputs and outputs").
//   MutableTensorView  the caller's memory to write into (RunInto's outputs).
//   Tensor             owned memory, 64-byte aligned (Run's outputs).
//
// bool is one byte per element (0 or 1); float16 and bfloat16 are raw 2-byte values (the
// Float16 and BFloat16 structs below only name them, no arithmetic).
#ifndef JAXPORT_TENSOR_H_
#define JAXPORT_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jaxport/error.h"

namespace jaxport {

enum class DType : uint8_t {
  kBool,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
};

// The one dtype table: the manifest's numpy and StableHLO names, the Open Inference Protocol
// datatype and the size of one element.
struct DTypeInfo {
  DType dtype;
  const char* numpy;     // "float32", "bfloat16", "bool", ...
  const char* mlir;      // "f32", "bf16", "i1", ...
  const char* datatype;  // "FP32", "BF16", "BOOL", ...
  size_t itemsize;
};

const DTypeInfo& Info(DType dtype);
inline const char* Name(DType dtype) { return Info(dtype).numpy; }
inline size_t ItemSize(DType dtype) { return Info(dtype).itemsize; }
// The dtype of a numpy name ("float32"); nullopt for a name outside the table.
std::optional<DType> DTypeFromNumpy(std::string_view numpy);

// Raw 2-byte floating-point values.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kUInt16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kUInt32; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::kUInt64; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };

// Elements of a shape (1 for a scalar); InvalidInputError for a negative dimension or an
// element count that overflows.
int64_t NumElements(const std::vector<int64_t>& shape);

// "[4, 16]", "[]": shapes in messages, as the server writes them.
std::string ShapeText(const std::vector<int64_t>& shape);

struct TensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size_bytes = 0;

  TensorView() = default;
  TensorView(DType dtype, std::vector<int64_t> shape, const void* data, size_t size_bytes)
      : dtype(dtype), shape(std::move(shape)), data(data), size_bytes(size_bytes) {}
  // A view of `data` holding NumElements(shape) values of T.
  template <typename T>
  TensorView(const T* data, std::vector<int64_t> shape)
      : dtype(DTypeOf<T>::value), shape(std::move(shape)), data(data) {
    size_bytes = static_cast<size_t>(NumElements(this->shape)) * sizeof(T);
  }
};

struct MutableTensorView {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  void* data = nullptr;
  size_t size_bytes = 0;

  MutableTensorView() = default;
  MutableTensorView(DType dtype, std::vector<int64_t> shape, void* data, size_t size_bytes)
      : dtype(dtype), shape(std::move(shape)), data(data), size_bytes(size_bytes) {}
  template <typename T>
  MutableTensorView(T* data, std::vector<int64_t> shape)
      : dtype(DTypeOf<T>::value), shape(std::move(shape)), data(data) {
    size_bytes = static_cast<size_t>(NumElements(this->shape)) * sizeof(T);
  }
};

// An owned host tensor (zero-filled when created). Copying copies the bytes; moving does not.
class Tensor {
 public:
  Tensor();  // a float32 scalar 0
  Tensor(DType dtype, std::vector<int64_t> shape);
  // A copy of `view`'s bytes.
  static Tensor CopyOf(const TensorView& view);
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  size_t size_bytes() const { return size_bytes_; }
  int64_t num_elements() const { return NumElements(shape_); }
  const void* data() const { return data_.get(); }
  void* mutable_data() { return data_.get(); }

  // The elements as T; InvalidInputError when T is not this tensor's dtype.
  template <typename T>
  const T* values() const {
    CheckType(DTypeOf<T>::value);
    return static_cast<const T*>(data());
  }
  template <typename T>
  T* mutable_values() {
    CheckType(DTypeOf<T>::value);
    return static_cast<T*>(mutable_data());
  }

  TensorView view() const { return TensorView(dtype_, shape_, data(), size_bytes_); }
  MutableTensorView mutable_view() { return MutableTensorView(dtype_, shape_, mutable_data(), size_bytes_); }

 private:
  struct Free {
    void operator()(void* p) const noexcept;
  };
  void CheckType(DType wanted) const;

  DType dtype_;
  std::vector<int64_t> shape_;
  size_t size_bytes_ = 0;
  std::unique_ptr<void, Free> data_;
};

}  // namespace jaxport

#endif  // JAXPORT_TENSOR_H_
