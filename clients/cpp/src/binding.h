// The request rules of a model, decided from its manifest only (no PJRT): which named tensors
// a call takes, which program runs them and how they are padded, with the server's rules and
// (where they apply outside a server) its texts:
//
//   - fixed shapes: every input exactly as the manifest says;
//   - batch sizes (`batching`): any rows 1..max batch size, the smallest exported program that
//     holds them, batched inputs padded with copies of their last row, batched outputs cut
//     back to the rows (bridge/model.py _program_for, bridge/batcher.py pad_rows);
//   - symbolic dimensions with bucket programs: the sizes checked against the dimensions'
//     rules (jaxport.artifact.dims.bind), the bucket of exactly those sizes, else the smallest
//     (by the product of its sizes) that holds them along the dimensions `padding` declares;
//     inputs padded with zeros (False in the mask) after the request's end, outputs cut back
//     along the padded dimensions (bridge/model.py _bucket_for, _execute).
//
// Internal: Model (model.cc) applies it; tests/cpp/binding_test.cc tests it without a plugin.
#ifndef JAXPORT_SRC_BINDING_H_
#define JAXPORT_SRC_BINDING_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "jaxport/manifest.h"
#include "jaxport/tensor.h"

namespace jaxport::internal {

// What a call runs: one program, and how the request fits it.
struct Plan {
  size_t program = 0;                    // index into Manifest::programs
  int64_t rows = 0;                      // batched models: the request's rows
  std::map<std::string, int64_t> sizes;  // symbolic models: the request's size of each dimension
  bool padded = false;                   // some input is padded (and some output cut back)
};

class Binder {
 public:
  // `label` names the model in messages ("model 'seq'"). ArtifactError when the manifest's
  // inputs, outputs or programs cannot be served this way (names the reason, one line).
  Binder(const Manifest& manifest, std::string label);

  // Validates `inputs` (by manifest input name) and chooses the program. InvalidInputError
  // names the input (unexpected, missing, dtype, shape, byte count, batch size, dimension
  // rule, no bucket).
  Plan Choose(const std::map<std::string, TensorView>& inputs) const;

  // The shape manifest input `input` has in `program` (its @main argument's shape; for an input
  // jax dropped, the request's own shape is kept).
  const std::vector<int64_t>& ProgramInputShape(size_t program, size_t input) const;
  // @main position of manifest input `input` in `program`; -1 when jax dropped it.
  int InputArgument(size_t program, size_t input) const { return inputs_[program][input]; }
  // @main result position of manifest output `output` in `program`.
  int OutputResult(size_t program, size_t output) const { return outputs_[program][output]; }

  // Whether input / output i is padded under `plan` (then PadInput / the cut shape apply).
  bool InputPadded(const Plan& plan, size_t input, const std::vector<int64_t>& request_shape) const;
  // The shape manifest output `output` has for the caller under `plan` (the program's result
  // shape, cut back to the request's rows or sizes).
  std::vector<int64_t> OutputShape(const Plan& plan, size_t output) const;
  // The program's own shape of manifest output `output`.
  const std::vector<int64_t>& ProgramOutputShape(size_t program, size_t output) const;

  // Padding of one input up to the program's shape: batched inputs with copies of the last row,
  // bucket inputs with zeros.
  Tensor PadInput(const Plan& plan, size_t input, const TensorView& value) const;

  const Manifest& manifest() const { return m_; }
  const std::string& label() const { return label_; }
  bool batched() const { return batched_; }
  bool bucketed() const { return !buckets_.empty(); }
  const std::vector<size_t>& bucket_programs() const { return buckets_; }

 private:
  void CheckDeclared(const std::string& name, const TensorView& view) const;
  std::map<std::string, int64_t> BindSizes(const std::map<std::string, TensorView>& inputs) const;
  size_t BucketFor(const std::map<std::string, int64_t>& sizes) const;
  std::string Spell(const std::map<std::string, int64_t>& dims) const;

  const Manifest& m_;
  std::string label_;
  std::string known_inputs_;
  bool batched_ = false;
  std::vector<bool> batched_input_, batched_output_;
  std::vector<uint32_t> sizes_;  // exported batch sizes, ascending
  std::map<uint32_t, size_t> by_size_;
  std::vector<size_t> buckets_;  // programs with dims, manifest order
  std::map<std::string, std::string> padding_;  // dim -> mask input
  std::vector<size_t> fixed_;    // every non-polymorphic program
  std::vector<std::vector<int>> inputs_, outputs_;  // per program: @main positions
  std::vector<std::vector<std::vector<int64_t>>> input_shapes_;
};

// `value` (dims [rows, ...]) padded to `size` rows with copies of its last row.
Tensor PadRows(const TensorView& value, int64_t size);
// `value` padded with zeros after its end along every axis up to `shape`.
Tensor PadZeros(const TensorView& value, const std::vector<int64_t>& shape);
// The leading block of `src` (of `src_shape`) of `dst_shape` written densely to `dst`.
void CutTo(const void* src, const std::vector<int64_t>& src_shape, size_t itemsize, void* dst,
           const std::vector<int64_t>& dst_shape);

}  // namespace jaxport::internal

#endif  // JAXPORT_SRC_BINDING_H_
