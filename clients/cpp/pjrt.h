// A thin C++17 layer over the PJRT C API (pjrt_c_api.h): a plugin loaded with dlopen, and RAII
// owners for every handle it gives out (client, loaded executable, executable, buffer, event,
// error). Every PJRT_Error is checked: a failed call throws PjrtError carrying the plugin's
// message, and the error object is destroyed first, so nothing leaks on an error path.
//
// The calls, in the order an artifact consumer makes them (docs/cpp.md):
//   Plugin::Load           dlopen, GetPjrtApi, API version check, PJRT_Plugin_Initialize
//   Plugin::Attributes     PJRT_Plugin_Attributes (stablehlo_minimum/current_version)
//   Client::Create         PJRT_Client_Create, PJRT_Client_PlatformName,
//                          PJRT_Client_AddressableDevices
//   Client::Compile        PJRT_Client_Compile ("mlir" program = the portable bytecode)
//   Client::Upload         PJRT_Client_BufferFromHostBuffer (+ PJRT_Event_Await)
//   Executable::Execute    PJRT_LoadedExecutable_Execute (+ PJRT_Event_Await)
//   Buffer::ToHost         PJRT_Buffer_ToHostBuffer (+ PJRT_Event_Await)
#ifndef JAXPORT_CPP_PJRT_H_
#define JAXPORT_CPP_PJRT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

namespace jaxport::pjrt {

// A failed PJRT call: "<what>: <plugin message> (PJRT error code N)".
class PjrtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Destroys one kind of handle (errors of the destroy call itself are printed, not thrown:
// destructors run during unwinding).
void Destroy(const PJRT_Api* api, PJRT_Error* error) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Event* event) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Buffer* buffer) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Executable* executable) noexcept;
void Destroy(const PJRT_Api* api, PJRT_LoadedExecutable* executable) noexcept;
void Destroy(const PJRT_Api* api, PJRT_Client* client) noexcept;

template <typename T>
struct Deleter {
  const PJRT_Api* api = nullptr;
  void operator()(T* handle) const noexcept {
    if (handle != nullptr) Destroy(api, handle);
  }
};

// Sole owner of one PJRT handle.
template <typename T>
using Owned = std::unique_ptr<T, Deleter<T>>;

template <typename T>
Owned<T> Own(const PJRT_Api* api, T* handle) {
  return Owned<T>(handle, Deleter<T>{api});
}

// Throws PjrtError("<what>: <message>") when `error` is not null (destroying it first).
void Check(const PJRT_Api* api, PJRT_Error* error, const std::string& what);

// Waits for `event` and destroys it; throws when it completed with an error.
void AwaitAndDestroy(const PJRT_Api* api, PJRT_Event* event, const std::string& what);

// One plugin attribute (PJRT_Plugin_Attributes): a string, an int64 (also bool), a float, or
// an int64 list (versions such as stablehlo_current_version = [1, 20, 0]).
struct Attribute {
  std::string text;
  std::vector<int64_t> ints;
};

class Plugin {
 public:
  // dlopen(path) (RTLD_NOW | RTLD_LOCAL), GetPjrtApi(), refuse a major version other than the
  // header's or a minor version older than it, then PJRT_Plugin_Initialize. The library stays
  // loaded for the life of the process: XLA plugins own threads and static state and do not
  // support dlclose.
  static Plugin Load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  int major_version() const;
  int minor_version() const;
  std::map<std::string, Attribute> Attributes() const;

 private:
  explicit Plugin(const PJRT_Api* api) : api_(api) {}
  const PJRT_Api* api_;
};

class Buffer {
 public:
  Buffer(const PJRT_Api* api, PJRT_Buffer* raw) : api_(api), buffer_(Own(api, raw)) {}
  PJRT_Buffer* get() const { return buffer_.get(); }
  PJRT_Buffer_Type ElementType() const;
  std::vector<int64_t> Dimensions() const;
  // The buffer's bytes in dense row-major order (an explicit major-to-minor host layout).
  std::vector<char> ToHost() const;

 private:
  const PJRT_Api* api_;
  Owned<PJRT_Buffer> buffer_;
};

class Executable {
 public:
  Executable(const PJRT_Api* api, PJRT_LoadedExecutable* raw)
      : api_(api), executable_(Own(api, raw)) {}
  // Results of @main (PJRT_Executable_NumOutputs of the loaded executable's executable).
  size_t NumOutputs() const;
  // Runs once on one device with `arguments` in @main order; waits for completion.
  std::vector<Buffer> Execute(const std::vector<PJRT_Buffer*>& arguments) const;

 private:
  const PJRT_Api* api_;
  Owned<PJRT_LoadedExecutable> executable_;
};

class Client {
 public:
  static Client Create(const PJRT_Api* api);
  const std::string& platform() const { return platform_; }
  size_t num_devices() const { return devices_.size(); }
  // Compiles `code` ("mlir": StableHLO bytecode or text) with serialized CompileOptionsProto
  // `options`.
  Executable Compile(const std::string& code, const std::string& options) const;
  // A device buffer on the first addressable device from dense row-major host bytes.
  Buffer Upload(const void* data, PJRT_Buffer_Type type, const std::vector<int64_t>& dims) const;

 private:
  Client(const PJRT_Api* api, PJRT_Client* raw) : api_(api), client_(Own(api, raw)) {}
  const PJRT_Api* api_;
  Owned<PJRT_Client> client_;
  std::string platform_;
  std::vector<PJRT_Device*> devices_;
};

// xla.CompileOptionsProto, serialized by hand (the few fields a single-device program needs):
// executable_build_options { device_ordinal: -1, num_replicas: 1, num_partitions: 1 }. An
// empty options buffer makes the plugin abort the process (CHECK replica_count > 0). No
// debug_options: a DebugOptions message here REPLACES XLA's defaults as a whole (every field
// not set becomes 0; measured: compilation then fails, "Too many extra compilation parts ...
// parallel_codegen_split_count (0)"), so XLA options go through XLA_FLAGS (AppendXlaFlag).
std::string CompileOptions();

// Appends `flag` to the XLA_FLAGS environment variable. XLA reads it once, when the plugin
// first builds its default DebugOptions: call this before Plugin::Load. jaxport-pjrt-run adds
// --xla_cpu_enable_fast_min_max=false (this plugin's default is fast min/max: a NaN is
// dropped by min/max, where JAX propagates it).
void AppendXlaFlag(const std::string& flag);

// The PJRT element type of a StableHLO element type name (manifest dtype.mlir: "f32", "i1").
PJRT_Buffer_Type BufferType(const std::string& mlir);

}  // namespace jaxport::pjrt

#endif  // JAXPORT_CPP_PJRT_H_
