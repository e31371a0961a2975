// Running a jaxport artifact through a PJRT plugin (docs/cpp.md).
//
//   jaxport::Runtime runtime = jaxport::Runtime::Load("pjrt_c_api_cpu_plugin.so");
//   jaxport::Model model = jaxport::Model::Open(runtime, "models/mlp/1");
//   auto outputs = model.Run({{"x", jaxport::TensorView(x.data(), {rows, 16})}});
//   const float* probs = outputs.at("probs").values<float>();
//
// Runtime: one PJRT plugin and one client on it (the plugin is loaded once per process and
// never unloaded). Model: an opened artifact: its manifest checked, every file it reads
// checked against its sha256, the artifact's StableHLO target checked against the plugin's
// window, every fixed-shape program (each batch size, each bucket) compiled with JAX's
// compile semantics, and the parameters uploaded once, resident on the device, shared by every
// program and call.
//
// Lifetime and ownership: Runtime and Model are RAII owners (move-only Model; Runtime is a
// cheap shared handle). A Model keeps what it needs of its Runtime alive: the Runtime object may
// go first. Run's input views must stay valid and unchanged for the call only.
//
// Thread safety: a Model is immutable once Open returns. Run, RunInto, RunProgram and
// OutputShapes are const and may be called from any number of threads at once on the same
// Model (each call has its own device buffers; PJRT executables and clients are thread-safe).
// Opening models on one Runtime from several threads is safe too. Moving or destroying a
// Model while a call on it runs is not (as for any C++ object).
//
// Errors: jaxport::Error and its kinds (jaxport/error.h), each one line naming what is wrong.
#ifndef JAXPORT_MODEL_H_
#define JAXPORT_MODEL_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "jaxport/error.h"
#include "jaxport/manifest.h"
#include "jaxport/tensor.h"

namespace jaxport {

namespace internal {
struct RuntimeState;
struct ModelState;
}  // namespace internal

struct RuntimeOptions {
  // Keep XLA's CPU fast min/max (a NaN is dropped by min/max, where JAX propagates it). Off by
  // default: every program is compiled with xla_cpu_enable_fast_min_max=false, JAX's semantics.
  bool fast_min_max = false;
};

// A StableHLO version, major.minor.patch.
using StablehloVersion = std::array<int64_t, 3>;

class Runtime {
 public:
  // Loads the PJRT plugin at `plugin_path` (dlopen) and creates a client on it (synchronous
  // execution on the caller's thread when the plugin offers it). PjrtError names the plugin.
  static Runtime Load(const std::string& plugin_path, const RuntimeOptions& options = {});

  const std::string& plugin_path() const;
  const std::string& platform() const;  // "cpu", "cuda", ...
  int pjrt_major_version() const;
  int pjrt_minor_version() const;
  // The StableHLO versions the plugin deserializes (its plugin attributes); has_window() false
  // when the plugin does not report them (Open then refuses every artifact, naming why).
  bool has_window() const;
  StablehloVersion window_min() const;
  StablehloVersion window_max() const;
  const RuntimeOptions& options() const;

 private:
  explicit Runtime(std::shared_ptr<const internal::RuntimeState> state) : state_(std::move(state)) {}
  std::shared_ptr<const internal::RuntimeState> state_;
  friend class Model;
};

struct OpenOptions {
  // The model's name in messages ("model 'NAME'"); the manifest's name when empty.
  std::string name;
  // Also check every file the manifest lists (goldens, labels) against its sha256, not only
  // the files Open reads (programs and parameters are always checked).
  bool verify_all_files = false;
};

// A model input or output as a caller sees it.
struct ModelTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;           // -1: the batch axis, or a symbolic dimension
  std::vector<std::string> dim_names;  // per axis, the symbolic dimension's name or ""
  bool batched = false;                // the leading axis is the batch (batch sizes)
};

// A bucket program of a model with symbolic dimensions: the sizes it was compiled for.
struct Bucket {
  std::map<std::string, int64_t> dims;
  std::string program;  // its mlirbcFile
};

using Inputs = std::map<std::string, TensorView>;
using Outputs = std::map<std::string, Tensor>;

class Model {
 public:
  // Opens the artifact directory `dir` on `runtime`. ArtifactError names the file, field or
  // parameter (or why this library cannot run the model); PjrtError carries the plugin's
  // message (e.g. a program that does not compile).
  static Model Open(const Runtime& runtime, const std::string& dir, const OpenOptions& options = {});

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::string& name() const;
  const std::string& dir() const;
  const Manifest& manifest() const;
  const std::vector<ModelTensor>& inputs() const;
  const std::vector<ModelTensor>& outputs() const;
  // Exported batch sizes, ascending (empty: the model is not batched). A call may carry any
  // number of rows up to the largest.
  const std::vector<int64_t>& batch_sizes() const;
  // Symbolic dimensions (empty for fixed-shape models), their bucket programs, and the
  // dimensions a request may be padded along (dimension -> mask input).
  const std::vector<Dimension>& dimensions() const;
  const std::vector<Bucket>& buckets() const;
  const std::map<std::string, std::string>& padding() const;

  // Runs the model on named inputs (each manifest input exactly once); every output by name.
  // The program is chosen and the request padded under the manifest's rules (docs/cpp.md).
  // InvalidInputError names the input at fault; CheckFailedError is a fired runtime check
  // with JAX's message; PjrtError a failed execution.
  Outputs Run(const Inputs& inputs) const;

  // Run writing each output into the caller's memory: `outputs` names every output (or a
  // subset: the others are not copied), each view of exactly the dtype and shape
  // OutputShapes gives. InvalidInputError otherwise.
  void RunInto(const Inputs& inputs, const std::map<std::string, MutableTensorView>& outputs) const;

  // The shape of every output for these inputs (after the program choice, before running).
  std::map<std::string, std::vector<int64_t>> OutputShapes(const Inputs& inputs) const;

  // Runs one fixed-shape program (index into manifest().programs) as it is: its inputs at
  // exactly the program's shapes, no padding, no check interpretation; every non-token
  // result in @main order (outputs, then check results). For tools (jaxport-pjrt-run's golden
  // check).
  std::vector<Tensor> RunProgram(size_t program, const Inputs& inputs) const;

 private:
  explicit Model(std::unique_ptr<internal::ModelState> state);
  std::unique_ptr<internal::ModelState> state_;
};

// "1.18.0" -> {1, 18, 0}; ArtifactError when it is not major.minor.patch.
StablehloVersion ParseStablehloVersion(const std::string& text);

}  // namespace jaxport

#endif  // JAXPORT_MODEL_H_
