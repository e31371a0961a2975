// .npy files (numpy's format, version 1-3): little-endian, C order. bfloat16 has no numpy
// descriptor: it is stored as raw 2-byte values ('<V2' or '|V2'), as jaxport's goldens are.
#ifndef JAXPORT_NPY_H_
#define JAXPORT_NPY_H_

#include <string>
#include <vector>

#include "jaxport/tensor.h"

namespace jaxport {

// Any .npy of a dtype in the table (bool, integers, float16/32/64, V2 read as bfloat16).
// ArtifactError naming `path` otherwise (Fortran order, big-endian, truncated, ...).
Tensor ReadNpy(const std::string& path);

// A .npy that must hold `dtype` and `shape`; `what` names the tensor in the error.
Tensor ReadNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
               const std::string& what);

// Writes `tensor` as .npy version 1.0 ('<V2' for bfloat16: np.load(p).view(ml_dtypes.bfloat16)).
void WriteNpy(const std::string& path, const TensorView& tensor);

}  // namespace jaxport

#endif  // JAXPORT_NPY_H_
