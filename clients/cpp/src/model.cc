// Runtime and Model: see jaxport/model.h.
#include "jaxport/model.h"

#include <algorithm>
#include <cstring>

#include "binding.h"
#include "compile_options.h"
#include "jaxport/artifact.h"
#include "jaxport/checks.h"
#include "pjrt.h"

namespace jaxport {
namespace internal {

struct RuntimeState {
  std::string plugin_path;
  RuntimeOptions options;
  const PJRT_Api* api = nullptr;
  int major = 0, minor = 0;
  std::unique_ptr<pjrt::Client> client;
  bool has_window = false;
  StablehloVersion min{}, max{};
  std::string min_text, max_text, window_missing;
  std::string compile_options;
};

// One compiled fixed-shape program.
struct ProgramState {
  size_t index = 0;
  std::unique_ptr<pjrt::Executable> exe;
  CheckTable checks;
  std::vector<PJRT_Buffer*> args;  // resident @main arguments; null where an input goes
};

struct ModelState {
  // Declared first, destroyed last: the client outlives every buffer and executable below.
  std::shared_ptr<const RuntimeState> runtime;
  std::string name, dir;
  Manifest manifest;
  std::unique_ptr<Binder> binder;
  std::vector<ModelTensor> inputs, outputs;
  std::vector<int64_t> batch_sizes;
  std::vector<Bucket> buckets;
  std::map<std::string, std::string> padding;
  std::map<std::string, pjrt::HostUpload> parameters;  // resident, shared by every program
  pjrt::HostUpload platform_index;
  std::vector<std::unique_ptr<ProgramState>> programs;  // by manifest index; null: polymorphic
};

}  // namespace internal

using internal::ModelState;
using internal::ProgramState;
using internal::RuntimeState;

namespace {

std::string VersionText(const StablehloVersion& v) {
  return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
}

std::string GoStrings(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + v[i];
  return out + "]";
}

// Why this library cannot run the model ("" when it can): the server's native engine's rules
// (bridge/front/engine/eligible.go), which also bind every program's check table.
std::string Eligible(const Manifest& m, const std::string& platform) {
  if (m.nr_devices > 1) {
    return "sharded program for " + std::to_string(m.nr_devices) + " devices (mesh " + m.mesh +
           "): this library runs one device";
  }
  if (std::find(m.platforms.begin(), m.platforms.end(), platform) == m.platforms.end()) {
    return "lowered for " + GoStrings(m.platforms) + ", the PJRT plugin runs " + platform;
  }
  for (const Program& p : m.programs) {
    if (p.polymorphic) continue;
    if (!p.custom_call_targets.empty()) {
      std::string targets;
      for (const std::string& t : p.custom_call_targets) targets += (targets.empty() ? "" : ", ") + t;
      return p.mlirbc_file + " has custom calls " + targets + " (no kernel promise for a PJRT plugin)";
    }
    for (const Argument& a : p.arguments) {
      if (a.role == ArgumentRole::kToken) return p.mlirbc_file + " takes token argument " + a.name + " (ordered effects)";
    }
    for (const Result& r : p.results) {
      if (r.role == ResultRole::kToken) return p.mlirbc_file + " returns token result " + r.name + " (ordered effects)";
    }
  }
  return "";
}

const uint8_t kEmpty[64] = {};

// Executes `program` with the inputs by @main position (the other arguments are resident);
// the input views are used in place (zero-copy) and released before this returns.
std::vector<pjrt::Buffer> Execute(const ModelState& s, const ProgramState& p, const std::vector<const TensorView*>& by_arg) {
  const Program& spec = s.manifest.programs[p.index];
  std::vector<pjrt::HostUpload> uploads;
  uploads.reserve(by_arg.size());
  std::vector<PJRT_Buffer*> args = p.args;
  for (size_t i = 0; i < spec.arguments.size(); ++i) {
    if (spec.arguments[i].role != ArgumentRole::kInput) continue;
    const TensorView& v = *by_arg[i];
    const void* data = v.size_bytes == 0 ? kEmpty : v.data;
    uploads.push_back(s.runtime->client->Upload(data, spec.arguments[i].dtype, spec.arguments[i].shape, true));
    args[i] = uploads.back().buffer->get();
  }
  std::vector<pjrt::Buffer> results = p.exe->Execute(args);
  for (pjrt::HostUpload& u : uploads) u.Release();
  return results;
}

// Copies result `r` of `program` into `dst` of `shape` (the program's shape, or a leading
// block of it when the request was padded).
void CopyOut(const pjrt::Buffer& buffer, const Result& r, void* dst, const std::vector<int64_t>& shape) {
  if (shape == r.shape) {
    buffer.ToHost(dst, r.byte_size);
    return;
  }
  Tensor whole(r.dtype, r.shape);
  buffer.ToHost(whole.mutable_data(), whole.size_bytes());
  internal::CutTo(whole.data(), r.shape, ItemSize(r.dtype), dst, shape);
}

// The views of one call by @main position, padded where the plan says (storage kept in `padded`).
std::vector<const TensorView*> Bind(const ModelState& s, const internal::Plan& plan, const Inputs& inputs,
                                    std::vector<TensorView>& padded_views, std::vector<Tensor>& padded) {
  const Program& spec = s.manifest.programs[plan.program];
  std::vector<const TensorView*> by_arg(spec.arguments.size(), nullptr);
  padded.reserve(s.manifest.inputs.size());
  padded_views.reserve(s.manifest.inputs.size());
  for (size_t i = 0; i < s.manifest.inputs.size(); ++i) {
    const int at = s.binder->InputArgument(plan.program, i);
    if (at < 0) continue;  // jax dropped this input: validated, not passed
    const TensorView& view = inputs.at(s.manifest.inputs[i].name);
    if (plan.padded && s.binder->InputPadded(plan, i, view.shape)) {
      padded.push_back(s.binder->PadInput(plan, i, view));
      padded_views.push_back(padded.back().view());
      by_arg[at] = &padded_views.back();
    } else {
      by_arg[at] = &view;
    }
  }
  return by_arg;
}

// Raises the first fired check of `results` (only the check results are copied to the host).
void RaiseIfFired(const ProgramState& p, const Program& spec, const std::vector<pjrt::Buffer>& results) {
  if (p.checks.empty()) return;
  std::vector<Tensor> host(results.size());
  std::vector<TensorView> views(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = spec.results[i];
    if (r.role != ResultRole::kCheck) continue;
    host[i] = Tensor(r.dtype, r.shape);
    results[i].ToHost(host[i].mutable_data(), host[i].size_bytes());
    views[i] = host[i].view();
  }
  if (auto failure = p.checks.Failure(views)) throw CheckFailedError(failure->kind, failure->code, failure->message);
}

}  // namespace

StablehloVersion ParseStablehloVersion(const std::string& text) {
  StablehloVersion v{};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t dot = text.find('.', start);
    const std::string part = text.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos ||
        (i < 2) != (dot != std::string::npos)) {
      throw ArtifactError("StableHLO version '" + text + "' is not major.minor.patch");
    }
    v[i] = std::stoll(part);
    start = dot + 1;
  }
  return v;
}

// ---- Runtime -------------------------------------------------------------------------------

Runtime Runtime::Load(const std::string& plugin_path, const RuntimeOptions& options) {
  auto state = std::make_shared<RuntimeState>();
  state->plugin_path = plugin_path;
  state->options = options;
  const pjrt::Plugin plugin = pjrt::Plugin::Load(plugin_path);
  state->api = plugin.api();
  state->major = plugin.major_version();
  state->minor = plugin.minor_version();
  const auto attributes = plugin.Attributes();
  auto min = attributes.find("stablehlo_minimum_version");
  auto max = attributes.find("stablehlo_current_version");
  if (min != attributes.end() && max != attributes.end() && min->second.ints.size() == 3 &&
      max->second.ints.size() == 3) {
    state->has_window = true;
    std::copy(min->second.ints.begin(), min->second.ints.end(), state->min.begin());
    std::copy(max->second.ints.begin(), max->second.ints.end(), state->max.begin());
  } else {
    state->window_missing = std::string("the PJRT plugin ") + plugin_path + " reports no " +
                            (min == attributes.end() ? "stablehlo_minimum_version" : "stablehlo_current_version") +
                            " attribute: its StableHLO window is unknown";
  }
  state->client = pjrt::Client::Create(state->api);
  state->compile_options = internal::CompileOptions(options.fast_min_max);
  return Runtime(std::move(state));
}

const std::string& Runtime::plugin_path() const { return state_->plugin_path; }
const std::string& Runtime::platform() const { return state_->client->platform(); }
int Runtime::pjrt_major_version() const { return state_->major; }
int Runtime::pjrt_minor_version() const { return state_->minor; }
bool Runtime::has_window() const { return state_->has_window; }
StablehloVersion Runtime::window_min() const { return state_->min; }
StablehloVersion Runtime::window_max() const { return state_->max; }
const RuntimeOptions& Runtime::options() const { return state_->options; }

// ---- Model ---------------------------------------------------------------------------------

Model::Model(std::unique_ptr<ModelState> state) : state_(std::move(state)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::Open(const Runtime& runtime, const std::string& dir, const OpenOptions& options) {
  auto s = std::make_unique<ModelState>();
  s->runtime = runtime.state_;
  s->dir = dir;
  s->manifest = LoadManifest(dir);
  const Manifest& m = s->manifest;
  s->name = options.name.empty() ? m.name : options.name;
  const std::string label = "model '" + s->name + "'";
  const RuntimeState& rt = *s->runtime;
  if (std::string why = Eligible(m, rt.client->platform()); !why.empty()) throw ArtifactError(label + ": " + why);
  try {
    s->binder = std::make_unique<internal::Binder>(s->manifest, label);
  } catch (const ArtifactError& e) {
    throw ArtifactError(label + ": " + e.what());
  }
  // The StableHLO window: the artifact's target between the plugin's minimum and current.
  if (!rt.has_window) throw ArtifactError(label + ": " + rt.window_missing);
  const StablehloVersion target = ParseStablehloVersion(m.stablehlo_target.empty() ? "(none)" : m.stablehlo_target);
  if (target < rt.min || rt.max < target) {
    throw ArtifactError("artifact StableHLO target " + m.stablehlo_target + " is outside the plugin's window " +
                        VersionText(rt.min) + ".." + VersionText(rt.max) + " (" + rt.plugin_path +
                        "); re-export for this plugin or use a plugin whose window contains it");
  }

  // Check tables before anything is compiled: a message this library cannot reproduce refuses
  // the model in one line.
  std::vector<CheckTable> checks(m.programs.size());
  for (size_t i = 0; i < m.programs.size(); ++i) {
    if (m.programs[i].polymorphic) continue;
    try {
      checks[i] = CheckTable::Bind(m.checks, m.programs[i].results);
    } catch (const ArtifactError& e) {
      throw ArtifactError(label + ": " + m.programs[i].mlirbc_file + ": check table: " + e.what());
    }
  }
  // Parameters: read, checked and uploaded once (the host copy goes once the device has it).
  for (const Program& p : m.programs) {
    if (p.polymorphic) continue;
    for (const Argument& a : p.arguments) {
      if (a.role != ArgumentRole::kParameter || s->parameters.count(a.name)) continue;
      const Tensor host = ReadParameter(dir, a);
      s->parameters.emplace(a.name, rt.client->Upload(host.data() ? host.data() : kEmpty, a.dtype, a.shape, false));
    }
  }
  // Every other listed file (goldens, labels) after the parameters, which name themselves.
  if (options.verify_all_files) VerifyFiles(dir, m);
  for (size_t i = 0; i < m.programs.size(); ++i) {
    const Program& spec = m.programs[i];
    s->programs.emplace_back();
    if (spec.polymorphic) continue;
    auto p = std::make_unique<ProgramState>();
    p->index = i;
    p->checks = std::move(checks[i]);
    const std::string code = ReadListedFile(dir, m, spec.mlirbc_file);
    try {
      p->exe = rt.client->Compile(code, rt.compile_options);
    } catch (const PjrtError& e) {
      throw PjrtError(spec.mlirbc_file + " does not compile on " + rt.plugin_path + ": " + e.what(), e.pjrt_code());
    }
    if (p->exe->num_outputs() != spec.results.size()) {
      throw ArtifactError(spec.mlirbc_file + " compiled to " + std::to_string(p->exe->num_outputs()) +
                          " results, the manifest lists " + std::to_string(spec.results.size()));
    }
    p->args.resize(spec.arguments.size(), nullptr);
    for (size_t a = 0; a < spec.arguments.size(); ++a) {
      const Argument& arg = spec.arguments[a];
      if (arg.role == ArgumentRole::kParameter) {
        p->args[a] = s->parameters.at(arg.name).buffer->get();
      } else if (arg.role == ArgumentRole::kPlatformIndex) {
        if (!s->platform_index.buffer) {
          const int64_t index = std::find(m.platforms.begin(), m.platforms.end(), rt.client->platform()) - m.platforms.begin();
          int64_t value[1] = {index};  // little-endian: an int32 is its first 4 bytes
          s->platform_index = rt.client->Upload(value, arg.dtype, {}, false);
        }
        p->args[a] = s->platform_index.buffer->get();
      }
    }
    s->programs.back() = std::move(p);
  }

  // What callers see.
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const TensorSpec& t = m.inputs[i];
    const bool batched = std::count(m.batching.batched_inputs.begin(), m.batching.batched_inputs.end(), t.name) > 0;
    s->inputs.push_back(ModelTensor{t.name, t.dtype, t.shape, t.dim_names, batched});
  }
  for (const TensorSpec& t : m.outputs) {
    const bool batched = std::count(m.batching.batched_outputs.begin(), m.batching.batched_outputs.end(), t.name) > 0;
    s->outputs.push_back(ModelTensor{t.name, t.dtype, t.shape, t.dim_names, batched});
  }
  if (s->binder->batched()) {
    for (uint32_t b : m.batching.batch_sizes) s->batch_sizes.push_back(b);
  }
  for (size_t p : s->binder->bucket_programs()) s->buckets.push_back(Bucket{m.programs[p].dims, m.programs[p].mlirbc_file});
  for (const Padding& pad : m.padding) s->padding[pad.dim] = pad.mask_input;
  return Model(std::move(s));
}

const std::string& Model::name() const { return state_->name; }
const std::string& Model::dir() const { return state_->dir; }
const Manifest& Model::manifest() const { return state_->manifest; }
const std::vector<ModelTensor>& Model::inputs() const { return state_->inputs; }
const std::vector<ModelTensor>& Model::outputs() const { return state_->outputs; }
const std::vector<int64_t>& Model::batch_sizes() const { return state_->batch_sizes; }
const std::vector<Dimension>& Model::dimensions() const { return state_->manifest.dimensions; }
const std::vector<Bucket>& Model::buckets() const { return state_->buckets; }
const std::map<std::string, std::string>& Model::padding() const { return state_->padding; }

std::map<std::string, std::vector<int64_t>> Model::OutputShapes(const Inputs& inputs) const {
  const internal::Plan plan = state_->binder->Choose(inputs);
  std::map<std::string, std::vector<int64_t>> out;
  for (size_t o = 0; o < state_->manifest.outputs.size(); ++o) {
    out[state_->manifest.outputs[o].name] = state_->binder->OutputShape(plan, o);
  }
  return out;
}

Outputs Model::Run(const Inputs& inputs) const {
  const ModelState& s = *state_;
  const internal::Plan plan = s.binder->Choose(inputs);
  const ProgramState& p = *s.programs[plan.program];
  const Program& spec = s.manifest.programs[plan.program];
  std::vector<Tensor> padded;
  std::vector<TensorView> padded_views;
  const std::vector<pjrt::Buffer> results = Execute(s, p, Bind(s, plan, inputs, padded_views, padded));
  RaiseIfFired(p, spec, results);
  Outputs out;
  for (size_t o = 0; o < s.manifest.outputs.size(); ++o) {
    const int at = s.binder->OutputResult(plan.program, o);
    const Result& r = spec.results[at];
    Tensor t(r.dtype, s.binder->OutputShape(plan, o));
    CopyOut(results[at], r, t.mutable_data(), t.shape());
    out.emplace(s.manifest.outputs[o].name, std::move(t));
  }
  return out;
}

void Model::RunInto(const Inputs& inputs, const std::map<std::string, MutableTensorView>& outputs) const {
  const ModelState& s = *state_;
  const internal::Plan plan = s.binder->Choose(inputs);
  std::vector<std::pair<size_t, const MutableTensorView*>> wanted;
  for (const auto& [name, view] : outputs) {
    auto it = std::find_if(s.manifest.outputs.begin(), s.manifest.outputs.end(),
                           [&](const TensorSpec& t) { return t.name == name; });
    if (it == s.manifest.outputs.end()) {
      std::string known;
      for (const TensorSpec& t : s.manifest.outputs) known += (known.empty() ? "'" : ", '") + t.name + "'";
      throw InvalidInputError("unknown output '" + name + "': " + s.binder->label() + " has outputs " + known);
    }
    const size_t o = static_cast<size_t>(it - s.manifest.outputs.begin());
    const std::vector<int64_t> shape = s.binder->OutputShape(plan, o);
    if (view.dtype != it->dtype || view.shape != shape ||
        view.size_bytes != static_cast<size_t>(NumElements(shape)) * ItemSize(it->dtype) ||
        (view.data == nullptr && view.size_bytes > 0)) {
      throw InvalidInputError("output '" + name + "': the caller's buffer is " + Info(view.dtype).datatype + " " +
                              ShapeText(view.shape) + " of " + std::to_string(view.size_bytes) +
                              " bytes; this call gives " + Info(it->dtype).datatype + " " + ShapeText(shape));
    }
    wanted.emplace_back(o, &view);
  }
  const ProgramState& p = *s.programs[plan.program];
  const Program& spec = s.manifest.programs[plan.program];
  std::vector<Tensor> padded;
  std::vector<TensorView> padded_views;
  const std::vector<pjrt::Buffer> results = Execute(s, p, Bind(s, plan, inputs, padded_views, padded));
  RaiseIfFired(p, spec, results);
  for (const auto& [o, view] : wanted) {
    const int at = s.binder->OutputResult(plan.program, o);
    CopyOut(results[at], spec.results[at], view->data, view->shape);
  }
}

std::vector<Tensor> Model::RunProgram(size_t program, const Inputs& inputs) const {
  const ModelState& s = *state_;
  if (program >= s.programs.size() || !s.programs[program]) {
    throw InvalidInputError("program " + std::to_string(program) + ": " + s.binder->label() +
                            " has no fixed-shape program of that index");
  }
  const Program& spec = s.manifest.programs[program];
  for (const auto& [name, view] : inputs) {
    if (std::none_of(s.manifest.inputs.begin(), s.manifest.inputs.end(), [&](const TensorSpec& t) { return t.name == name; })) {
      throw InvalidInputError("unexpected input '" + name + "' for " + spec.mlirbc_file);
    }
  }
  std::vector<const TensorView*> by_arg(spec.arguments.size(), nullptr);
  for (size_t a = 0; a < spec.arguments.size(); ++a) {
    const Argument& arg = spec.arguments[a];
    if (arg.role != ArgumentRole::kInput) continue;
    auto it = inputs.find(arg.name);
    if (it == inputs.end()) throw InvalidInputError("missing input '" + arg.name + "' of " + spec.mlirbc_file);
    const TensorView& v = it->second;
    if (v.dtype != arg.dtype || v.shape != arg.shape || v.size_bytes != arg.byte_size || (v.data == nullptr && v.size_bytes)) {
      throw InvalidInputError("input '" + arg.name + "': " + spec.mlirbc_file + " takes " + Info(arg.dtype).datatype +
                              " " + ShapeText(arg.shape) + ", got " + Info(v.dtype).datatype + " " +
                              ShapeText(v.shape) + " of " + std::to_string(v.size_bytes) + " bytes");
    }
    by_arg[a] = &v;
  }
  const std::vector<pjrt::Buffer> results = Execute(s, *s.programs[program], by_arg);
  std::vector<Tensor> out;
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = spec.results[i];
    if (results[i].ElementType() != pjrt::BufferType(r.dtype) || results[i].Dimensions() != r.shape) {
      throw Error(StatusCode::kInternal, spec.mlirbc_file + ": result " + r.name + " is not " + Name(r.dtype) +
                                             ShapeText(r.shape) + " as the manifest says");
    }
    Tensor t(r.dtype, r.shape);
    results[i].ToHost(t.mutable_data(), t.size_bytes());
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace jaxport
