// The request rules of a model: see binding.h.
#include "binding.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace jaxport::internal {
namespace {

// The leading `block` of an array of `src_shape` at `src` copied to the same place in an array
// of `dst_shape` at `dst` (every shape of the same rank; block within both).
void CopyLeading(const char* src, const std::vector<int64_t>& src_shape, char* dst,
                 const std::vector<int64_t>& dst_shape, const std::vector<int64_t>& block, size_t item) {
  const size_t rank = block.size();
  if (std::any_of(block.begin(), block.end(), [](int64_t d) { return d == 0; })) return;
  if (rank == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  std::vector<int64_t> at(rank, 0);  // position; the last axis is copied as one run
  for (;;) {
    int64_t s = 0, d = 0;
    for (size_t a = 0; a < rank; ++a) {
      s = s * src_shape[a] + at[a];
      d = d * dst_shape[a] + at[a];
    }
    std::memcpy(dst + d * item, src + s * item, static_cast<size_t>(block[rank - 1]) * item);
    size_t axis = rank - 1;
    while (axis-- > 0) {
      if (++at[axis] < block[axis]) break;
      at[axis] = 0;
    }
    if (axis == static_cast<size_t>(-1)) return;
  }
}

std::string Quoted(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", '" : "'") + names[i] + "'";
  return out + "]";
}

template <typename T>
std::string List(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

bool MatchesShape(const std::vector<int64_t>& want, const std::vector<int64_t>& got) {
  if (want.size() != got.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == -1 ? got[i] < 1 : want[i] != got[i]) return false;
  }
  return true;
}

std::string Rule(const Dimension& d) {
  if (d.multiple_of > 1) {
    return d.name + " must be a multiple of " + std::to_string(d.multiple_of) + " in " + std::to_string(d.min) +
           ".." + std::to_string(d.max);
  }
  return d.name + " must be in " + std::to_string(d.min) + ".." + std::to_string(d.max);
}

int64_t Product(const std::map<std::string, int64_t>& dims) {
  int64_t n = 1;
  for (const auto& [name, size] : dims) n *= size;
  return n;
}

}  // namespace

Binder::Binder(const Manifest& m, std::string label) : m_(m), label_(std::move(label)) {
  const size_t n = m.programs.size();
  inputs_.resize(n);
  outputs_.resize(n);
  input_shapes_.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const Program& prog = m.programs[p];
    if (prog.polymorphic) continue;
    fixed_.push_back(p);
    for (const Argument& a : prog.arguments) {
      if (a.role == ArgumentRole::kInput &&
          std::none_of(m.inputs.begin(), m.inputs.end(), [&](const TensorSpec& t) { return t.name == a.name; })) {
        throw ArtifactError(prog.mlirbc_file + ": argument " + std::to_string(a.index) + " is input '" + a.name +
                            "', which Manifest.inputs does not list");
      }
    }
    for (const TensorSpec& spec : m.inputs) {
      auto arg = std::find_if(prog.arguments.begin(), prog.arguments.end(), [&](const Argument& a) {
        return a.role == ArgumentRole::kInput && a.name == spec.name;
      });
      inputs_[p].push_back(arg == prog.arguments.end() ? -1 : static_cast<int>(arg - prog.arguments.begin()));
      input_shapes_[p].push_back(arg == prog.arguments.end() ? spec.shape : arg->shape);
      if (arg != prog.arguments.end() && arg->dtype != spec.dtype) {
        throw ArtifactError(prog.mlirbc_file + ": input '" + spec.name + "' is " + Name(arg->dtype) +
                            " in @main but " + Name(spec.dtype) + " in Manifest.inputs");
      }
    }
    for (const TensorSpec& spec : m.outputs) {
      auto res = std::find_if(prog.results.begin(), prog.results.end(), [&](const Result& r) {
        return r.role == ResultRole::kOutput && r.name == spec.name;
      });
      if (res == prog.results.end()) {
        throw ArtifactError(prog.mlirbc_file + " has no result for output " + spec.name);
      }
      outputs_[p].push_back(static_cast<int>(res - prog.results.begin()));
    }
    if (!prog.dims.empty()) buckets_.push_back(p);
  }
  if (fixed_.empty()) {
    throw ArtifactError("shape-polymorphic program only (no --buckets): only model.jaxexport runs it, under jax");
  }
  if (!m.dimensions.empty() && buckets_.empty()) {
    throw ArtifactError("symbolic dimensions without bucket programs: export with --buckets to run it here");
  }
  for (const Padding& p : m.padding) padding_[p.dim] = p.mask_input;
  batched_ = m.has_batching && !m.batching.batched_inputs.empty();
  for (const TensorSpec& t : m.inputs) {
    batched_input_.push_back(batched_ && std::count(m.batching.batched_inputs.begin(),
                                                    m.batching.batched_inputs.end(), t.name) > 0);
  }
  for (const TensorSpec& t : m.outputs) {
    batched_output_.push_back(batched_ && std::count(m.batching.batched_outputs.begin(),
                                                     m.batching.batched_outputs.end(), t.name) > 0);
  }
  if (batched_) {
    for (size_t p : fixed_) {
      by_size_[m.programs[p].batch_size] = p;
      sizes_.push_back(m.programs[p].batch_size);
    }
    std::sort(sizes_.begin(), sizes_.end());
  } else if (buckets_.empty() && fixed_.size() > 1) {
    throw ArtifactError("several fixed-shape programs but neither batch sizes nor buckets choose among them");
  }
  for (const TensorSpec& t : m.inputs) {
    known_inputs_ += (known_inputs_.empty() ? "'" : ", '") + t.name + "' (" + Info(t.dtype).datatype + " " +
                     ShapeText(t.shape) + ")";
  }
}

void Binder::CheckDeclared(const std::string& name, const TensorView& view) const {
  auto spec = std::find_if(m_.inputs.begin(), m_.inputs.end(), [&](const TensorSpec& t) { return t.name == name; });
  if (spec == m_.inputs.end()) {
    throw InvalidInputError("unexpected input '" + name + "': " + label_ + " has inputs " + known_inputs_);
  }
  if (view.dtype != spec->dtype) {
    throw InvalidInputError("input '" + name + "': expected datatype " + Info(spec->dtype).datatype + ", got " +
                            Info(view.dtype).datatype);
  }
  if (!MatchesShape(spec->shape, view.shape)) {
    throw InvalidInputError("input '" + name + "': expected shape " + ShapeText(spec->shape) + ", got " +
                            ShapeText(view.shape));
  }
  const uint64_t want = static_cast<uint64_t>(NumElements(view.shape)) * ItemSize(view.dtype);
  if (view.size_bytes != want) {
    throw InvalidInputError("input '" + name + "': the view holds " + std::to_string(view.size_bytes) +
                            " bytes; shape " + ShapeText(view.shape) + " of " + Info(view.dtype).datatype +
                            " needs " + std::to_string(want));
  }
  if (view.data == nullptr && want > 0) throw InvalidInputError("input '" + name + "': the view has no data");
}

std::map<std::string, int64_t> Binder::BindSizes(const std::map<std::string, TensorView>& inputs) const {
  std::map<std::string, int64_t> sizes;
  std::map<std::string, std::string> seen;
  for (const TensorSpec& spec : m_.inputs) {
    auto given = inputs.find(spec.name);
    if (given == inputs.end() || spec.dim_names.empty()) continue;
    const std::vector<int64_t>& shape = given->second.shape;
    for (size_t axis = 0; axis < spec.dim_names.size() && axis < shape.size(); ++axis) {
      const std::string& name = spec.dim_names[axis];
      if (name.empty()) continue;
      const int64_t size = shape[axis];
      const Dimension& dim = *std::find_if(m_.dimensions.begin(), m_.dimensions.end(),
                                           [&](const Dimension& d) { return d.name == name; });
      const std::string where = "input '" + spec.name + "' dimension " + std::to_string(axis) + " (" + name +
                                ") is " + std::to_string(size);
      if (sizes.count(name) && sizes[name] != size) {
        throw InvalidInputError(where + " but input '" + seen[name] + "' has " + name + " = " +
                                std::to_string(sizes[name]) + ": inputs must agree on " + name + " (" + label_ + ")");
      }
      if (!(dim.min <= size && size <= dim.max && size % std::max<int64_t>(1, dim.multiple_of) == 0)) {
        throw InvalidInputError(where + ": " + Rule(dim) + " (" + label_ + ")");
      }
      sizes[name] = size;
      seen.emplace(name, spec.name);
    }
  }
  return sizes;
}

std::string Binder::Spell(const std::map<std::string, int64_t>& dims) const {
  std::string out;
  for (const Dimension& d : m_.dimensions) {
    auto it = dims.find(d.name);
    if (it != dims.end()) out += (out.empty() ? "" : ", ") + d.name + "=" + std::to_string(it->second);
  }
  return out;
}

size_t Binder::BucketFor(const std::map<std::string, int64_t>& sizes) const {
  for (size_t p : buckets_) {
    if (m_.programs[p].dims == sizes) return p;
  }
  const size_t none = static_cast<size_t>(-1);
  size_t best = none;
  if (!padding_.empty()) {
    for (size_t p : buckets_) {
      const auto& dims = m_.programs[p].dims;
      const bool fits = std::all_of(sizes.begin(), sizes.end(), [&](const auto& nv) {
        auto it = dims.find(nv.first);
        return it != dims.end() && (it->second == nv.second || (padding_.count(nv.first) && it->second >= nv.second));
      });
      if (fits && (best == none || Product(dims) < Product(m_.programs[best].dims))) best = p;
    }
  }
  if (best != none) return best;
  std::string buckets, padded;
  for (size_t p : buckets_) buckets += (buckets.empty() ? "" : "; ") + Spell(m_.programs[p].dims);
  for (const auto& [dim, mask] : padding_) padded += (padded.empty() ? "" : ", ") + dim;
  if (!padded.empty()) padded = ", " + padded + " padded up to them";
  throw InvalidInputError("sizes " + Spell(sizes) + " have no bucket program: " + label_ +
                          " runs its bucket sizes only (" + buckets + padded +
                          "); send one of them (only jax runs the polymorphic program, model.jaxexport, at "
                          "every admissible size)");
}

Plan Binder::Choose(const std::map<std::string, TensorView>& inputs) const {
  for (const auto& [name, view] : inputs) CheckDeclared(name, view);
  for (const TensorSpec& spec : m_.inputs) {
    if (!inputs.count(spec.name)) {
      throw InvalidInputError("missing input '" + spec.name + "': " + label_ + " expects " + Info(spec.dtype).datatype +
                              " " + ShapeText(spec.shape));
    }
  }
  Plan plan;
  if (!buckets_.empty()) {
    plan.sizes = BindSizes(inputs);
    plan.program = BucketFor(plan.sizes);
    for (const auto& [name, size] : plan.sizes) plan.padded = plan.padded || m_.programs[plan.program].dims.at(name) != size;
    return plan;
  }
  if (batched_) {
    std::vector<int64_t> rows;
    for (size_t i = 0; i < m_.inputs.size(); ++i) {
      if (batched_input_[i]) rows.push_back(inputs.at(m_.inputs[i].name).shape.at(0));
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    if (rows.size() != 1) {
      throw InvalidInputError("batched inputs " + Quoted(m_.batching.batched_inputs) +
                              " disagree on the batch size: " + List(rows));
    }
    plan.rows = rows[0];
    if (plan.rows > static_cast<int64_t>(sizes_.back())) {
      throw InvalidInputError("batch size " + std::to_string(plan.rows) + " exceeds max_batch_size " +
                              std::to_string(sizes_.back()) + " of " + label_ + " (exported batch sizes " +
                              List(sizes_) + "); split the request");
    }
    const uint32_t size = *std::lower_bound(sizes_.begin(), sizes_.end(), static_cast<uint32_t>(plan.rows));
    plan.program = by_size_.at(size);
    plan.padded = plan.rows < static_cast<int64_t>(size);
    return plan;
  }
  plan.program = fixed_.front();
  plan.rows = std::max<int64_t>(1, m_.programs[plan.program].batch_size);
  return plan;
}

const std::vector<int64_t>& Binder::ProgramInputShape(size_t program, size_t input) const {
  return input_shapes_[program][input];
}

const std::vector<int64_t>& Binder::ProgramOutputShape(size_t program, size_t output) const {
  return m_.programs[program].results[outputs_[program][output]].shape;
}

bool Binder::InputPadded(const Plan& plan, size_t input, const std::vector<int64_t>& request_shape) const {
  return inputs_[plan.program][input] >= 0 && request_shape != input_shapes_[plan.program][input];
}

std::vector<int64_t> Binder::OutputShape(const Plan& plan, size_t output) const {
  std::vector<int64_t> shape = ProgramOutputShape(plan.program, output);
  if (!plan.padded) return shape;
  if (batched_ && batched_output_[output] && !shape.empty()) shape[0] = plan.rows;
  const std::vector<std::string>& names = m_.outputs[output].dim_names;
  for (size_t axis = 0; axis < names.size() && axis < shape.size(); ++axis) {
    auto size = plan.sizes.find(names[axis]);
    if (padding_.count(names[axis]) && size != plan.sizes.end()) shape[axis] = size->second;
  }
  return shape;
}

Tensor Binder::PadInput(const Plan& plan, size_t input, const TensorView& value) const {
  if (batched_ && batched_input_[input]) return PadRows(value, m_.programs[plan.program].batch_size);
  return PadZeros(value, input_shapes_[plan.program][input]);
}

Tensor PadRows(const TensorView& value, int64_t size) {
  std::vector<int64_t> shape = value.shape;
  const int64_t rows = shape.at(0);
  shape[0] = size;
  Tensor out(value.dtype, shape);
  const size_t row = rows > 0 ? value.size_bytes / static_cast<size_t>(rows) : 0;
  char* dst = static_cast<char*>(out.mutable_data());
  if (row == 0) return out;
  std::memcpy(dst, value.data, value.size_bytes);
  const char* last = static_cast<const char*>(value.data) + (rows - 1) * row;
  for (int64_t r = rows; r < size; ++r) std::memcpy(dst + r * row, last, row);
  return out;
}

Tensor PadZeros(const TensorView& value, const std::vector<int64_t>& shape) {
  Tensor out(value.dtype, shape);
  CopyLeading(static_cast<const char*>(value.data), value.shape, static_cast<char*>(out.mutable_data()), shape,
              value.shape, ItemSize(value.dtype));
  return out;
}

void CutTo(const void* src, const std::vector<int64_t>& src_shape, size_t itemsize, void* dst,
           const std::vector<int64_t>& dst_shape) {
  CopyLeading(static_cast<const char*>(src), src_shape, static_cast<char*>(dst), dst_shape, dst_shape, itemsize);
}

}  // namespace jaxport::internal
